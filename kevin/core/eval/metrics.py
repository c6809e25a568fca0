"""Rollout metrics: per-turn health of a rollout, and the paper's per-task evaluation metrics.

Pure functions of ``Trajectory`` records (standard library only); nothing is re-run.

**Per turn index** (:func:`turn_metrics`, one :class:`TurnMetrics` per turn index t = 0..T-1, pooled
over every trajectory that has that turn; :func:`summarize_turns` pools any set of turns):

- ``correct``: share of kernels with status "correct";
- ``speedup``: mean speedup, an incorrect or untimed kernel counting 0 (:func:`turn_speedup`);
- ``status_counts``: kernels per status, every status of :data:`STATUSES` present;
- ``response_tokens`` / ``prompt_tokens``: mean sampled / prompt tokens;
- ``truncated``: share of responses cut at the token limit (the paper's "clipping ratio");
- ``not_okay``: the paper's Not-Okay ratio (section 6.1), the share of thoughts (the response when no
  thought was parsed) that do not start with the base model's usual opener (QwQ-32B: "Okay,");
- ``repetition``: mean :func:`repetition_score`, a junk detector in [0, 1].

**Per task** (:func:`task_metrics`), as in the paper's section 5 (docs/method.md, "Evaluation and health
metrics"): a trajectory is *correct* if any of its kernels is correct; its *performance* is its fastest correct
kernel's speedup, else 0; it is *fast_p* if it is correct with performance >= p (p = 1 and 1.5; the paper
states ">= p"; KernelBench's ``fastp`` uses ">" -- the two differ only on exact ties; pass
``strict=True`` to :func:`trajectory_fast` for KernelBench's). Over the n trajectories of one task,
best@k is the expected best of k trajectories drawn without replacement (Chen et al.'s unbiased
estimator; the plain max when k = n) and avg@k the expected mean of k draws, which is the mean of all n.
``turns=t`` scores only the first t turns of each trajectory (the "turn budget" view of Fig. 5).

:func:`metrics_dict` flattens everything into namespaced floats for a logger:
``turn1/correct`` (turn index 0), ``rollout/not_okay`` (all turns pooled), ``tasks/speedup/best@16``
(mean over tasks), ``upto_turn2/correct/avg@16`` (first 2 turns only).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from kevin.core.types import Trajectory, Turn
from kevin.sandbox.result import STATUSES

__all__ = [
    "DEFAULT_OPENER",
    "TurnMetrics",
    "TaskMetrics",
    "turn_speedup",
    "starts_with_opener",
    "repetition_score",
    "turn_repetition",
    "summarize_turns",
    "turn_metrics",
    "trajectory_correct",
    "trajectory_speedup",
    "trajectory_fast",
    "pass_at_k",
    "best_at_k",
    "avg_at_k",
    "group_by_task",
    "task_metrics",
    "mean_over_tasks",
    "metrics_dict",
]

DEFAULT_OPENER = "Okay,"
"""QwQ-32B opens every chain of thought with "Okay,"; drifting away from it preceded junk in the paper, and the
drift keeps the word: "Okay Amigos, ..." and "Okay Holy crap, ..." are Not-Okay (so the comma is part of it)."""


# --------------------------------------------------------------------------------------------------
# One turn


def turn_speedup(turn: Turn) -> float:
    """The turn's speedup when its kernel is correct and timed, else 0.0 (the paper scores 0x)."""
    speedup = turn.result.speedup
    return float(speedup) if turn.result.correct and speedup is not None else 0.0


def starts_with_opener(turn: Turn, opener: str = DEFAULT_OPENER) -> bool:
    """Whether the turn's thought (its response text when no thought was parsed, minus a leading
    ``<think>``) starts with ``opener`` after leading whitespace. An empty thought does not."""
    text = turn.thought if turn.thought is not None else turn.response_text
    text = text.lstrip()
    if turn.thought is None and text.startswith("<think>"):
        text = text[len("<think>") :].lstrip()
    return text.startswith(opener)


def repetition_score(tokens: Sequence[object], n: int = 4) -> float:
    """``1 - distinct n-grams / n-grams`` over the ``len(tokens) - n + 1`` contiguous n-grams, in [0, 1).

    0 when every n-gram is new (or the sequence is shorter than n); close to 1 when a short pattern
    loops, which is what junk looks like. Tokens can be token ids or words.

    >>> repetition_score("a b a b a b".split(), n=2)  # 5 bigrams, 2 distinct: 1 - 2/5
    0.6
    >>> repetition_score("the cat sat on the mat".split(), n=2)  # 5 bigrams, all distinct
    0.0
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    total = len(tokens) - n + 1
    if total <= 0:
        return 0.0
    distinct = len({tuple(tokens[i : i + n]) for i in range(total)})
    return 1.0 - distinct / total


def turn_repetition(turn: Turn, n: int = 4) -> float:
    """:func:`repetition_score` of the sampled token ids, or of the response's words when the turn has
    no ids (scripted or API policies)."""
    tokens = turn.response_ids if turn.response_ids else turn.response_text.split()
    return repetition_score(tokens, n)


# --------------------------------------------------------------------------------------------------
# Per turn index


@dataclass(frozen=True)
class TurnMetrics:
    """Means over ``count`` turns: one turn index (``turn_index``, 0-based) or all turns (None)."""

    turn_index: int | None
    count: int
    correct: float
    speedup: float
    status_counts: Mapping[str, int]
    response_tokens: float
    prompt_tokens: float
    truncated: float
    not_okay: float
    repetition: float


def summarize_turns(
    turns: Sequence[Turn],
    *,
    turn_index: int | None = None,
    opener: str = DEFAULT_OPENER,
    ngram: int = 4,
) -> TurnMetrics:
    """Pool ``turns`` (any K >= 1 of them) into one :class:`TurnMetrics`; ``turn_index`` is a label.

    Example: turns with statuses (correct at 2.0x, correct untimed, compile_error) give
    correct = 2/3 and speedup = (2.0 + 0 + 0) / 3 = 0.667.
    """
    if not turns:
        raise ValueError("summarize_turns needs at least one turn")
    k = len(turns)
    counts = {status: 0 for status in STATUSES}
    for turn in turns:
        counts[turn.result.status] += 1
    return TurnMetrics(
        turn_index=turn_index,
        count=k,
        correct=counts["correct"] / k,
        speedup=sum(turn_speedup(t) for t in turns) / k,
        status_counts=MappingProxyType(counts),
        response_tokens=sum(t.generated_tokens for t in turns) / k,
        prompt_tokens=sum(t.prompt_tokens for t in turns) / k,
        truncated=sum(t.truncated for t in turns) / k,
        not_okay=sum(not starts_with_opener(t, opener) for t in turns) / k,
        repetition=sum(turn_repetition(t, ngram) for t in turns) / k,
    )


def turn_metrics(
    trajectories: Sequence[Trajectory], *, opener: str = DEFAULT_OPENER, ngram: int = 4
) -> list[TurnMetrics]:
    """One :class:`TurnMetrics` per turn index 0..T-1 over the N trajectories (all tasks pooled).

    Turn index t pools ``trajectory.turns[t]`` of every trajectory that has at least t + 1 turns, so a
    list of length max T comes back ([] for no trajectories). This is the view in which the paper saw
    junk start in the last turn and spread to earlier ones.
    """
    n_turns = max((len(tr.turns) for tr in trajectories), default=0)
    return [
        summarize_turns([tr.turns[t] for tr in trajectories if len(tr.turns) > t], turn_index=t, opener=opener, ngram=ngram)
        for t in range(n_turns)
    ]


# --------------------------------------------------------------------------------------------------
# Per trajectory


def trajectory_correct(trajectory: Trajectory, turns: int | None = None) -> bool:
    """Whether any of the first ``turns`` kernels (all when None) is correct."""
    return any(t.result.correct for t in trajectory.turns[:turns])


def trajectory_speedup(trajectory: Trajectory, turns: int | None = None) -> float:
    """The fastest correct kernel's speedup among the first ``turns`` turns, else 0.0 (untimed = 0)."""
    return max((turn_speedup(t) for t in trajectory.turns[:turns] if t.result.correct), default=0.0)


def trajectory_fast(trajectory: Trajectory, p: float, turns: int | None = None, *, strict: bool = False) -> bool:
    """fast_p of one trajectory: it has a correct kernel with speedup >= p (> p when ``strict``, as
    KernelBench's ``fastp``)."""
    if not trajectory_correct(trajectory, turns):
        return False
    speedup = trajectory_speedup(trajectory, turns)
    return speedup > p if strict else speedup >= p


# --------------------------------------------------------------------------------------------------
# Unbiased estimators over n samples of one task


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n, c of them
    successes, is a success: ``1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021), computed exactly.

    >>> pass_at_k(4, 1, 2)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    0.5
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    _check_k(n, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def best_at_k(values: Sequence[float], k: int) -> float:
    """Expected maximum of k values drawn without replacement from the n ``values``.

    With v_(1) <= ... <= v_(n) sorted, v_(i) is the maximum of C(i-1, k-1) of the C(n, k) subsets, so
    ``E[max] = sum_{i=k..n} C(i-1, k-1) / C(n, k) * v_(i)``. For 0/1 values this is :func:`pass_at_k`;
    for k = n it is ``max(values)``.

    >>> best_at_k([0.0, 1.0, 2.0], 2)  # subsets {0,1},{0,2},{1,2}: maxima 1, 2, 2 -> 5/3
    1.6666666666666667
    """
    n = len(values)
    _check_k(n, k)
    ordered = sorted(float(v) for v in values)
    total = math.comb(n, k)
    return sum(math.comb(i - 1, k - 1) * ordered[i - 1] for i in range(k, n + 1)) / total


def avg_at_k(values: Sequence[float], k: int) -> float:
    """Expected mean of k values drawn without replacement from the n ``values``: their mean (for any
    valid k; ``k`` is only checked, 1 <= k <= n)."""
    n = len(values)
    _check_k(n, k)
    return sum(float(v) for v in values) / n


def _check_k(n: int, k: int) -> None:
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")


# --------------------------------------------------------------------------------------------------
# Per task and over tasks


@dataclass(frozen=True)
class TaskMetrics:
    """The paper's Table 1 columns for one task: best@k and avg@k of correctness, performance
    (speedup), fast_1 and fast_1.5, over its ``n`` trajectories cut to their first ``turns`` turns."""

    task_id: str
    n: int
    k: int
    turns: int | None
    correct_best: float
    correct_avg: float
    speedup_best: float
    speedup_avg: float
    fast1_best: float
    fast1_avg: float
    fast15_best: float
    fast15_avg: float

    VALUE_FIELDS = ("correct_best", "correct_avg", "speedup_best", "speedup_avg",
                    "fast1_best", "fast1_avg", "fast15_best", "fast15_avg")

    def values(self) -> dict[str, float]:
        """The eight metric values by field name."""
        return {name: getattr(self, name) for name in self.VALUE_FIELDS}


def group_by_task(trajectories: Sequence[Trajectory]) -> dict[str, list[Trajectory]]:
    """task_id -> its trajectories, in first-seen task order and by ``trajectory_index`` within a task."""
    groups: dict[str, list[Trajectory]] = {}
    for tr in trajectories:
        groups.setdefault(tr.task_id, []).append(tr)
    return {task: sorted(trs, key=lambda tr: tr.trajectory_index) for task, trs in groups.items()}


def task_metrics(trajectories: Sequence[Trajectory], *, k: int | None = None, turns: int | None = None) -> TaskMetrics:
    """:class:`TaskMetrics` of one task's n trajectories; ``k`` defaults to n, ``turns`` to all.

    Example (k = 2 of n = 3): trajectory performances (0, 1.2, 2.0) give speedup_best =
    (C(1,1)*1.2 + C(2,1)*2.0) / C(3,2) = 5.2/3 = 1.733, speedup_avg = 3.2/3 = 1.067, fast1_best =
    pass@2 with c = 2 = 1 - C(1,2)/C(3,2) = 1, fast15_best = 1 - C(2,2)/C(3,2) = 2/3.
    """
    if not trajectories:
        raise ValueError("task_metrics needs at least one trajectory")
    task_ids = {tr.task_id for tr in trajectories}
    if len(task_ids) != 1:
        raise ValueError(f"task_metrics takes one task's trajectories, got tasks {sorted(task_ids)}")
    if turns is not None and turns < 1:
        raise ValueError(f"turns must be >= 1 or None, got {turns}")
    n = len(trajectories)
    k = n if k is None else k
    _check_k(n, k)
    correct = [float(trajectory_correct(tr, turns)) for tr in trajectories]  # [n]
    speedup = [trajectory_speedup(tr, turns) for tr in trajectories]  # [n]
    fast1 = [float(trajectory_fast(tr, 1.0, turns)) for tr in trajectories]  # [n]
    fast15 = [float(trajectory_fast(tr, 1.5, turns)) for tr in trajectories]  # [n]
    return TaskMetrics(
        task_id=task_ids.pop(), n=n, k=k, turns=turns,
        correct_best=best_at_k(correct, k), correct_avg=avg_at_k(correct, k),
        speedup_best=best_at_k(speedup, k), speedup_avg=avg_at_k(speedup, k),
        fast1_best=best_at_k(fast1, k), fast1_avg=avg_at_k(fast1, k),
        fast15_best=best_at_k(fast15, k), fast15_avg=avg_at_k(fast15, k),
    )


def mean_over_tasks(per_task: Sequence[TaskMetrics]) -> dict[str, float]:
    """Arithmetic mean over B tasks of each of :attr:`TaskMetrics.VALUE_FIELDS` (the paper's "mean")."""
    if not per_task:
        raise ValueError("mean_over_tasks needs at least one task")
    return {name: sum(getattr(m, name) for m in per_task) / len(per_task) for name in TaskMetrics.VALUE_FIELDS}


# --------------------------------------------------------------------------------------------------
# Flat dict for logging

_TASK_KEYS = {"correct_best": "correct/best", "correct_avg": "correct/avg",
              "speedup_best": "speedup/best", "speedup_avg": "speedup/avg",
              "fast1_best": "fast_1/best", "fast1_avg": "fast_1/avg",
              "fast15_best": "fast_1.5/best", "fast15_avg": "fast_1.5/avg"}


def _turn_entries(prefix: str, m: TurnMetrics) -> dict[str, float]:
    out = {
        f"{prefix}/count": float(m.count),
        f"{prefix}/correct": m.correct,
        f"{prefix}/speedup": m.speedup,
        f"{prefix}/response_tokens": m.response_tokens,
        f"{prefix}/prompt_tokens": m.prompt_tokens,
        f"{prefix}/truncated": m.truncated,
        f"{prefix}/not_okay": m.not_okay,
        f"{prefix}/repetition": m.repetition,
    }
    out.update({f"{prefix}/status/{s}": c / m.count for s, c in m.status_counts.items()})
    return out


def metrics_dict(
    trajectories: Sequence[Trajectory],
    *,
    k: int | None = None,
    turn_budgets: Sequence[int] = (),
    opener: str = DEFAULT_OPENER,
    ngram: int = 4,
) -> dict[str, float]:
    """Every metric of a rollout as ``{namespaced key: float}`` ({} for no trajectories).

    Keys (``t`` 1-based: ``turn1`` is turn index 0; ``k`` defaults to the smallest number of
    trajectories of any task):

    - ``turn{t}/{count,correct,speedup,response_tokens,prompt_tokens,truncated,not_okay,repetition}``
      and ``turn{t}/status/{status}`` (the *share* of that turn's kernels with that status);
    - ``rollout/...``: the same over all turns pooled, plus ``rollout/trajectories`` and ``rollout/tasks``;
    - ``tasks/{correct,speedup,fast_1,fast_1.5}/{best,avg}@{k}``: mean over tasks, all turns;
    - ``upto_turn{t}/...@{k}``: the same using only each trajectory's first t turns, for t in
      ``turn_budgets``.
    """
    if not trajectories:
        return {}
    longest = max(len(tr.turns) for tr in trajectories)
    bad = [t for t in turn_budgets if not 1 <= t <= longest]
    if bad:
        raise ValueError(f"turn budgets {bad} outside 1..{longest}, the turns these trajectories have")
    out: dict[str, float] = {}
    for m in turn_metrics(trajectories, opener=opener, ngram=ngram):
        out.update(_turn_entries(f"turn{m.turn_index + 1}", m))
    all_turns = [t for tr in trajectories for t in tr.turns]
    if all_turns:
        out.update(_turn_entries("rollout", summarize_turns(all_turns, opener=opener, ngram=ngram)))
    groups = group_by_task(trajectories)
    out["rollout/trajectories"] = float(len(trajectories))
    out["rollout/tasks"] = float(len(groups))
    k = min(len(g) for g in groups.values()) if k is None else k
    for prefix, turns in [("tasks", None)] + [(f"upto_turn{t}", t) for t in turn_budgets]:
        means = mean_over_tasks([task_metrics(g, k=k, turns=turns) for g in groups.values()])
        out.update({f"{prefix}/{_TASK_KEYS[name]}@{k}": v for name, v in means.items()})
    return out
