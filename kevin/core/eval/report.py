"""Evaluation report: the paper's Tables 1 and 2 with bootstrap confidence intervals, compute, plots.

What is computed (docs/method.md, "Evaluation and health metrics"; paper section 5):

- **Per turn budget** (Table 1 at every t, Fig. 5). For t = 1..T, every trajectory is cut to its first
  t turns and scored as the paper scores a trajectory: *correct* if one of its kernels is correct,
  *performance* the speedup of its fastest correct kernel (0 if none), *fast_p* if that speedup is
  >= p. Per task, best@k is the unbiased estimate of the best of k trajectories drawn without
  replacement from the G sampled (Chen et al.; equal to the plain max when k = G) and avg@k is the
  mean over the G trajectories. The table reports the mean over tasks, each with a bootstrap CI.
- **Equal budget** (Table 2, Fig. 6). Configurations m x n with the same number of kernels m * n per
  task (the paper: 16 x 8, 32 x 4, 128 x 1), each its own rollout, each scored best@m at n turns; next
  to it the compute each one used (prompt and generated tokens, generation and sandbox seconds, summed
  over its turns), because serial refinement re-reads earlier kernels and feedback in its prompts and
  so costs more prompt tokens per kernel than parallel sampling: equal kernels are not equal compute.
- **Scaling curves**: for each configuration, best@k for k = 1..m against kernels (k * n) and against
  generated tokens (k trajectories' worth), so serial and parallel can be compared at any budget.
- **Beam search** (``kevin.core.eval.beam``): a beam rollout's paths share copied turns (``Turn.replica``) and
  dropped some (``Trajectory.pruned``); compute and kernel counts take every generated turn once
  (:func:`generated_turns`), so a beam G x n costs G * n kernels per task as the independent G x n does. Its
  trajectories are not independent, so its scaling curve has the k = G point only.
- **Speedup against each baseline**: per configuration and per reference timing the sandbox took (eager,
  eager with TF32, ``torch.compile``; ``EvalResult.baselines_ms``), the mean speedup of the correct kernels and
  fast_1 over tasks: a speedup over a baseline a reader would not use (eager fp32 without TF32) can vanish
  against a stronger one.

Everything here is pure (records in, records out) except ``write_markdown_report`` and the ``plot_*``
functions, which write files; matplotlib is imported inside the plot functions only.

>>> from kevin.core.eval.report import bootstrap_ci
>>> bootstrap_ci([1.0, 1.0, 1.0])
(1.0, 1.0, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from kevin.core.eval import metrics as _metrics
from kevin.core.types import Trajectory, Turn

# --------------------------------------------------------------------------------------------------
# Bootstrap over tasks


def bootstrap_ci(
    per_task_values: Sequence[float], *, n_resamples: int = 1000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """Mean over tasks and its percentile-bootstrap (1 - alpha) confidence interval.

    Args:
        per_task_values: [B] one number per task (for example a task's best@16 speedup).
        n_resamples: R bootstrap resamples; each draws B tasks with replacement.
        alpha: 0.05 gives a 95% interval.
        seed: seeds a private ``torch.Generator``; the same inputs give the same interval.

    Returns ``(mean, lo, hi)``: ``mean`` is the plain mean of the B values; ``lo`` and ``hi`` are the
    alpha/2 and 1 - alpha/2 quantiles (linear interpolation) of the R resampled means.

    The interval covers the variation from *which tasks* are in the evaluation set, the dominant noise
    with 100 tasks. It treats each task's value as fixed, so it does not include the sampling noise of
    the G trajectories within a task; with small G the true uncertainty is larger.

    Constant values give a zero-width interval: ``bootstrap_ci([2, 2]) == (2.0, 2.0, 2.0)``.
    """
    if len(per_task_values) == 0:
        raise ValueError("bootstrap_ci needs at least one task value")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    values = torch.tensor([float(v) for v in per_task_values], dtype=torch.float64)  # [B]
    mean = values.mean().item()
    if bool((values == values[0]).all()):
        return mean, mean, mean  # every resample has the same mean; skip float noise of quantile
    generator = torch.Generator().manual_seed(seed)
    index = torch.randint(len(values), (n_resamples, len(values)), generator=generator)  # [R, B]
    means = values[index].mean(dim=1)  # [R]
    q = torch.tensor([alpha / 2, 1 - alpha / 2], dtype=torch.float64)
    lo, hi = torch.quantile(means, q).tolist()
    return mean, lo, hi


@dataclass(frozen=True)
class Estimate:
    """A mean over tasks with its bootstrap interval [lo, hi]."""

    mean: float
    lo: float
    hi: float

    @classmethod
    def of(cls, per_task_values: Sequence[float], *, n_resamples: int = 1000, alpha: float = 0.05,
           seed: int = 0) -> "Estimate":
        return cls(*bootstrap_ci(per_task_values, n_resamples=n_resamples, alpha=alpha, seed=seed))


# --------------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True)
class Summary:
    """The eight numbers of one row of the paper's Table 1, each a mean over tasks with its CI.

    ``correct_*`` are fractions in [0, 1]; ``speedup_*`` are speedups (0 for a trajectory with no
    correct kernel); ``fast1_*`` and ``fast15_*`` are the fractions fast_1 and fast_1.5.
    """

    k: int
    correct_best: Estimate
    correct_avg: Estimate
    speedup_best: Estimate
    speedup_avg: Estimate
    fast1_best: Estimate
    fast1_avg: Estimate
    fast15_best: Estimate
    fast15_avg: Estimate

    FIELDS = _metrics.TaskMetrics.VALUE_FIELDS


@dataclass(frozen=True)
class Compute:
    """What a set of turns cost, summed over all its turns (all tasks, trajectories, turns).

    ``generation_s`` and ``evaluation_s`` are the seconds the rollout attributed to each turn; with
    batched generation the rollout splits a batch's time over its turns, so they add up to wall time.
    """

    kernels: int
    prompt_tokens: int
    generated_tokens: int
    generation_s: float
    evaluation_s: float

    def __add__(self, other: "Compute") -> "Compute":
        return Compute(self.kernels + other.kernels, self.prompt_tokens + other.prompt_tokens,
                       self.generated_tokens + other.generated_tokens,
                       self.generation_s + other.generation_s, self.evaluation_s + other.evaluation_s)


@dataclass(frozen=True)
class TurnRow:
    """One row of the per-turn-budget table: every trajectory cut to its first ``turns`` turns."""

    turns: int
    summary: Summary
    compute: Compute


@dataclass(frozen=True)
class BudgetRow:
    """One column of the paper's Table 2: configuration m x n scored best@m at n turns."""

    m: int
    n: int
    n_tasks: int
    summary: Summary
    compute: Compute
    name: str | None = None

    @property
    def label(self) -> str:
        """``name`` when given (say "16x8 beam 4/4"), else "MxN"."""
        return self.name or f"{self.m}x{self.n}"


@dataclass(frozen=True)
class CurvePoint:
    """best@k of one configuration at k trajectories: what k * n kernels buy (means over tasks)."""

    k: int
    kernels: float
    generated_tokens: float
    correct_best: float
    speedup_best: float


@dataclass(frozen=True)
class BaselineRow:
    """One configuration's kernels against one reference timing (``EvalResult.speedup_vs(baseline)``).

    ``mean_speedup`` is over the ``n_timed`` correct kernels with that timing (None if none); ``fast1`` the
    share of the ``n_tasks`` tasks with a correct kernel at least as fast as that baseline (any turn, any
    trajectory: Table 2's fast_1 best@m).
    """

    config: str
    baseline: str
    n_tasks: int
    n_correct: int
    n_timed: int
    mean_speedup: float | None
    fast1: float


# --------------------------------------------------------------------------------------------------
# Grouping and compute


def group_by_task(trajectories: Sequence[Trajectory]) -> list[list[Trajectory]]:
    """Trajectories grouped per task (``kevin.core.eval.metrics.group_by_task``: first-seen task order,
    by trajectory_index within a task).

    Raises ValueError when tasks have different numbers of trajectories or trajectories different
    numbers of turns: every estimator here assumes G trajectories x T turns for every task.
    """
    if not trajectories:
        raise ValueError("no trajectories to report")
    out = list(_metrics.group_by_task(trajectories).values())
    sizes = {len(g) for g in out}
    turns = {len(tr.turns) for tr in trajectories}
    if len(sizes) != 1:
        raise ValueError(f"tasks have different numbers of trajectories: {sorted(sizes)}")
    if len(turns) != 1:
        raise ValueError(f"trajectories have different numbers of turns: {sorted(turns)}")
    return out


def shape_of(trajectories: Sequence[Trajectory]) -> tuple[int, int, int]:
    """(B tasks, G trajectories per task, T turns) of a rollout."""
    groups = group_by_task(trajectories)
    return len(groups), len(groups[0]), len(groups[0][0].turns)


def generated_turns(trajectory: Trajectory, *, turns: int | None = None) -> list[Turn]:
    """Every turn the trajectory's slot generated at positions < ``turns`` (all when None): its own turns on
    its path (not the ``replica`` copies) and the ones beam search pruned from it.

    Over a rollout's trajectories each generated kernel appears exactly once: B * G * t turns for t positions.
    Without beam search, the path's first ``turns`` turns.
    """
    own = [t for t in trajectory.turns[:turns] if not t.replica]
    return own + [t for i, t in trajectory.pruned if turns is None or i < turns]


def compute_used(trajectories: Sequence[Trajectory], *, turns: int | None = None) -> Compute:
    """Sum of the costs of every generated turn (:func:`generated_turns`; the first ``turns`` positions when
    given): a beam rollout's replicas are not counted, its pruned turns are.

    >>> compute_used([]).kernels
    0
    """
    total = Compute(0, 0, 0, 0.0, 0.0)
    for trajectory in trajectories:
        for turn in generated_turns(trajectory, turns=turns):
            total += Compute(1, turn.prompt_tokens, turn.generated_tokens, turn.generation_s,
                             turn.evaluation_s)
    return total


def is_beam(trajectories: Sequence[Trajectory]) -> bool:
    """Whether beam search copied or pruned turns of this rollout (its trajectories are then not independent)."""
    return any(tr.pruned or any(t.replica for t in tr.turns) for tr in trajectories)


# --------------------------------------------------------------------------------------------------
# Tables


def summarize(trajectories: Sequence[Trajectory], *, turns: int | None = None, k: int | None = None,
              n_resamples: int = 1000, alpha: float = 0.05, seed: int = 0) -> Summary:
    """Table 1's eight columns for the first ``turns`` turns (default all) and best@k (default k = G).

    Per task, values come from ``kevin.core.eval.metrics.task_metrics``; the Summary holds their mean over
    tasks with a bootstrap CI.
    """
    groups = group_by_task(trajectories)
    g = len(groups[0])
    k = g if k is None else k
    if not 1 <= k <= g:
        raise ValueError(f"best@k needs 1 <= k <= G = {g}, got k = {k}")
    per_task = [_metrics_per_task(group, turns=turns, k=k) for group in groups]  # B dicts
    est = {name: Estimate.of([t[name] for t in per_task], n_resamples=n_resamples, alpha=alpha,
                             seed=seed) for name in Summary.FIELDS}
    return Summary(k=k, **est)


def turn_table(trajectories: Sequence[Trajectory], *, k: int | None = None, n_resamples: int = 1000,
               alpha: float = 0.05, seed: int = 0) -> list[TurnRow]:
    """One TurnRow per turn budget t = 1..T (Table 1 at every t; the data of the paper's Fig. 5)."""
    _, _, n_turns = shape_of(trajectories)
    return [TurnRow(t, summarize(trajectories, turns=t, k=k, n_resamples=n_resamples, alpha=alpha,
                                 seed=seed), compute_used(trajectories, turns=t))
            for t in range(1, n_turns + 1)]


def equal_budget_table(rollouts: Sequence[Sequence[Trajectory]], *, n_resamples: int = 1000,
                       alpha: float = 0.05, seed: int = 0, labels: Sequence[str | None] | None = None
                       ) -> list[BudgetRow]:
    """Table 2: one BudgetRow per rollout (each an m x n configuration), scored best@m at n turns.

    The rollouts should share tasks and kernel budget m * n; a mismatch is not an error (a partial
    table is still informative) but the markdown report flags it. ``labels``: one per rollout
    (``BudgetRow.name``; None: "MxN").
    """
    rows = []
    for trajectories, name in zip(rollouts, labels or [None] * len(rollouts), strict=True):
        n_tasks, m, n = shape_of(trajectories)
        rows.append(BudgetRow(m, n, n_tasks,
                              summarize(trajectories, n_resamples=n_resamples, alpha=alpha, seed=seed),
                              compute_used(trajectories), name))
    return rows


def scaling_curve(trajectories: Sequence[Trajectory], *, ks: Sequence[int] | None = None) -> list[CurvePoint]:
    """best@k at all n turns for k in ``ks`` (default 1, 2, 4, ... and G): Fig. 6 for one configuration.

    ``kernels`` = k * n; ``generated_tokens`` = k times the mean generated tokens of one trajectory,
    averaged over tasks (what k trajectories cost on average). A beam rollout (:func:`is_beam`) gives the
    k = G point only, whatever ``ks``: its paths share turns, so k of them are no sample of k independent
    trajectories; its tokens are those it generated per task (``compute_used``).
    """
    groups = group_by_task(trajectories)
    g = len(groups[0])
    n = len(groups[0][0].turns)
    if is_beam(trajectories):
        per_task = [_metrics_per_task(group, turns=None, k=g) for group in groups]
        return [CurvePoint(g, float(g * n), compute_used(trajectories).generated_tokens / len(groups),
                           sum(p["correct_best"] for p in per_task) / len(groups),
                           sum(p["speedup_best"] for p in per_task) / len(groups))]
    if ks is None:
        ks = sorted({2**i for i in range(int(math.log2(g)) + 1)} | {g})
    per_traj_tokens = [sum(sum(t.generated_tokens for t in tr.turns) for tr in gr) / g for gr in groups]
    mean_traj_tokens = sum(per_traj_tokens) / len(groups)
    points = []
    for k in ks:
        per_task = [_metrics_per_task(group, turns=None, k=k) for group in groups]
        points.append(CurvePoint(k, float(k * n), k * mean_traj_tokens,
                                 sum(p["correct_best"] for p in per_task) / len(groups),
                                 sum(p["speedup_best"] for p in per_task) / len(groups)))
    return points


BASELINE_ORDER = ("eager", "tf32", "compile")


def baselines_present(trajectories: Sequence[Trajectory]) -> list[str]:
    """The baseline names any result of ``trajectories`` was timed against: eager, tf32, compile, then others."""
    names = {name for tr in trajectories for turn in generated_turns(tr) for name in turn.result.baselines_ms}
    return [b for b in BASELINE_ORDER if b in names] + sorted(names - set(BASELINE_ORDER))


def baseline_table(rollouts: Mapping[str, Sequence[Trajectory]]) -> list[BaselineRow]:
    """One BaselineRow per configuration (label -> its trajectories) and baseline present in its results.

    Records written before ``baselines_ms`` existed carry none, and give no rows. Every generated kernel
    counts once (:func:`generated_turns`: a beam rollout's replicas are not counted again, its pruned turns are).
    """
    rows = []
    for label, trajectories in rollouts.items():
        groups = _metrics.group_by_task(trajectories).values()
        correct = [t.result for tr in trajectories for t in generated_turns(tr) if t.result.correct]
        for name in baselines_present(trajectories):
            speedups = [s for s in (r.speedup_vs(name) for r in correct) if s is not None]
            fast = sum(any((t.result.speedup_vs(name) or 0.0) >= 1.0 for tr in group for t in generated_turns(tr))
                       for group in groups)
            rows.append(BaselineRow(label, name, len(groups), len(correct), len(speedups),
                                    sum(speedups) / len(speedups) if speedups else None, fast / max(len(groups), 1)))
    return rows


def metrics_records(turn_rows: Sequence[TurnRow], budget_rows: Sequence[BudgetRow],
                    baseline_rows: Sequence[BaselineRow] = ()) -> list[dict]:
    """Flat, namespaced records for ``metrics.jsonl``: one per turn budget, one per configuration.

    Keys: ``table`` ("turns" | "budget"), ``turns`` or ``config``, then ``correct/best@k``,
    ``correct/avg@k``, ``speedup/best@k``, ``speedup/avg@k``, ``fast_1/best@k``, ``fast_1/avg@k``,
    ``fast_1.5/best@k``, ``fast_1.5/avg@k``, each also with ``_lo`` and ``_hi``, and ``compute/...``; then one
    record per `BaselineRow` (``table`` "baselines": ``config``, ``baseline``, ``speedup/mean_correct``,
    ``fast_1``, ``kernels/correct``, ``kernels/timed``, ``n_tasks``).
    """
    records = []
    for row in turn_rows:
        records.append({"table": "turns", "turns": row.turns, **_flat(row.summary), **_flat_compute(row.compute)})
    for row in budget_rows:
        records.append({"table": "budget", "config": row.label, "m": row.m, "n": row.n,
                        "n_tasks": row.n_tasks, **_flat(row.summary), **_flat_compute(row.compute)})
    for b in baseline_rows:
        records.append({"table": "baselines", "config": b.config, "baseline": b.baseline, "n_tasks": b.n_tasks,
                        "speedup/mean_correct": b.mean_speedup, "fast_1": b.fast1, "kernels/correct": b.n_correct,
                        "kernels/timed": b.n_timed})
    return records


_COLUMN = {"correct_best": "correct/best@k", "correct_avg": "correct/avg@k",
           "speedup_best": "speedup/best@k", "speedup_avg": "speedup/avg@k",
           "fast1_best": "fast_1/best@k", "fast1_avg": "fast_1/avg@k",
           "fast15_best": "fast_1.5/best@k", "fast15_avg": "fast_1.5/avg@k"}


def _flat(summary: Summary) -> dict:
    out: dict = {"k": summary.k}
    for name in Summary.FIELDS:
        e: Estimate = getattr(summary, name)
        key = _COLUMN[name]
        out[key], out[key + "_lo"], out[key + "_hi"] = e.mean, e.lo, e.hi
    return out


def _flat_compute(c: Compute) -> dict:
    return {"compute/kernels": c.kernels, "compute/prompt_tokens": c.prompt_tokens,
            "compute/generated_tokens": c.generated_tokens, "compute/generation_s": c.generation_s,
            "compute/evaluation_s": c.evaluation_s}


# --------------------------------------------------------------------------------------------------
# Per-task values, from kevin.core.eval.metrics


def _metrics_per_task(group: Sequence[Trajectory], *, turns: int | None, k: int) -> dict[str, float]:
    """Summary.FIELDS -> value for one task's G trajectories cut to their first ``turns`` turns."""
    return _metrics.task_metrics(group, k=k, turns=turns).values()


# --------------------------------------------------------------------------------------------------
# Markdown and plots


def _pct(e: Estimate) -> str:
    return f"{100 * e.mean:.1f}% [{100 * e.lo:.1f}, {100 * e.hi:.1f}]"


def _x(e: Estimate) -> str:
    return f"{e.mean:.2f}x [{e.lo:.2f}, {e.hi:.2f}]"


def _summary_cells(s: Summary) -> list[str]:
    return [_pct(s.correct_best), _pct(s.correct_avg), _x(s.speedup_best), _x(s.speedup_avg),
            _pct(s.fast1_best), _pct(s.fast1_avg), _pct(s.fast15_best), _pct(s.fast15_avg)]


_BASELINE_WORDS = {"eager": " in eager PyTorch, default settings", "tf32": " in eager PyTorch with TF32 allowed",
                   "compile": " under torch.compile"}


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def markdown_report(turn_rows: Sequence[TurnRow], budget_rows: Sequence[BudgetRow], *,
                    title: str = "Evaluation", n_tasks: int | None = None, alpha: float = 0.05,
                    settings: Mapping[str, object] | None = None,
                    plots: Sequence[str] = (), baseline_rows: Sequence[BaselineRow] = (),
                    rules: str | None = None, baseline: str | None = None) -> str:
    """The report as markdown text (pure; ``write_markdown_report`` writes it). ``rules`` and ``baseline``
    name the sandbox's rule set and the reference timing the speedups of Tables 1 and 2 divide by."""
    ci = f"{100 * (1 - alpha):.0f}%"
    lines = [f"# {title}", ""]
    if rules is not None or baseline is not None:
        lines += [f"Rule set: {rules or 'not recorded'}. Speedups divide by the {baseline or 'unrecorded'} "
                  "baseline (the reference's runtime" + _BASELINE_WORDS.get(baseline or "", "") + ").", ""]
    if n_tasks is not None:
        lines += [f"{n_tasks} tasks. Every number is a mean over tasks with its {ci} percentile-bootstrap "
                  "interval over tasks in brackets. A trajectory is correct if one of its kernels is; "
                  "its speedup is that of its fastest correct kernel, 0 if none (paper section 5).", ""]
    if turn_rows:
        k = turn_rows[0].summary.k
        lines += [f"## Per turn budget (Table 1 at each turn; best@{k} and avg@{k})", ""]
        header = ["turns", f"correct best@{k}", f"correct avg@{k}", f"speedup best@{k}",
                  f"speedup avg@{k}", "fast_1 best", "fast_1 avg", "fast_1.5 best", "fast_1.5 avg",
                  "gen. tokens"]
        lines += _table(header, [[r.turns, *_summary_cells(r.summary), r.compute.generated_tokens]
                                 for r in turn_rows])
        lines.append("")
    if budget_rows:
        lines += ["## Equal kernel budget (Table 2): best@m of m trajectories x n turns", ""]
        budgets = {r.m * r.n for r in budget_rows}
        if len(budgets) > 1:
            lines += [f"Note: the configurations do not share one kernel budget ({sorted(budgets)}).", ""]
        task_counts = {r.n_tasks for r in budget_rows}
        if len(task_counts) > 1:
            lines += [f"Note: the configurations were run on different numbers of tasks ({sorted(task_counts)}).", ""]
        header = ["config", "kernels/task", "speedup best@m", "correct best@m", "fast_1 best@m",
                  "fast_1.5 best@m"]
        lines += _table(header, [[r.label, r.m * r.n, _x(r.summary.speedup_best),
                                  _pct(r.summary.correct_best), _pct(r.summary.fast1_best),
                                  _pct(r.summary.fast15_best)] for r in budget_rows])
        lines += ["", "### Compute used (all tasks)", ""]
        header = ["config", "kernels", "prompt tokens", "generated tokens", "generation s", "sandbox s",
                  "prompt tokens/kernel", "generated tokens/kernel"]
        lines += _table(header, [[r.label, c.kernels, c.prompt_tokens, c.generated_tokens,
                                  f"{c.generation_s:.1f}", f"{c.evaluation_s:.1f}",
                                  f"{c.prompt_tokens / max(c.kernels, 1):.0f}",
                                  f"{c.generated_tokens / max(c.kernels, 1):.0f}"]
                                 for r in budget_rows for c in [r.compute]])
        if any(r.compute.kernels and not r.compute.generated_tokens for r in budget_rows):
            lines += ["", "Token counts of 0 mean the backend reported neither token ids nor usage counts."]
        lines.append("")
    if baseline_rows:
        lines += ["## Speedup against each baseline", "",
                  "Per configuration, every kernel: the mean speedup of the correct kernels timed against that "
                  "baseline, and fast_1, the share of tasks with a correct kernel at least as fast as it "
                  "(eager: PyTorch's defaults; tf32: TF32 matmuls and convolutions allowed; compile: "
                  "`torch.compile`).", ""]
        lines += _table(["config", "baseline", "mean speedup (correct)", "fast_1", "correct kernels timed"],
                        [[b.config, b.baseline + (" (used above)" if b.baseline == baseline else ""),
                          "n/a" if b.mean_speedup is None else f"{b.mean_speedup:.2f}x", f"{100 * b.fast1:.1f}%",
                          f"{b.n_timed}/{b.n_correct}"] for b in baseline_rows])
        lines.append("")
    if plots:
        lines += ["## Plots", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots] + [""]
    if settings:
        lines += ["## Settings", "", "```"] + [f"{k_}: {v}" for k_, v in settings.items()] + ["```", ""]
    return "\n".join(lines)


def write_markdown_report(path: str | Path, turn_rows: Sequence[TurnRow], budget_rows: Sequence[BudgetRow],
                          **kwargs) -> Path:
    """Write ``markdown_report(...)`` to ``path`` (keyword arguments as there); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown_report(turn_rows, budget_rows, **kwargs))
    return path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def plot_turns(turn_rows: Sequence[TurnRow], path: str | Path, *, title: str = "") -> Path:
    """Correctness and speedup against turns, best@k and avg@k with CI bands (the paper's Fig. 5)."""
    plt = _pyplot()
    t = [r.turns for r in turn_rows]
    k = turn_rows[0].summary.k
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric, ylabel in ((axes[0], "correct", "correct (fraction)"), (axes[1], "speedup", "speedup (x)")):
        for kind, style in (("best", "-o"), ("avg", "--s")):
            es = [getattr(r.summary, f"{metric}_{kind}") for r in turn_rows]
            ax.plot(t, [e.mean for e in es], style, label=f"{kind}@{k}")
            ax.fill_between(t, [e.lo for e in es], [e.hi for e in es], alpha=0.2)
        ax.set_xlabel("turns")
        ax.set_ylabel(ylabel)
        ax.set_xticks(t)
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_equal_budget(curves: Mapping[str, Sequence[CurvePoint]], path: str | Path, *,
                      title: str = "") -> Path:
    """Serial against parallel: best@k speedup (top) and correctness (bottom) of each m x n
    configuration for k = 1..m, against kernels per task (left) and generated tokens per task (right)."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for (row, y_name, y_label) in ((0, "speedup_best", "speedup best@k (x)"), (1, "correct_best", "correct best@k")):
        for (col, x_name, x_label) in ((0, "kernels", "kernels per task"),
                                       (1, "generated_tokens", "generated tokens per task")):
            ax = axes[row][col]
            for label, points in curves.items():
                xs = [getattr(p, x_name) for p in points]
                if max(xs, default=0) > 0:  # no token ids and no usage counts: nothing to plot
                    ax.plot(xs, [getattr(p, y_name) for p in points], "-o", label=label)
            ax.set_xlabel(x_label)
            ax.set_ylabel(y_label)
            ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3)
            if ax.lines:
                ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
