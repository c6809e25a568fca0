"""``rollout()``: the multi-turn generate -> evaluate -> refine loop of Kevin (paper section 4, Fig. 2).

All G trajectories of all B tasks advance together, turn by turn. On each turn t:

1. every trajectory's prompt is built from its task and its earlier attempts (kernel, summary, sandbox
   feedback; never the earlier thoughts) by ``build_messages``;
2. ONE batched ``policy.generate`` call samples a response for all B*G conversations;
3. each response is parsed; a response that failed to parse, or that hit the token limit (``truncated``),
   is a failed turn: a ``format_error`` result with the reason as feedback, scored 0, no sandbox call;
4. the remaining kernels go to the sandbox in ONE ``sandbox.evaluate_many`` call;
5. the verdict's feedback becomes part of turn t+1's prompt.

Trajectories always run all T turns (no early stop on failure or success, paper section 3.4;
docs/method.md, "Rollout"). Scoring is not done here: a ``Turn`` keeps the raw ``EvalResult`` so that rewards can be
computed, and recomputed with other settings, afterwards (``kevin.core.records.rescore``).

Costs. ``Turn.generation_s`` is the batch's generation wall time shared out in proportion to each
response's sampled tokens (an API's reported counts when it gives no ids; characters when some response has
neither; evenly when all are empty):
a long response occupied the batch longer. ``Turn.evaluation_s`` is the ``evaluate_many`` wall time
shared evenly among the kernels that were sent (0.0 for turns that never reached the sandbox).

The output is ordered task-major, then by trajectory index: ``out[b * G + g]`` is trajectory g of task b.

Beam search (``resample``, built by ``kevin.core.eval.beam.beam_resampler``): after a turn, a slot may drop its
history and continue a copy of another slot's of the same task (``reparent``); the copied turns are marked
``replica`` and the dropped ones kept in ``Trajectory.pruned``, so every generated kernel is counted exactly once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
import time
from collections import Counter
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
        progress: show a tqdm bar over turns, with the stage of the current one (a log line per turn goes to the
            ``kevin.core.rollout`` logger either way). Without tqdm installed, no bar.
        resample: beam search. ``resample(t, histories)`` is called after every turn t (0-based) but the last,
            with the B*G histories (task-major, each a tuple of its turns); it returns [B*G] parents, slot k
            continuing slot ``parents[k]``'s history from turn t+1 on (see :func:`reparent`), or None to leave
            them as they are. None (default): independent trajectories.

    Returns B*G trajectories (task-major), each with T turns. An exception raised after some turns finished
    (a policy's server gone, an interrupt) carries them as its ``trajectories``: B*G trajectories of those turns.
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
    own = getattr(sandbox, "backend", None)
    if backend is None:
        backend = own or "cuda"
    elif own is not None and backend != own:
        raise ValueError(f"backend={backend!r} but the sandbox judges {own!r} kernels: the prompts would ask for the "
                         "wrong kind (leave backend unset to follow the sandbox)")
    if not tasks:
        return []
    slots = [(b, g) for b in range(len(tasks)) for g in range(n_trajectories)]  # task-major, [B*G]
    history: list[list[Turn]] = [[] for _ in slots]
    pruned: list[list[tuple[int, Turn]]] = [[] for _ in slots]
    count_tokens = policy.count_tokens if max_prompt_tokens is not None else None

    bar, redirect = None, contextlib.ExitStack()
    if progress:
        try:
            from tqdm.auto import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm
        except ImportError:  # (tqdm comes with the [train] extra)
            logger.info("no progress bar: tqdm is not installed")
        else:
            bar = tqdm(total=n_turns, desc=f"rollout {len(tasks)} tasks x {n_trajectories} trajectories", unit="turn")
            if _console_handler(logging.getLogger("kevin")):  # (`kevin.core.run.cli.log_to_stderr`'s, say)
                # its lines printed above the bar, not through it
                redirect.enter_context(logging_redirect_tqdm(loggers=[logging.getLogger("kevin")]))
    try:
        for t in range(n_turns):
            conversations = [
                build_messages(
                    tasks[b],
                    [Attempt.from_turn(turn) for turn in history[k]],
                    backend=backend,
                    max_prompt_tokens=max_prompt_tokens,
                    count_tokens=count_tokens,
                )
                for k, (b, _) in enumerate(slots)
            ]

            if bar is not None:
                bar.set_postfix_str(f"turn {t + 1}: generating {len(conversations)} responses")
            start = time.perf_counter()
            generations = policy.generate(conversations)
            gen_s = time.perf_counter() - start
            if len(generations) != len(conversations):
                raise RuntimeError(f"policy returned {len(generations)} generations for {len(conversations)} prompts")

            parsed = [parse(g) for g in generations]
            results: list[EvalResult | None] = [None] * len(slots)
            jobs, job_slots = [], []
            for k, (g, p) in enumerate(zip(generations, parsed)):
                if g.truncated:
                    results[k] = format_error_result(p.error or "", truncated=True)
                elif p.error is not None or p.code is None:
                    results[k] = format_error_result(p.error or "no code found")
                else:
                    jobs.append((tasks[slots[k][0]], p.code))
                    job_slots.append(k)

            if bar is not None:
                bar.set_postfix_str(f"turn {t + 1}: evaluating {len(jobs)} kernels")
            start = time.perf_counter()
            verdicts = sandbox.evaluate_many(jobs) if jobs else []
            eval_s = time.perf_counter() - start
            if len(verdicts) != len(jobs):
                raise RuntimeError(f"sandbox returned {len(verdicts)} results for {len(jobs)} kernels")
            for k, v in zip(job_slots, verdicts):
                results[k] = v

            gen_costs = share(gen_s, _generation_weights(generations))
            eval_costs = [0.0] * len(slots)
            for k, c in zip(job_slots, share(eval_s, [1.0] * len(job_slots))):
                eval_costs[k] = c

            for k, (g, p, r) in enumerate(zip(generations, parsed, results)):
                assert r is not None
                history[k].append(
                    Turn(
                        prompt_ids=tuple(g.prompt_ids),
                        response_ids=tuple(g.token_ids),
                        response_text=g.text,
                        result=r,
                        thought=p.thought,
                        code=p.code,
                        summary=p.summary,
                        response_logprobs=None if g.logprobs is None else tuple(g.logprobs),
                        truncated=g.truncated,
                        generation_s=gen_costs[k],
                        evaluation_s=eval_costs[k],
                        reported_prompt_tokens=g.reported_prompt_tokens,
                        reported_generated_tokens=g.reported_generated_tokens,
                    )
                )

            statuses = Counter(r.status for r in results if r is not None)
            mean_tokens = sum(history[k][-1].generated_tokens for k in range(len(slots))) / len(generations)
            logger.info(
                "turn %d/%d: %d responses (%.0f tokens avg, %d truncated) in %.1fs; %d kernels evaluated in %.1fs; %s",
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
                    logger.info("after turn %d: %d of %d trajectories continue another's", t + 1, moved, len(slots))
            if bar is not None:
                bar.set_postfix(correct=statuses.get("correct", 0), evaluated=len(jobs))
                bar.update(1)
    except BaseException as exc:  # nothing finished is lost: the turns done so far ride on the exception
        if history[0]:
            exc.trajectories = _trajectories(tasks, slots, history, pruned)
            if hasattr(exc, "add_note"):  # (Python 3.11+)
                exc.add_note(f"rollout: the {len(history[0])} turns finished before this are in the exception's "
                             f".trajectories")
        raise
    finally:
        redirect.close()
        if bar is not None:
            bar.close()
    return _trajectories(tasks, slots, history, pruned)


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
