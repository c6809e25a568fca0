"""Rollout records: save trajectories with every ``EvalResult`` and load them back.

A rollout file is JSONL, one :class:`~kevin.core.types.Trajectory` per line (``Trajectory.to_dict()``:
token ids, log-probs, parsed parts, the full sandbox verdict and the costs of every turn); a path ending in
``.gz`` is gzip-compressed. Because each turn keeps its raw verdict (status, speedup, runtimes), rewards can
be recomputed with other settings -- correctness weight, speedup cap, discount, sum or max -- without
running a single kernel again (``kevin.rewards.rescore``).

Standard library only.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import threading
from pathlib import Path
from typing import IO, Any, Iterable

from kevin.core.types import Trajectory


def _open(path: Path, mode: str) -> IO[str]:
    if path.suffix == ".gz":  # level 6 (zlib's default): about 9's size in under half its time (benchmarks/LOG.md)
        return gzip.open(path, mode + "t", encoding="utf-8", compresslevel=6)  # type: ignore[return-value]
    return open(path, mode, encoding="utf-8")


def _checked(path: str | os.PathLike) -> Path:
    """``path`` as a Path, when its name ends in ``.jsonl`` or ``.jsonl.gz`` (the one format written here)."""
    path = Path(path)
    if not path.name.endswith((".jsonl", ".jsonl.gz")):
        raise ValueError(f"{path}: a rollout file is JSONL, so its name ends in .jsonl or .jsonl.gz "
                         f"(not {''.join(path.suffixes) or 'nothing'})")
    return path


def save_rollout(trajectories: Iterable[Trajectory], path: str | os.PathLike, *, append: bool = False) -> Path:
    """Write one JSON line per trajectory to ``path`` (``*.jsonl`` or ``*.jsonl.gz``; parents created); ``append``
    adds to an existing file.

    Written to a temporary file and renamed unless appending, so a crash never leaves half a file (nor the
    temporary one).
    """
    path = _checked(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if append:
        with _open(path, "a") as f:
            for traj in trajectories:
                f.write(json.dumps(traj.to_dict(), allow_nan=True) + "\n")
        return path
    tmp = path.with_name(path.name + ".tmp" + path.suffix)
    try:
        with _open(tmp, "w") as f:
            for traj in trajectories:
                f.write(json.dumps(traj.to_dict(), allow_nan=True) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def load_rollout(path: str | os.PathLike) -> list[Trajectory]:
    """Read a file written by :func:`save_rollout` (blank lines skipped). A line that is not a trajectory is a
    ValueError that names the file and the line."""
    path = _checked(path)
    out = []
    with _open(path, "r") as f:
        try:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    out.append(Trajectory.from_dict(json.loads(line)))
                except (ValueError, KeyError, TypeError, AttributeError) as e:
                    what = f"missing field {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
                    raise ValueError(f"{path}, line {number}: not a saved trajectory ({what})") from e
        except (UnicodeDecodeError, gzip.BadGzipFile, EOFError) as e:
            raise ValueError(f"{path}: not a {'gzip-compressed ' if path.suffix == '.gz' else ''}JSONL rollout file "
                             f"({type(e).__name__}: {e})") from e
    return out


def load_evaluation(source: str | os.PathLike, configs: set[str] | None = None) -> tuple[dict[str, list], dict]:
    """The rollouts an evaluation saved (``recipes/evaluate.py``: ``rollouts/MxN.jsonl`` and ``MxN-beam.jsonl`` in
    ``source``, or in ``source`` itself), most turns first, and its settings (its ``config.json``, when there is one,
    plus ``from_rollouts``). ``configs``: the configurations to read ("16x8", each with its beam search); None: those
    its config.json lists, or every one saved. Stopped rollouts (``MxN.partial.jsonl.gz``) are not read.
    SystemExit when none is found."""
    source = Path(source)
    saved = source / "config.json"
    settings = {**(json.loads(saved.read_text()) if saved.exists() else {}), "from_rollouts": str(source)}
    folder = source / "rollouts" if (source / "rollouts").is_dir() else source
    if configs is None and saved.exists() and settings.get("configs"):
        configs = set(settings["configs"].split(","))
    found = {p.stem: p for p in folder.glob("*.jsonl") if re.fullmatch(r"\d+x\d+(-beam)?", p.stem)}
    rollouts = {stem: load_rollout(found[stem])
                for stem in sorted(found, key=lambda s: (-int(re.split("[x-]", s)[1]), int(s.split("x")[0]), s))
                if configs is None or stem.removesuffix("-beam") in configs}
    if not rollouts:
        raise SystemExit(f"no rollouts named MxN.jsonl or MxN-beam.jsonl in {folder}")
    return rollouts, {**settings, "configs": ",".join(rollouts)}


class SnapshotWriter:
    """Saves the latest snapshot it is given (`save_rollout` to ``path``) from a thread of its own, so that a rollout
    never waits on the disk: a snapshot given while another is written replaces any still waiting. ``close()`` (or
    leaving a ``with`` block, an exception included) writes the last one and waits for it.

    Meant as a rollout's ``on_turn``: ``with SnapshotWriter(path) as save: rollout(..., on_turn=save)``. A failed
    write is raised by the next call (or by ``close``), unless a later write succeeded; leaving the block on an
    exception logs it instead, so that the exception (with its ``trajectories``) goes on.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = _checked(path)
        self._latest: list[Trajectory] | None = None
        self._closed = False
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="kevin-snapshot", daemon=True)
        self._thread.start()

    def __call__(self, trajectories: Iterable[Trajectory]) -> None:
        """Queue ``trajectories`` for writing; raises the last write's error, if it failed (so a rollout stops early)."""
        with self._cond:
            if self._closed:
                raise RuntimeError(f"SnapshotWriter({self.path}) is closed")
            if self._error is not None:
                raise self._error
            self._latest = list(trajectories)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._latest is not None or self._closed)
                if self._latest is None:
                    return
                snapshot, self._latest = self._latest, None
            try:
                save_rollout(snapshot, self.path)
                self._error = None  # (a later write that succeeds clears an earlier failure)
            except Exception as e:  # (raised by the next call, or by close)
                self._error = e

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()
        if self._error is not None:
            raise self._error

    def __enter__(self) -> "SnapshotWriter":
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        if kind is None:
            self.close()
            return
        try:  # an exception is on its way out: a failed last write must not replace it
            self.close()
        except Exception as e:
            logging.getLogger(__name__).warning("the last snapshot of %s was not written: %s", self.path, e)
