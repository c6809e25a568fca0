"""``rollout()``: the multi-turn generate -> evaluate -> refine loop of Kevin (paper section 4, Fig. 2).

Each of the B*G trajectories runs T turns. On its turn t:

1. its prompt is built from its task and its earlier attempts (kernel, summary, sandbox feedback; never the
   earlier thoughts) by ``build_messages``;
2. ``policy.generate`` samples its response, in one batched call with every other trajectory whose turn is due;
3. the response is parsed; a response that failed to parse, or that hit the token limit (``truncated``), is a
   failed turn: a ``format_error`` result with the reason as feedback, scored 0, no sandbox call;
4. its kernel goes to the sandbox (``sandbox.evaluate_many``);
5. the verdict's feedback becomes part of its turn t+1 prompt.

Trajectories always run all T turns (no early stop on failure or success, paper section 3.4;
docs/method.md, "Rollout"). Scoring is not done here: a ``Turn`` keeps the raw ``EvalResult`` so that rewards can be
computed, and recomputed with other settings, afterwards (``kevin.core.records.rescore``).

Two schedules, one output (each trajectory's turns depend only on its own prompts and verdicts).

- Lockstep (``chunks=1``; always with ``resample``; the default except for kevin's ``Sandbox`` on CUDA): all B*G
  trajectories advance together, per turn ONE ``policy.generate`` over all of them, then ONE ``evaluate_many``
  over all the kernels.
- Pipelined (the default with kevin's ``Sandbox`` on CUDA, whose candidates compile in subprocesses on the CPU cores
  while the policy decodes on the GPU; `default_chunks`): the trajectories are cut into ``chunks`` groups of
  consecutive rows (one per task by default; with ``chunks`` = B*G, one per trajectory, each row then waiting for
  its own kernel alone). Each kernel is its own ``evaluate_many`` call, made by background threads from one
  first-in first-out queue, ``evaluation_slots`` at a time, so kernels are judged in the order they were written.
  A group is due for its next turn once all its kernels are judged, while other groups' kernels are still in the
  sandbox; when the policy is free, one generate call covers every group that is due, unless another is
  due before the call would end (`generate_now`). A policy whose ``generate`` takes ``on_done`` (`streams`;
  `kevin.core.policy.TransformersPolicy` does) hands each response over as soon as it stopped, and its kernel goes
  to the sandbox then, while the call samples the longer ones: a call lasts as long as its longest response. While
  kernels are in the sandbox or may be sent to it, the generate call runs inside the sandbox's ``device_in_use()``,
  so no kernel is timed while the policy uses the device; a policy whose ``generate`` also takes ``between_steps``
  steps aside between its decoding steps for a timing that waited long (`kevin.sandbox.sandbox.DevicesInUse.step_aside`,
  on CUDA), and its call goes on once the timing is done. Which rows
  share a generate call then depends on when verdicts arrive: a policy that samples from one random generator draws
  differently than in lockstep (the distribution of each response is the same). A sandbox's batch deadline
  (``SandboxConfig.batch_deadline_s``) bounds each kernel from the start of its own call, which for a kernel sent
  during a generate call includes the rest of that call (its timing waits for the call to end).

Costs. ``Turn.generation_s`` is its generate call's wall time (less the seconds it stepped aside for timings) shared
out in proportion to each response's sampled tokens (an API's reported counts when it gives no ids; characters when
some response has neither; evenly when all are empty): a long response occupied the batch longer. Generate calls
never overlap, so the turns' generation seconds sum to the time the policy was busy. ``Turn.evaluation_s`` is the
kernel's share of the sandbox's busy time, every moment's seconds split evenly among the kernels being judged at
that moment (`busy_shares`; in lockstep: the batch's wall time shared evenly among its kernels, the same rule); 0.0
for a turn that never reached the sandbox. The turns' evaluation seconds therefore sum to the time the sandbox was
busy, and with the rollout's wall time W: ``overlap_seconds`` = generation + evaluation - W is the time both worked
at once, and W - generation the time the rollout waited on the sandbox alone (all of the evaluation seconds in
lockstep).

The output is ordered task-major, then by trajectory index: ``out[b * G + g]`` is trajectory g of task b.

Beam search (``resample``, built by ``kevin.core.eval.beam.beam_resampler``): after a turn, a slot may drop its
history and continue a copy of another slot's of the same task (``reparent``); the copied turns are marked
``replica`` and the dropped ones kept in ``Trajectory.pruned``, so every generated kernel is counted exactly once.
It needs every slot's turn at once, so a rollout with ``resample`` runs in lockstep.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import inspect
import logging
import sys
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Callable, Sequence

from kevin.core.types import Trajectory, Turn
from kevin.sandbox.result import EvalResult

logger = logging.getLogger(__name__)

TRUNCATED_FEEDBACK = (
    "Your response was cut off at the token limit before it finished, so it was not evaluated. "
    "Think more concisely and make sure to finish with the complete code block and a short summary."
)


def format_error_result(error: str, *, truncated: bool = False) -> EvalResult:
    """The verdict for a response that never reached the sandbox: a parse failure or a truncation.

    >>> format_error_result("no code block defining ModelNew").feedback
    'Your response could not be parsed: no code block defining ModelNew.'
    """
    if truncated:
        return EvalResult("format_error", TRUNCATED_FEEDBACK, details={"truncated": True, "parse_error": error or None})
    return EvalResult(
        "format_error", f"Your response could not be parsed: {error.rstrip('.')}.", details={"parse_error": error}
    )


def share(total: float, weights: Sequence[float]) -> list[float]:
    """Split ``total`` in proportion to ``weights`` (evenly when they sum to 0).

    >>> share(6.0, [1, 2, 3])   # 6 * 1/6, 6 * 2/6, 6 * 3/6
    [1.0, 2.0, 3.0]
    >>> share(1.0, [0, 0])
    [0.5, 0.5]
    """
    if not weights:
        return []
    s = float(sum(weights))
    if s <= 0:
        return [total / len(weights)] * len(weights)
    return [total * w / s for w in weights]



def chunk_bounds(n_rows: int, chunks: int) -> list[tuple[int, int]]:
    """The ``[start, end)`` rows of ``chunks`` groups of consecutive rows of near-equal size (at most ``n_rows``).

    >>> chunk_bounds(8, 4)   # 4 tasks x 2 trajectories: one task per group
    [(0, 2), (2, 4), (4, 6), (6, 8)]
    >>> chunk_bounds(5, 2)   # cuts at 5 * 1 // 2 = 2
    [(0, 2), (2, 5)]
    """
    chunks = max(1, min(chunks, n_rows))
    cuts = [i * n_rows // chunks for i in range(chunks + 1)]
    return list(zip(cuts, cuts[1:]))


def started_histories(tasks: Sequence[Any], slots: Sequence[tuple[int, int]],
                      start_from: Sequence[Trajectory] | None, n_turns: int) -> list[list[Turn]]:
    """Each of the B*G ``slots``' judged turns so far: empty, or those of ``start_from`` (an earlier rollout's
    trajectories of the same tasks, task-major). ValueError when they are not that rollout's: another count, order or
    task, beam-search copies, or more than ``n_turns`` turns."""
    if start_from is None:
        return [[] for _ in slots]
    start_from = list(start_from)
    if len(start_from) != len(slots):
        raise ValueError(f"start_from has {len(start_from)} trajectories; this rollout has {len(slots)} (B*G)")
    for k, (trajectory, (b, g)) in enumerate(zip(start_from, slots)):
        where = (trajectory.task_id, trajectory.trajectory_index)
        if where != (tasks[b].task_id, g) or trajectory.pruned or any(t.replica for t in trajectory.turns):
            raise ValueError(f"start_from[{k}] is trajectory {where[1]} of {where[0]!r}, not {g} of "
                             f"{tasks[b].task_id!r}, or a beam search's: not this rollout's")
        if len(trajectory.turns) > n_turns:
            raise ValueError(f"start_from[{k}] has {len(trajectory.turns)} turns, more than n_turns={n_turns}")
    return [list(trajectory.turns) for trajectory in start_from]


def busy_shares(intervals: Sequence[tuple[float, float]]) -> list[float]:
    """Each ``(start, end)`` interval's share of the time that any of them covers: every moment's seconds split
    evenly among the intervals open at that moment. The shares sum to the length of the union.

    >>> busy_shares([(0.0, 2.0), (1.0, 3.0)])   # [0, 1] alone: 1; [1, 2] shared: 0.5 each; [2, 3] alone: 1
    [1.5, 1.5]
    >>> busy_shares([(0.0, 1.0), (0.0, 1.0), (5.0, 6.0)])   # a batch of two shares its second; the gap is no one's
    [0.5, 0.5, 1.0]
    """
    edges = sorted({t for interval in intervals for t in interval})
    at = {t: i for i, t in enumerate(edges)}
    opened = [0] * len(edges)  # intervals starting minus intervals ending at each edge
    for start, end in intervals:
        opened[at[start]] += 1
        opened[at[end]] -= 1
    # before[i]: one interval's share of [edges[0], edges[i]] were it open all along; an interval's share is the
    # difference at its ends (one sort and two passes: on_turn settles the costs every `TELL_EVERY_S`)
    before, open_ = [0.0], 0
    for i in range(len(edges) - 1):
        open_ += opened[i]
        before.append(before[-1] + ((edges[i + 1] - edges[i]) / open_ if open_ else 0.0))
    return [before[at[end]] - before[at[start]] if end > start else 0.0 for start, end in intervals]


def overlap_seconds(generation_s: float, evaluation_s: float, wall_s: float) -> float:
    """Seconds in which the policy generated while the sandbox judged: generation + evaluation - wall, at least 0.

    ``generation_s`` and ``evaluation_s`` are a rollout's summed ``Turn`` costs (the policy's and the sandbox's busy
    seconds) and ``wall_s`` its wall time; ``wall_s - generation_s`` is then the time it waited on the sandbox alone.
    Both compare schedules only at equal generation work: more, smaller generate calls raise the overlap and lower the
    wait without a shorter rollout, so the wall time is the measure of a schedule.

    >>> overlap_seconds(2.0, 3.0, 4.0)   # 2 + 3 busy seconds in 4 wall seconds: 1 of them both at once
    1.0
    """
    return max(0.0, generation_s + evaluation_s - wall_s)


def remaining_s(elapsed: float, latencies: Sequence[float]) -> float:
    """Expected seconds left of a kernel ``elapsed`` seconds into its evaluation, from the ``latencies`` of the kernels
    judged so far: the mean of ``d - elapsed`` over those that took longer (d > elapsed); when none did, the mean
    latency (a kernel past all of them is as likely as any to need a typical kernel's time again).

    >>> remaining_s(0.0, [1.0, 3.0]), remaining_s(2.0, [1.0, 3.0]), remaining_s(5.0, [1.0, 3.0])
    (2.0, 1.0, 2.0)
    """
    longer = [d - elapsed for d in latencies if d > elapsed]
    return sum(longer) / len(longer) if longer else sum(latencies) / len(latencies)


def due_in(outstanding: Sequence[tuple[int, float | None]], slots: int, latencies: Sequence[float]) -> dict[int, float]:
    """Estimated seconds until each group has all its kernels in the sandbox judged.

    ``outstanding``: the kernels in the order they were sent, each as (group, seconds since its evaluation began, or
    None while it waits for one of the ``slots``). ``latencies``: the seconds of the kernels judged so far. A running
    kernel has `remaining_s` left; a waiting one takes the first free slot in the order sent (first in, first out)
    and the mean latency there.

    >>> due_in([(0, 0.5), (1, None), (1, None)], slots=2, latencies=[2.0])   # group 1: 0 + 2, and 1.5 + 2
    {0: 1.5, 1: 3.5}
    """
    mean = sum(latencies) / len(latencies)
    running = [remaining_s(elapsed, latencies) for _, elapsed in outstanding if elapsed is not None]
    free = running + [0.0] * max(0, slots - len(running))  # when each slot is next free
    heapq.heapify(free)
    due: dict[int, float] = {}
    for group, elapsed in outstanding:
        if elapsed is None:
            finish = heapq.heappop(free) + mean
            heapq.heappush(free, finish)
        else:
            finish = remaining_s(elapsed, latencies)
        due[group] = max(due.get(group, 0.0), finish)
    return due


def generate_now(pending: bool, next_due_s: float | None, generate_s: float | None, waited_s: float = 0.0) -> bool:
    """Whether the pipelined rollout generates the groups that are due now rather than wait for more to be due.

    The model: a generate call takes about as long whatever its batch (decoding is bound by latency, not rows).
    ``next_due_s`` is the estimated wait (`due_in`) for the next group that still has a turn to generate
    (``pending``); ``generate_s`` is the last call's seconds. A call that ends before that group is due
    (``next_due_s >= generate_s``) makes no one wait; one that would end later would keep the next group waiting and
    add a call, so the rollout waits for it and generates both in one call (with a sandbox faster than the policy,
    the pipelined rollout thus makes lockstep's calls). With no group pending, go; with no estimate yet, wait.
    Whatever the estimate, the due groups wait at most one call's seconds (``waited_s``: the longest any of them has
    waited): the call that waiting would save costs no more, and a straggling kernel is not waited out (the estimate
    of a kernel slower than all judged so far stays at the mean latency).

    >>> generate_now(True, 60.0, 30.0), generate_now(True, 10.0, 30.0), generate_now(False, None, None)
    (True, False, True)
    >>> generate_now(True, 10.0, 30.0, waited_s=30.0)   # waited a call's seconds: go
    True
    """
    if not pending:
        return True
    if generate_s is not None and waited_s >= generate_s:
        return True
    if next_due_s is None or generate_s is None:
        return False
    return next_due_s >= generate_s


def default_chunks(sandbox: Any, n_tasks: int, n_trajectories: int) -> int:
    """The default number of pipelined groups: one per task (two halves of a single task's rows) for kevin's
    `Sandbox` on CUDA, where the candidates compile on the CPU cores while the policy decodes on the GPU; 1
    (lockstep) for its CPU backend, where a generate call and the compilers would share the same cores (and timings
    wait for both), and for any other sandbox, which may judge in this process or count on one call per turn (the
    synthetic sandbox of ``recipes/teach_credit_assignment.py`` does)."""
    from kevin.sandbox.sandbox import Sandbox

    if not isinstance(sandbox, Sandbox) or getattr(sandbox, "backend", None) != "cuda":
        return 1
    return min(n_tasks * n_trajectories, max(n_tasks, 2))


def rollout(
    policy: Any,
    tasks: Sequence[Any],
    sandbox: Any,
    *,
    n_trajectories: int = 16,
    n_turns: int = 4,
    backend: str | None = None,
    max_prompt_tokens: int | None = None,
    build_messages: Callable[..., list[dict]] | None = None,
    parse_response: Callable[[str], Any] | None = None,
    progress: bool = True,
    resample: Callable[[int, list[tuple[Turn, ...]]], Sequence[int] | None] | None = None,
    chunks: int | None = None,
    evaluation_slots: int | None = None,
    start_from: Sequence[Trajectory] | None = None,
    on_turn: Callable[[list[Trajectory]], None] | None = None,
    stagger: int = 1,
) -> list[Trajectory]:
    """Run G = ``n_trajectories`` trajectories of T = ``n_turns`` turns for each of the B ``tasks``.

    Args:
        policy: a :class:`kevin.core.policy.Policy` (``generate(conversations)``, ``count_tokens(text)``).
        tasks: B :class:`kevin.data.Task`.
        sandbox: anything with ``evaluate_many(jobs: list[tuple[Task, str]]) -> list[EvalResult]``
            (:class:`kevin.sandbox.Sandbox`).
        n_trajectories, n_turns: G and T (paper: 16 x 4 in training, 16 x 8 at test time).
        backend: "cuda" or "cpu", passed to ``build_messages`` (instructions and example). None (default): the
            sandbox's ``backend`` ("cuda" for a sandbox without one); one that differs from the sandbox's is an error.
        max_prompt_tokens: prompt budget; earliest attempts are dropped first (counted with
            ``policy.count_tokens``). None: no budget.
        build_messages: ``(task, attempts, *, backend, max_prompt_tokens, count_tokens) -> messages``;
            default :func:`kevin.data.prompts.build_messages`. Swap it (and ``parse_response``) to run the
            loop in a synthetic environment.
        parse_response: ``text -> object with thought, code, summary, error``; default
            :func:`kevin.data.parse.parse_response`, which is also told whether the prompt opened the thought
            (``Generation.in_thought``), so that a response that stops without ``</think>`` has no answer.
        progress: show a tqdm bar over turns, with the stage of the current one (log lines go to the
            ``kevin.core.rollout`` logger either way). Without tqdm installed, no bar.
        resample: beam search. ``resample(t, histories)`` is called after every turn t (0-based) but the last,
            with the B*G histories (task-major, each a tuple of its turns); it returns [B*G] parents, slot k
            continuing slot ``parents[k]``'s history from turn t+1 on (see :func:`reparent`), or None to leave
            them as they are. None (default): independent trajectories. Runs the rollout in lockstep.
        chunks: how many groups of consecutive trajectories (task-major rows) the pipelined schedule moves
            independently; 1: lockstep (one generate and one ``evaluate_many`` call per turn). None (default):
            :func:`default_chunks` (one per task with kevin's ``Sandbox`` on CUDA, else 1); with ``resample``, 1.
        evaluation_slots: pipelined only: how many kernels are in the sandbox at once. None: the sandbox's ``capacity``
            (kevin's `Sandbox`: its compile workers plus two per device), every kernel at once for a sandbox without
            one.
        start_from: B*G trajectories (task-major, of these tasks) whose turns are already judged: an earlier
            rollout's saved turns (``on_turn``) or its exception's ``trajectories``. Each goes on from its last turn,
            so an interrupted rollout continues where it stopped. Not with ``resample``. None: all start at turn 1.
        on_turn: called with the B*G trajectories so far (as ``start_from`` takes them) as turns are judged (in
            lockstep after every turn; pipelined, at most every `TELL_EVERY_S` seconds and once at the end, an error's
            included), e.g. to save them (`records.SnapshotWriter`).
            Pipelined, a turn's ``evaluation_s`` there is its share of the sandbox's time so far, settled at the end.
        stagger: pipelined only: the groups start in this many waves of consecutive groups, one generate call each
            (any group due by then joins it), back to back, so that the later waves generate while the earlier
            waves' kernels compile and are checked; `generate_now` then decides for each wave on its own, so a group
            never waits for a group of another wave and the waves stay out of phase (docs/method.md, "Rollout").
            It adds generate calls: worth it when the sandbox, not the policy, sets the pace. 1 (default): every
            group's first turn in one call.

    Returns B*G trajectories (task-major), each with T turns. An exception raised after some turns finished
    (a policy's server gone, an interrupt, an error raised by the sandbox) carries them as its ``trajectories``:
    B*G trajectories of the turns judged so far (pipelined, some may have more turns than others). Kernels still in
    the sandbox then are not waited for.
    """
    if build_messages is None:
        from kevin.data.prompts import build_messages
    if parse_response is None:
        from kevin.data.parse import parse_response as parse_default

        def parse(g: Any) -> Any:
            return parse_default(g.text, in_thought=bool(getattr(g, "in_thought", False)))
    else:
        def parse(g: Any) -> Any:
            return parse_response(g.text)
    from kevin.data.prompts import Attempt

    tasks = list(tasks)
    if n_trajectories < 1 or n_turns < 1:
        raise ValueError(f"need n_trajectories >= 1 and n_turns >= 1, got {n_trajectories}, {n_turns}")
    if chunks is not None and chunks < 1 or evaluation_slots is not None and evaluation_slots < 1 or stagger < 1:
        raise ValueError(f"need chunks, evaluation_slots and stagger >= 1, got {chunks}, {evaluation_slots}, {stagger}")
    if resample is not None and chunks not in (None, 1):
        raise ValueError(f"chunks={chunks}: beam search (resample) needs every slot's turn at once, so it runs in "
                         "lockstep (leave chunks unset)")
    own = getattr(sandbox, "backend", None)
    if backend is None:
        backend = own or "cuda"
    elif own is not None and backend != own:
        raise ValueError(f"backend={backend!r} but the sandbox judges {own!r} kernels: the prompts would ask for the "
                         "wrong kind (leave backend unset to follow the sandbox)")
    if not tasks:
        return []
    if callable(forget := getattr(sandbox, "forget_verdicts", None)):
        forget()  # kevin's Sandbox reuses a verdict within one rollout only, whose policy is fixed
    slots = [(b, g) for b in range(len(tasks)) for g in range(n_trajectories)]  # task-major, [B*G]
    if start_from is not None and resample is not None:
        raise ValueError("start_from: beam search (resample) restarts from its first turn, it cannot continue")
    history = started_histories(tasks, slots, start_from, n_turns)
    pruned: list[list[tuple[int, Turn]]] = [[] for _ in slots]
    count_tokens = policy.count_tokens if max_prompt_tokens is not None else None
    if resample is not None:
        chunks = 1
    elif chunks is None:
        chunks = default_chunks(sandbox, len(tasks), n_trajectories)
    bounds = chunk_bounds(len(slots), chunks)
    if stagger > 1 and len(bounds) == 1:
        raise ValueError(f"stagger={stagger} needs the pipelined schedule (chunks > 1); this rollout runs in lockstep"
                         f"{' (beam search)' if resample is not None else ''}")
    pipeline = None

    def judged() -> None:
        if on_turn is not None:
            if pipeline is not None:
                pipeline.settle_costs()
            on_turn(_trajectories(tasks, slots, history, pruned))

    def prompt(k: int) -> list[dict]:
        return build_messages(tasks[slots[k][0]], [Attempt.from_turn(turn) for turn in history[k]], backend=backend,
                              max_prompt_tokens=max_prompt_tokens, count_tokens=count_tokens)

    bar, redirect = None, contextlib.ExitStack()
    if progress:
        try:
            from tqdm.auto import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm
        except ImportError:  # (tqdm comes with the [train] extra)
            logger.info("no progress bar: tqdm is not installed")
        else:
            bar = tqdm(total=n_turns, initial=min(map(len, history)), unit="turn",
                       desc=f"rollout {len(tasks)} tasks x {n_trajectories} trajectories")
            if _console_handler(logging.getLogger("kevin")):  # (`kevin.core.run.cli.log_to_stderr`'s, say)
                # its lines printed above the bar, not through it
                redirect.enter_context(logging_redirect_tqdm(loggers=[logging.getLogger("kevin")]))
    started = time.perf_counter()
    try:
        if len(bounds) > 1:
            pipeline = _Pipeline(policy, sandbox, tasks, slots, history, bounds, n_turns=n_turns, prompt=prompt,
                                 parse=parse, evaluation_slots=evaluation_slots, bar=bar, judged=judged,
                                 stagger=stagger)
            pipeline.run()
            pipeline.settle_costs()
        else:
            for t in range(min(map(len, history)), n_turns):
                rows = [k for k in range(len(slots)) if len(history[k]) == t]  # (all, unless some went on further)
                conversations = [prompt(k) for k in rows]

                if bar is not None:
                    bar.set_postfix_str(f"turn {t + 1}: generating {len(conversations)} responses")
                generations, gen_s = _generate(policy, conversations)

                parsed = [parse(g) for g in generations]
                results = [_failed_verdict(g, p) for g, p in zip(generations, parsed)]
                job_slots = [i for i, r in enumerate(results) if r is None]  # (indices into rows)
                jobs = [(tasks[slots[rows[i]][0]], parsed[i].code) for i in job_slots]

                if bar is not None:
                    bar.set_postfix_str(f"turn {t + 1}: evaluating {len(jobs)} kernels")
                start = time.perf_counter()
                verdicts = sandbox.evaluate_many(jobs) if jobs else []
                eval_s = time.perf_counter() - start
                if len(verdicts) != len(jobs):
                    raise RuntimeError(f"sandbox returned {len(verdicts)} results for {len(jobs)} kernels")
                for i, v in zip(job_slots, verdicts):
                    results[i] = v

                gen_costs = share(gen_s, _generation_weights(generations))
                eval_costs = [0.0] * len(rows)
                for i, c in zip(job_slots, share(eval_s, [1.0] * len(job_slots))):
                    eval_costs[i] = c

                for i, (k, g, p, r) in enumerate(zip(rows, generations, parsed, results)):
                    assert r is not None
                    history[k].append(_turn(g, p, r, gen_costs[i], eval_costs[i]))

                statuses = Counter(r.status for r in results if r is not None)
                mean_tokens = sum(history[k][-1].generated_tokens for k in rows) / len(generations)
                logger.info(
                    "turn %d/%d: %d responses (%.0f tokens avg, %d truncated) in %.1fs; %d kernels evaluated in "
                    "%.1fs; %s",
                    t + 1,
                    n_turns,
                    len(generations),
                    mean_tokens,
                    sum(g.truncated for g in generations),
                    gen_s,
                    len(jobs),
                    eval_s,
                    dict(sorted(statuses.items())),
                )
                if resample is not None and t + 1 < n_turns:
                    parents = resample(t, [tuple(h) for h in history])
                    if parents is not None:
                        history, pruned = reparent(history, pruned, parents, n_trajectories)
                        moved = sum(p != k for k, p in enumerate(parents))
                        logger.info("after turn %d: %d of %d trajectories continue another's", t + 1, moved,
                                    len(slots))
                judged()
                if bar is not None:
                    bar.set_postfix(correct=statuses.get("correct", 0), evaluated=len(jobs))
                    bar.update(1)
    except BaseException as exc:  # nothing finished is lost: the turns done so far ride on the exception
        if pipeline is not None:
            pipeline.settle_costs()
        if any(history):
            exc.trajectories = _trajectories(tasks, slots, history, pruned)
            if hasattr(exc, "add_note"):  # (Python 3.11+)
                exc.add_note(f"rollout: the {sum(map(len, history))} turns judged before this are in the "
                             "exception's .trajectories")
        raise
    finally:
        redirect.close()
        if bar is not None:
            bar.close()
    out = _trajectories(tasks, slots, history, pruned)
    gen_total = sum(turn.generation_s for tr in out for turn in tr.turns)
    eval_total = sum(turn.evaluation_s for tr in out for turn in tr.turns)
    wall = time.perf_counter() - started
    logger.info("rollout in %.1fs (%d groups): generation %.1fs, sandbox %.1fs, both at once %.1fs; the policy waited "
                "%.1fs for the device and stepped aside %.1fs for timings", wall, len(bounds), gen_total, eval_total,
                overlap_seconds(gen_total, eval_total, wall), pipeline.gate_wait_s if pipeline else 0.0,
                pipeline.aside_s if pipeline else 0.0)
    return out


TELL_EVERY_S = 1.0
"""The pipelined rollout's ``on_turn`` comes at most this often (and once at its end) with every turn judged by then."""


class _Pipeline:
    """The pipelined schedule (module docstring): groups of rows advance turn by turn on their own.

    State: each group's next turn and whether it is due (all its kernels judged); each row's current turn while its
    kernel is in the sandbox (``staged``); the futures of the kernels in the sandbox; and each judged kernel's
    ``(start, end)`` seconds with the (row, turn) it belongs to, from which `settle_costs` shares the sandbox's
    busy time (`busy_shares`). Turns join ``history`` a whole group at a time, in row order, so the output does not
    depend on the order verdicts arrive in.
    """

    def __init__(self, policy: Any, sandbox: Any, tasks: list[Any], slots: list[tuple[int, int]],
                 history: list[list[Turn]], bounds: list[tuple[int, int]], *, n_turns: int,
                 prompt: Callable[[int], list[dict]], parse: Callable[[Any], Any], evaluation_slots: int | None,
                 bar: Any, judged: Callable[[], None], stagger: int = 1) -> None:
        self.policy, self.sandbox, self.tasks, self.slots, self.history = policy, sandbox, tasks, slots, history
        self.bounds, self.n_turns, self.prompt, self.parse, self.bar = bounds, n_turns, prompt, parse, bar
        self.judged_turn = judged  # told of the groups' turns closed (`_tell`)
        self.n_slots = evaluation_slots or getattr(sandbox, "capacity", None) or len(slots)
        self.group_of = [c for c, (lo, hi) in enumerate(bounds) for _ in range(lo, hi)]
        self.next_turn = [self._turns_done(c) for c in range(len(bounds))]  # (0, unless started from earlier turns)
        self.due: list[int] = []  # groups whose next turn can go
        self.due_since: dict[int, float] = {}  # ... and since when
        left = [c for c in range(len(bounds)) if self.next_turn[c] < n_turns]
        self.unstarted = [left[lo:hi] for lo, hi in chunk_bounds(len(left), stagger)] if left else []  # in order
        self.wave_of = {c: w for w, wave in enumerate(self.unstarted) for c in wave}
        self.waiting = [0] * len(bounds)  # per group: its kernels still in the sandbox
        self.staged: dict[int, list[Any]] = {}  # row -> [generation, parsed, verdict or None, generation seconds]
        self.futures: dict[Future, int] = {}  # a kernel in the sandbox -> its row
        self.intervals: list[tuple[float, float]] = []  # every judged kernel's seconds in the sandbox
        self.judged: list[tuple[int, int]] = []  # ... and its (row, turn)
        self.generate_s: float | None = None  # the last generate call's seconds
        self.gate_wait_s = 0.0  # seconds the policy waited for the sandbox's devices (a timing running or queued)
        self.started: dict[int, float] = {}  # row -> when its kernel's evaluate_many call began (set by the worker)
        self.pool = ThreadPoolExecutor(max_workers=self.n_slots, thread_name_prefix="kevin-rollout-eval")
        self.stream = streams(policy)  # kernels sent as their responses finish, while the call goes on
        self.yields = _takes(policy.generate, "between_steps")  # its decoding steps aside for waiting timings
        self.aside_s = 0.0  # seconds the policy stepped aside, inside generate calls
        self.told_at: float | None = None  # when ``judged_turn`` was last called (None: never)
        self.untold = False  # a group's turn closed since that call

    def run(self) -> None:
        try:
            while self.due or self.futures or self.unstarted:
                for future in sorted((f for f in self.futures if f.done()), key=self.futures.__getitem__):
                    self._judged(future)
                self._tell()
                if self.unstarted:  # a wave's first call goes at once (with any group due by now)
                    self._generate(self.due + self.unstarted.pop(0))
                elif go := self._due_to_generate():
                    self._generate(go)
                elif self.futures:
                    if self.bar is not None:
                        self.bar.set_postfix_str(f"{len(self.futures)} kernels in the sandbox")
                    # until a kernel is judged, or the longest-waiting due group has waited a call's seconds
                    patience = None
                    if self.due and self.generate_s is not None:
                        waited = time.perf_counter() - min(self.due_since[c] for c in self.due)
                        patience = max(0.01, self.generate_s - waited)
                    wait(list(self.futures), timeout=patience, return_when=FIRST_COMPLETED)
        except BaseException:
            with contextlib.suppress(Exception):  # the turns judged so far still reach on_turn; the error goes on
                self._tell(final=True)
            raise
        else:
            self._tell(final=True)
        finally:
            self.pool.shutdown(wait=False, cancel_futures=True)

    def _tell(self, final: bool = False) -> None:
        """``judged_turn()`` when a group's turn closed since the last call and `TELL_EVERY_S` has passed (or at the
        end): with a group per trajectory it would otherwise settle every turn's costs after every kernel."""
        now = time.perf_counter()
        if self.untold and (final or self.told_at is None or now - self.told_at >= TELL_EVERY_S):
            self.untold, self.told_at = False, now
            self.judged_turn()

    def _due_to_generate(self) -> list[int]:
        """The due groups whose wave `generate_now` says to generate now, each wave judged on its own groups."""
        now = time.perf_counter()
        waves = {self.wave_of[c] for c in self.due}
        waited = {w: max(now - self.due_since[c] for c in self.due if self.wave_of[c] == w) for w in waves}
        go = {w for w in waves if generate_now(*self._next_due(w), waited_s=waited[w])}
        return [c for c in self.due if self.wave_of[c] in go]

    def _next_due(self, wave: int) -> tuple[bool, float | None, float | None]:
        """`generate_now`'s arguments for ``wave``: whether a group of it with kernels in the sandbox has a turn to
        generate after them, the estimated seconds until the first such group is due (`due_in`), and the last call's
        seconds."""
        pending = {self.group_of[k] for k in self.futures.values()}
        pending = {c for c in pending if self.next_turn[c] + 1 < self.n_turns and self.wave_of[c] == wave}
        if not pending or not self.intervals:
            return bool(pending), None, self.generate_s
        now = time.perf_counter()
        kernels = [(self.group_of[k], now - self.started[k] if k in self.started else None)
                   for k in self.futures.values()]
        due = due_in(kernels, self.n_slots, [end - start for start, end in self.intervals])
        return True, min(due[c] for c in pending), self.generate_s

    def _generate(self, groups: list[int]) -> None:
        """One generate call over the due turns of ``groups``, which leave ``due``."""
        groups = sorted(groups)
        chosen = set(groups)
        self.due = [c for c in self.due if c not in chosen]
        rows = [k for c in groups for k in range(*self.bounds[c]) if len(self.history[k]) == self.next_turn[c]]
        turns = sorted({self.next_turn[c] + 1 for c in groups})
        if self.bar is not None:
            self.bar.set_postfix_str(f"turn {','.join(map(str, turns))}: generating {len(rows)} responses")
        early: list[bool] = []  # per response handed over before the call ended: whether its kernel went

        def on_done(i: int, g: Any) -> None:
            early.append(self._stage(rows[i], g))

        asked = time.perf_counter()
        # no timing while the policy computes: held whenever kernels are in the sandbox or may be sent during the call
        with _device_in_use(self.sandbox) if self.futures or self.stream else contextlib.nullcontext() as hold:
            waited = time.perf_counter() - asked
            between = getattr(hold, "step_aside", None) if self.yields and self.stream else None
            generations, seconds = _generate(self.policy, [self.prompt(k) for k in rows],
                                             on_done if self.stream else None, between)
        aside = getattr(hold, "aside_s", 0.0)
        busy = seconds - aside  # the call's own seconds: stepped aside, the device was the sandbox's
        self.generate_s, self.gate_wait_s, self.aside_s = busy, self.gate_wait_s + waited, self.aside_s + aside
        sent = sum(early)
        for k, g, cost in zip(rows, generations, share(busy, _generation_weights(generations))):
            if k in self.staged:  # (handed over early)
                self.staged[k][3] = cost
            else:
                sent += self._stage(k, g, cost)
        logger.info("turn %s/%d: %d responses (%.0f tokens avg, %d truncated) in %.1fs after %.1fs waiting for the "
                    "device; stepped aside %.1fs for timings; %d kernels to the sandbox (%d before the call ended), "
                    "%d in it", ",".join(map(str, turns)), self.n_turns, len(rows),
                    sum(_generated_tokens(g) for g in generations) / len(rows), sum(g.truncated for g in generations),
                    seconds, waited, aside, sent, sum(early), len(self.futures))
        for c in groups:
            if not self.waiting[c]:
                self._close(c)

    def _stage(self, k: int, g: Any, cost: float = 0.0) -> bool:
        """Row ``k``'s response ``g`` waits for its group's turn to close; its kernel, if it has one, goes to the
        sandbox (True). ``cost``: its generation seconds (set after the call for a response handed over early)."""
        p = self.parse(g)
        verdict = _failed_verdict(g, p)
        self.staged[k] = [g, p, verdict, cost]
        if verdict is not None:
            return False
        self.waiting[self.group_of[k]] += 1
        job = (self.tasks[self.slots[k][0]], p.code)
        self.futures[self.pool.submit(_judge_one, self.sandbox, job, self.started, k)] = k
        return True

    def _judged(self, future: Future) -> None:
        k = self.futures.pop(future)
        self.started.pop(k, None)
        verdict, start, end = future.result()  # an error raised in the sandbox's thread is raised here
        self.staged[k][2] = verdict
        self.intervals.append((start, end))
        self.judged.append((k, len(self.history[k])))
        c = self.group_of[k]
        self.waiting[c] -= 1
        if not self.waiting[c]:
            self._close(c)

    def _close(self, c: int) -> None:
        """Group ``c``'s turn is judged: its rows' turns join the history, and its next turn is due."""
        lo, hi = self.bounds[c]
        statuses: Counter = Counter()
        for k in range(lo, hi):
            if k in self.staged:  # (a row that started further on sits its group's earlier turns out)
                g, p, verdict, cost = self.staged.pop(k)
                self.history[k].append(_turn(g, p, verdict, cost, 0.0))  # its evaluation seconds: settle_costs
                statuses[verdict.status] += 1
        logger.info("turn %d/%d of trajectories %d-%d judged: %s", self.next_turn[c] + 1, self.n_turns, lo, hi - 1,
                    dict(sorted(statuses.items())))
        self.next_turn[c] = self._turns_done(c)
        if self.next_turn[c] < self.n_turns:
            self.due.append(c)
            self.due_since[c] = time.perf_counter()
        if self.bar is not None and min(self.next_turn) > self.bar.n:
            self.bar.update(min(self.next_turn) - self.bar.n)
        self.untold = True
        self._tell()

    def _turns_done(self, c: int) -> int:
        """How many turns every row of group ``c`` has."""
        return min(len(self.history[k]) for k in range(*self.bounds[c]))

    def settle_costs(self) -> None:
        """Every judged turn's ``evaluation_s``: its kernel's share of the sandbox's busy time (`busy_shares`)."""
        for (k, t), seconds in zip(self.judged, busy_shares(self.intervals)):
            if t < len(self.history[k]):  # (after an error, a group may not have closed its turn)
                self.history[k][t] = dataclasses.replace(self.history[k][t], evaluation_s=seconds)


def _generate(policy: Any, conversations: list[list[dict]], on_done: Callable[[int, Any], None] | None = None,
              between_steps: Callable[..., Any] | None = None) -> tuple[list[Any], float]:
    """One ``policy.generate`` call (told ``on_done`` and ``between_steps`` when given): its generations and its
    wall seconds."""
    start = time.perf_counter()
    hooks = {k: v for k, v in (("on_done", on_done), ("between_steps", between_steps)) if v is not None}
    generations = policy.generate(conversations, **hooks)
    seconds = time.perf_counter() - start
    if len(generations) != len(conversations):
        raise RuntimeError(f"policy returned {len(generations)} generations for {len(conversations)} prompts")
    return generations, seconds


def _failed_verdict(generation: Any, parsed: Any) -> EvalResult | None:
    """The ``format_error`` verdict of a truncated or unparsed response; None when its kernel goes to the sandbox."""
    if generation.truncated:
        return format_error_result(parsed.error or "", truncated=True)
    if parsed.error is not None or parsed.code is None:
        return format_error_result(parsed.error or "no code found")
    return None


def _judge_one(sandbox: Any, job: tuple[Any, str], started: dict[int, float], row: int
               ) -> tuple[EvalResult, float, float]:
    """One kernel through ``sandbox.evaluate_many`` (in a background thread): its verdict and its start and end;
    ``started[row]`` says when it began."""
    start = started[row] = time.perf_counter()
    verdicts = sandbox.evaluate_many([job])
    end = time.perf_counter()
    if len(verdicts) != 1:
        raise RuntimeError(f"sandbox returned {len(verdicts)} results for 1 kernel")
    return verdicts[0], start, end


def _turn(g: Any, p: Any, r: EvalResult, generation_s: float, evaluation_s: float) -> Turn:
    return Turn(
        prompt_ids=tuple(g.prompt_ids),
        response_ids=tuple(g.token_ids),
        response_text=g.text,
        result=r,
        thought=p.thought,
        code=p.code,
        summary=p.summary,
        response_logprobs=None if g.logprobs is None else tuple(g.logprobs),
        truncated=g.truncated,
        generation_s=generation_s,
        evaluation_s=evaluation_s,
        reported_prompt_tokens=g.reported_prompt_tokens,
        reported_generated_tokens=g.reported_generated_tokens,
    )


def _generated_tokens(g: Any) -> int:
    return len(g.token_ids) or (getattr(g, "reported_generated_tokens", None) or 0)


def streams(policy: Any) -> bool:
    """Whether ``policy.generate`` takes ``on_done`` (`kevin.core.policy.TransformersPolicy` does): each response
    handed over as soon as it is finished, before the call returns."""
    return _takes(getattr(policy, "generate", None), "on_done")


def _takes(fn: Any, keyword: str) -> bool:
    """Whether ``fn`` takes the keyword argument ``keyword``."""
    try:
        return keyword in inspect.signature(fn).parameters
    except (AttributeError, TypeError, ValueError):
        return False


def _device_in_use(sandbox: Any) -> Any:
    """``sandbox.device_in_use()`` (kevin's `Sandbox`: its devices held by `DeviceGate.in_use`, so no kernel is
    timed while the policy computes, while correctness runs go on), or nothing for a sandbox without one."""
    hold = getattr(sandbox, "device_in_use", None)
    return hold() if callable(hold) else contextlib.nullcontext()


def reparent(
    history: Sequence[Sequence[Turn]],
    pruned: Sequence[Sequence[tuple[int, Turn]]],
    parents: Sequence[int],
    n_trajectories: int,
) -> tuple[list[list[Turn]], list[list[tuple[int, Turn]]]]:
    """Slot k continues slot ``parents[k]``'s history: the new (history, pruned) of the B*G slots.

    A slot with ``parents[k] == k`` is unchanged. Any other takes copies of its parent's turns marked
    ``replica``, and its own non-replica turns join its pruned list with their positions (its replicas are
    dropped: their originals are kept elsewhere). All new histories are built from the old ones, so a swap
    works. So every generated turn stays exactly once a non-replica turn, on a path or in a pruned list.
    Parents must be slots of the same task (``k // n_trajectories``), else ValueError.

    Example, G = 2, parents [1, 1]: slot 0's history (a,) becomes (b',), b' a replica of slot 1's b, and
    slot 0's pruned list gets (0, a).
    """
    n = len(history)
    if len(parents) != n:
        raise ValueError(f"resample gave {len(parents)} parents for {n} trajectories")
    for k, p in enumerate(parents):
        if not 0 <= p < n or p // n_trajectories != k // n_trajectories:
            raise ValueError(f"trajectory slot {k} (task {k // n_trajectories}) cannot continue slot {p}: "
                             "parents must be slots of the same task")
    new_history, new_pruned = [], []
    for k, p in enumerate(parents):
        if p == k:
            new_history.append(list(history[k]))
            new_pruned.append(list(pruned[k]))
        else:
            new_history.append([dataclasses.replace(turn, replica=True) for turn in history[p]])
            new_pruned.append([*pruned[k], *((i, turn) for i, turn in enumerate(history[k]) if not turn.replica)])
    return new_history, new_pruned


def _console_handler(log: logging.Logger) -> bool:
    """Whether ``log`` itself has a handler writing to stdout or stderr."""
    return any(isinstance(h, logging.StreamHandler) and h.stream in (sys.stdout, sys.stderr) for h in log.handlers)


def _generation_weights(generations: Sequence[Any]) -> list[float]:
    """Each response's share of a batch's generation seconds: its tokens (sampled ids, else the backend's reported
    count) when every response has them, else its characters (one unit for the whole batch)."""
    tokens = [len(g.token_ids) if g.token_ids else getattr(g, "reported_generated_tokens", None) for g in generations]
    if all(n is not None for n in tokens):
        return [float(n) for n in tokens]
    return [float(len(g.text)) for g in generations]


def _trajectories(tasks: Sequence[Any], slots: list[tuple[int, int]], history: list[list[Turn]],
                  pruned: list[list[tuple[int, Turn]]]) -> list[Trajectory]:
    return [
        Trajectory(task_id=tasks[b].task_id, task_index=b, trajectory_index=g, turns=tuple(history[k]),
                   pruned=tuple(pruned[k]))
        for k, (b, g) in enumerate(slots)
    ]
