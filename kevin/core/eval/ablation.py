"""One table over several training runs: what each changed and how its correct share moved.

A reward ablation is a set of runs of one recipe that differ in a few config fields (gamma, sum or max returns,
the correctness weight, the advantage baseline). Each run writes ``config.json`` and ``metrics.jsonl`` into its
output directory (`kevin.core.run.rundir.RunDir`); this module reads them back and lines the runs up:

- the fields that differ between the runs (all of `ABLATION_FIELDS` when only one run is given);
- ``correct, first``: ``rollout/correct`` (every turn pooled) at the first logged step;
- ``correct, last k``: its mean over the last ``k`` steps (k = 2 by default: one step is noisy);
- ``turn T correct, last k`` (T the last turn) and ``score, last k`` (``reward/score_mean``), the same means.

>>> rows = ablation_rows({"g0": ({"gamma": 0.0}, [{"step": 1, "rollout/correct": 0.5},
...                                                {"step": 2, "rollout/correct": 0.75}])}, last=1)
>>> rows[0]["correct, first"], rows[0]["correct, last 1"]
(0.5, 0.75)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

ABLATION_FIELDS = ("gamma", "reward_mode", "correctness_weight", "advantage_baseline", "scale_by_std", "seed")
"""The config fields a reward ablation varies (and the seed), in the order the table shows them."""


def read_run(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(config, step records) of a training run's output directory; the step-0 config record is left out."""
    path = Path(path)
    metrics = path / "metrics.jsonl"
    if not metrics.is_file():
        raise FileNotFoundError(f"{path} has no metrics.jsonl: not a training run's output directory")
    config = json.loads((path / "config.json").read_text()) if (path / "config.json").is_file() else {}
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return config, [r for r in records if r.get("step", 0) >= 1 and "rollout/correct" in r]


def varied_fields(configs: Sequence[Mapping[str, Any]], fields: Sequence[str] = ABLATION_FIELDS) -> list[str]:
    """The ``fields`` whose value is not the same in every config (all of them for a single config).

    >>> varied_fields([{"gamma": 0.4, "seed": 0}, {"gamma": 0.0, "seed": 0}])
    ['gamma']
    """
    if len(configs) < 2:
        return list(fields)
    return [f for f in fields if len({json.dumps(c.get(f)) for c in configs}) > 1]


def _mean_last(records: Sequence[Mapping[str, Any]], key: str, k: int) -> float | None:
    values = [float(r[key]) for r in records if isinstance(r.get(key), (int, float))][-k:]
    return sum(values) / len(values) if values else None


def ablation_rows(runs: Mapping[str, tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]], *,
                  last: int = 2) -> list[dict[str, Any]]:
    """One row per run (in the order given): its name, the varied fields, steps and the correct shares."""
    fields = varied_fields([config for config, _ in runs.values()])
    rows = []
    for name, (config, records) in runs.items():
        turns = max((int(k[4:].split("/")[0]) for r in records for k in r
                     if k.startswith("turn") and k.endswith("/correct") and k[4:].split("/")[0].isdigit()), default=0)
        row: dict[str, Any] = {"run": name, **{f: config.get(f) for f in fields}, "steps": len(records),
                               "correct, first": records[0]["rollout/correct"] if records else None,
                               f"correct, last {last}": _mean_last(records, "rollout/correct", last)}
        if turns > 1:
            row[f"turn {turns} correct, last {last}"] = _mean_last(records, f"turn{turns}/correct", last)
        row[f"score, last {last}"] = _mean_last(records, "reward/score_mean", last)
        rows.append(row)
    return rows


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as a markdown table (columns: the union of the rows' keys, in first-seen order)."""
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]

    def cell(v: Any) -> str:
        return "" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)
