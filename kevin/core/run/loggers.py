"""Metric loggers: one flat, namespaced dict per step, written as one JSON line.

A recipe builds one metrics dict per step (``reward/mean``, ``loss/policy``, ``rollout/turns``,
``time/generation``, ...) and hands it to a logger. ``JsonlLogger`` appends it to a file, which the
smoke tests and the report read back; ``NullLogger`` does nothing, so a recipe never needs an
``if rank == 0`` or ``if use_wandb`` branch around logging (nanochat's ``DummyWandb``). Trackers such as
tensorboard, trackio or wandb are driven by ``accelerate`` in the recipe (``log_with=``); see
``AccelerateLogger``. Standard library only (the accelerate logger receives the accelerator object).

>>> import io, json
>>> buf = io.StringIO()
>>> JsonlLogger(buf).log({"reward/mean": 0.5, "loss/policy": 0.25}, step=3)
>>> json.loads(buf.getvalue())
{'step': 3, 'reward/mean': 0.5, 'loss/policy': 0.25}
"""

from __future__ import annotations

import json
import math
import os
from typing import IO, Any, Iterable, Mapping

__all__ = [
    "JsonlLogger", "NullLogger", "AccelerateLogger", "MultiLogger", "read_jsonl", "to_jsonable", "drop_records_from",
    "markdown_table",
]


def to_jsonable(value: Any) -> Any:
    """A JSON-safe copy of ``value``: tensors/numpy scalars -> Python numbers, NaN/inf -> None.

    >>> to_jsonable({"a": float("nan"), "b": (1, 2.5)})
    {'a': None, 'b': [1, 2.5]}
    """
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:  # torch / numpy scalar
        value = value.item()
    if hasattr(value, "tolist"):  # tensor or array
        value = value.tolist()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


class NullLogger:
    """Accepts every call and does nothing (the logger of non-main processes)."""

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        pass

    def close(self) -> None:
        pass


class JsonlLogger:
    """Appends ``{"step": step, **metrics}`` as one line per call to a file path or an open text stream.

    Opens in append mode, so a resumed run continues the same file. Each line is flushed at once: a
    crash loses at most the line being written.
    """

    def __init__(self, path_or_stream: str | os.PathLike | IO[str]):
        if isinstance(path_or_stream, (str, os.PathLike)):
            os.makedirs(os.path.dirname(os.path.abspath(path_or_stream)), exist_ok=True)
            self._fh: IO[str] = open(path_or_stream, "a", encoding="utf-8")
            self._owns = True
        else:
            self._fh, self._owns = path_or_stream, False

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        record = {"step": int(step), **to_jsonable(dict(metrics))}
        self._fh.write(json.dumps(record, sort_keys=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._owns and not self._fh.closed:
            self._fh.close()


class AccelerateLogger:
    """Forwards numeric metrics to the trackers an ``accelerate.Accelerator`` was built with.

    Only int/float values are forwarded (trackers reject strings and lists); call on every process,
    accelerate itself logs on the main process only.
    """

    def __init__(self, accelerator: Any):
        self._acc = accelerator

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        numeric = {k: v for k, v in to_jsonable(dict(metrics)).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self._acc.log(numeric, step=int(step))

    def close(self) -> None:
        self._acc.end_training()


class MultiLogger:
    """Sends every call to each of several loggers."""

    def __init__(self, loggers: Iterable[Any]):
        self._loggers = list(loggers)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for lg in self._loggers:
            lg.log(metrics, step)

    def close(self) -> None:
        for lg in self._loggers:
            lg.close()


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Every record of a JSONL file, in order (blank lines skipped; a torn last line is dropped)."""
    records = []
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # the line a crash interrupted
                break
            raise
    return records


def drop_records_from(path: str | os.PathLike, step: int) -> int:
    """Rewrite a JSONL file keeping only records with ``record["step"] < step``; returns how many were dropped.

    A resumed run calls this before appending, so steps logged after the checkpoint it resumes from
    (by the run that crashed) are not logged twice. Written to a temporary file, then renamed.
    """
    if not os.path.exists(path):
        return 0
    records = read_jsonl(path)
    keep = [r for r in records if r.get("step", -1) < step]
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in keep)
    os.replace(tmp, path)
    return len(records) - len(keep)


def markdown_table(records: Iterable[Mapping[str, Any]], keys: Iterable[str], *, digits: int = 3) -> str:
    """A markdown table with one row per record and one column per key ('' where a record lacks it).

    >>> print(markdown_table([{"step": 1, "loss/policy": 0.12345}], ["step", "loss/policy"]))
    | step | loss/policy |
    | --- | --- |
    | 1 | 0.123 |
    """
    keys = list(keys)

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.{digits}f}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(keys) + " |", "| " + " | ".join("---" for _ in keys) + " |"]
    lines += ["| " + " | ".join(cell(r.get(k)) for k in keys) + " |" for r in records]
    return "\n".join(lines)
