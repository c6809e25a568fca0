"""Plots of a training run over its steps, from the step records of ``metrics.jsonl``, for ``report.md``.

`step_panels` reads the records (one dict per step, as `kevin.core.run.rundir.RunDir.log_step` logs them) into
panels of series, a pure function; `write_step_plots` draws each panel that has data as one PNG. A panel whose
keys no record has is skipped, so older runs and runs that log less still get the panels they can.

The panels and the keys they read (``turn{t}``: every turn index the records have; a missing value, or one logged
as null, leaves a gap):

- ``reward``: ``reward/score_mean``, ``reward/return_mean``;
- ``correct_per_turn``: ``turn{t}/correct`` and ``rollout/correct`` (all turns pooled);
- ``status``: the shares ``rollout/status/{format_error, compile_error, runtime_error, timeout, incorrect,
  correct}``, stacked;
- ``speedup``: the mean speedup of the correct kernels, ``rollout/speedup / rollout/correct`` (and per turn
  ``turn{t}/speedup / turn{t}/correct``): ``*/speedup`` counts an incorrect kernel as 0, so dividing by the share
  of correct kernels gives their mean (a correct kernel that was not timed counts 0); no point where no kernel
  was correct;
- ``not_okay``: the Not-Okay ratio ``rollout/not_okay`` and ``turn{t}/not_okay``;
- ``truncation``: ``rollout/truncated`` and ``turn{t}/truncated``;
- ``response_length``: ``rollout/response_tokens`` and ``turn{t}/response_tokens``;
- ``rejections``: every ``reject/...`` key (`kevin.rewards.telemetry`); in a step that logged some ``reject/``
  key, one it did not log counts 0 (its family rejected nothing); families at 0 in every step are not drawn.

Matplotlib (the ``train`` extra) is imported only when drawing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kevin.sandbox.result import STATUSES

__all__ = ["Series", "Panel", "PANELS", "PLOT_FILES", "plot_file", "step_panels", "write_step_plots"]


@dataclass(frozen=True)
class Series:
    """One line (or one stacked band) of a panel: its label and its (step, value) points."""

    label: str
    steps: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class Panel:
    """One figure: its ``name`` (the file is `plot_file` of it), title, y-axis label and series."""

    name: str
    title: str
    ylabel: str
    series: tuple[Series, ...]
    stacked: bool = False  # bars stacked per step (shares that sum to 1)


PANELS = {
    "reward": ("Mean score and return", "mean over samples"),
    "correct_per_turn": ("Correct share per turn", "share of kernels correct"),
    "status": ("Status shares", "share of kernels"),
    "speedup": ("Mean speedup of correct kernels", "speedup (x)"),
    "not_okay": ("Not-Okay ratio", "share of thoughts"),
    "truncation": ("Truncation", "share of responses truncated"),
    "response_length": ("Response length", "mean response tokens"),
    "rejections": ("Rejections by rule family", "share of samples"),
}
"""name -> (title, y-axis label) of every panel, in the order the report shows them."""


def plot_file(name: str) -> str:
    """The PNG file name of panel ``name``: ``plot_<name>.png``."""
    return f"plot_{name}.png"


PLOT_FILES = tuple(plot_file(name) for name in PANELS)
"""Every file `write_step_plots` may write."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _series(records: Sequence[Mapping[str, Any]], key: str, label: str | None = None) -> Series | None:
    points = [(int(r["step"]), v) for r in records if (v := _number(r.get(key))) is not None]
    if not points:
        return None
    return Series(label or key, tuple(s for s, _ in points), tuple(v for _, v in points))


def _ratio(records: Sequence[Mapping[str, Any]], num: str, den: str, label: str) -> Series | None:
    points = []
    for r in records:
        n, d = _number(r.get(num)), _number(r.get(den))
        if n is not None and d is not None and d > 0:
            points.append((int(r["step"]), n / d))
    if not points:
        return None
    return Series(label, tuple(s for s, _ in points), tuple(v for _, v in points))


def _turns(records: Sequence[Mapping[str, Any]], metric: str) -> list[int]:
    pattern = re.compile(rf"turn(\d+)/{re.escape(metric)}")
    found = {int(m.group(1)) for r in records for k in r if (m := pattern.fullmatch(k))}
    return sorted(found)


def _per_turn(records: Sequence[Mapping[str, Any]], metric: str) -> list[Series | None]:
    """``rollout/<metric>`` (all turns) first, then ``turn{t}/<metric>`` for each turn."""
    return [_series(records, f"rollout/{metric}", "all turns"),
            *(_series(records, f"turn{t}/{metric}", f"turn {t}") for t in _turns(records, metric))]


def _rejections(records: Sequence[Mapping[str, Any]]) -> list[Series | None]:
    keys = sorted({k for r in records for k in r if k.startswith("reject/")})
    logged = [r for r in records if any(k.startswith("reject/") for k in r)]
    series = []
    for key in keys:
        points = [(int(r["step"]), v if (v := _number(r.get(key))) is not None else 0.0) for r in logged]
        if any(v for _, v in points):
            series.append(Series(key[len("reject/"):], tuple(s for s, _ in points), tuple(v for _, v in points)))
    if keys and not series:  # every family at 0 throughout: still show that the telemetry ran
        first = "reject/any" if "reject/any" in keys else keys[0]
        steps = tuple(int(r["step"]) for r in logged)
        series.append(Series(first[len("reject/"):], steps, (0.0,) * len(steps)))
    return series


def step_panels(records: Sequence[Mapping[str, Any]]) -> list[Panel]:
    """The panels (of `PANELS`, in its order) that ``records`` have data for; records without a ``step`` are
    ignored, the others are sorted by step."""
    records = sorted((r for r in records if _number(r.get("step")) is not None), key=lambda r: r["step"])
    speedup = [_ratio(records, "rollout/speedup", "rollout/correct", "all turns"),
               *(_ratio(records, f"turn{t}/speedup", f"turn{t}/correct", f"turn {t}")
                 for t in _turns(records, "speedup"))]
    series = {
        "reward": [_series(records, "reward/score_mean", "score"), _series(records, "reward/return_mean", "return")],
        "correct_per_turn": _per_turn(records, "correct"),
        "status": [_series(records, f"rollout/status/{s}", s) for s in STATUSES],
        "speedup": speedup,
        "not_okay": _per_turn(records, "not_okay"),
        "truncation": _per_turn(records, "truncated"),
        "response_length": _per_turn(records, "response_tokens"),
        "rejections": _rejections(records),
    }
    panels = []
    for name, (title, ylabel) in PANELS.items():
        drawn = tuple(s for s in series[name] if s is not None)
        if drawn:
            panels.append(Panel(name, title, ylabel, drawn, stacked=name == "status"))
    return panels


_POOLED = ("all turns", "any")  # drawn in black, over the per-turn and per-family lines


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def _draw(plt: Any, panel: Panel, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    if panel.stacked:
        bottom: dict[int, float] = {}
        for s in panel.series:
            base = [bottom.get(step, 0.0) for step in s.steps]
            ax.bar(s.steps, s.values, bottom=base, width=0.8, label=s.label)
            for step, v in zip(s.steps, s.values):
                bottom[step] = bottom.get(step, 0.0) + v
        ax.set_ylim(0, 1.05)
    else:
        for s in panel.series:
            pooled = dict(color="black", linewidth=2) if s.label in _POOLED else {}
            ax.plot(s.steps, s.values, "-o", markersize=3, label=s.label, **pooled)
    if panel.name == "speedup":
        ax.axhline(1.0, color="gray", linestyle=":", linewidth=1)
    steps = sorted({step for s in panel.series for step in s.steps})
    if len(steps) == 1:
        ax.set_xlim(steps[0] - 1, steps[0] + 1)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("step")
    ax.set_ylabel(panel.ylabel)
    ax.set_title(panel.title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.savefig(path, dpi=100, bbox_inches="tight")  # "tight": the legend beside the axes is kept
    plt.close(fig)


def write_step_plots(records: Sequence[Mapping[str, Any]], out_dir: str | Path) -> list[tuple[Panel, Path]]:
    """Draw each of `step_panels` of ``records`` as ``out_dir/plot_<name>.png``; (panel, path) of each file
    written, in `PANELS` order. Nothing else in ``out_dir`` is touched."""
    panels = step_panels(records)
    if not panels:
        return []
    plt = _pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for panel in panels:
        path = out / plot_file(panel.name)
        _draw(plt, panel, path)
        written.append((panel, path))
    return written
