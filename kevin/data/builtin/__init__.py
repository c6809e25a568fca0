"""The built-in suite: our own KernelBench-format tasks, level 1 (single operators) and level 2 (fused).

``builtin_tasks()`` returns all of it; ``level``, ``split`` and ``names`` filter. The split mirrors the
paper's (docs/method.md, "Tasks"): most tasks train, a held-out evaluation set (about a fifth) shares
no operator sequence with the training tasks, so an evaluation measures generalisation to operators
and fusions never trained on. Each task stores its operator sequence in ``metadata["ops"]`` and its
split in ``metadata["split"]``; ids are "kevin-L<level>-<name>".

The tasks are files in this package, read by ``kevin.data.load_tasks`` like a KernelBench checkout:
``level1/<n>_<name>.py`` and ``level2/<n>_<name>.py`` hold the programs at their GPU sizes (eager
PyTorch on an H200 above 0.1 ms), and ``manifest.json`` gives each file its id, CPU sizes, operator
sequence and split.

- Level 1 was written for kevin (not copied from KernelBench). Inputs are chosen so that trivial
  answers fail (the fabricated outputs of docs/threat-model.md, "How each attack is stopped"):
  signed, shifted or scaled distributions for ops that are the identity on non-negative inputs,
  normalisation inputs that are not already normalised, softmax rows short or peaked enough that
  entries are not tiny, and for the losses (scalar outputs) a fresh random scale per call with
  heavy-tailed rows, so no constant or closed-form expectation matches every call.
- Level 2 is one main op plus 2 to 5 others from the paper's Appendix A vocabulary. The sequences
  were picked by hand to cover every main op and every vocabulary entry while keeping the output
  informative (no softmax over long rows, no normalisation followed by a mean over what it
  normalised, no saturating clamp before a reduction). Each file is what the program writer renders
  for its sequence with every menu's default; to re-render one (after a change to the writer), write
  ``kevin.data.writer.render_task(ops).source`` to the file and its ``sizes`` to the manifest entry.

``tests/data/test_builtin.py`` checks that every task runs with an informative output and passes the
sandbox's calibration, and that the level-2 files are still the writer's rendering.

>>> len(builtin_tasks(level=1)) >= 40 and len(builtin_tasks(level=2)) >= 40
True
>>> {t.metadata["split"] for t in builtin_tasks(split="eval")}
{'eval'}
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Iterable

from kevin.data.loaders import load_tasks
from kevin.data.task import Task

SPLITS = ("train", "eval")
ROOT = Path(__file__).resolve().parent


@lru_cache(maxsize=1)
def _all_tasks() -> tuple[Task, ...]:
    return tuple(load_tasks(ROOT))


def builtin_tasks(
    *, level: int | Iterable[int] | None = None, split: str | None = None, names: Iterable[str] | None = None
) -> list[Task]:
    """The built-in tasks, optionally filtered.

    Args:
        level: 1, 2, or several levels.
        split: "train" or "eval".
        names: task names (``"ReLU"``, ``"Conv2d_ReLU_BiasAdd"``) or ids (``"kevin-L1-ReLU"``);
            an unknown one raises ValueError.
    """
    tasks = list(_all_tasks())
    if level is not None:
        levels = {level} if isinstance(level, int) else set(level)
        tasks = [t for t in tasks if t.level in levels]
    if split is not None:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        tasks = [t for t in tasks if t.metadata["split"] == split]
    if names is not None:
        wanted = set([names] if isinstance(names, str) else names)
        known = {t.name for t in _all_tasks()} | {t.task_id for t in _all_tasks()}
        unknown = wanted - known
        if unknown:
            raise ValueError(f"unknown built-in task names: {sorted(unknown)}")
        tasks = [t for t in tasks if t.name in wanted or t.task_id in wanted]
    return tasks


def tasks_from_spec(spec: str) -> list[Task]:
    """The tasks a recipe's ``--tasks`` names: "builtin" (the train split), "builtin:<name>,<name>,..." (those
    built-in tasks, in the order given), or anything `load_tasks` reads (a JSONL file, a dataset, a KernelBench
    folder, a hub id).

    Raises:
        ValueError: an unknown built-in name, an empty list of names, or what `load_tasks` raises.
    """
    if spec == "builtin":
        return builtin_tasks(split="train")
    if spec.startswith("builtin:"):
        names = [n.strip() for n in spec[len("builtin:"):].split(",") if n.strip()]
        if not names:
            raise ValueError(f"--tasks {spec!r}: no task names after 'builtin:'")
        by_name = {n: t for t in builtin_tasks(names=names) for n in (t.name, t.task_id)}
        return [by_name[n] for n in dict.fromkeys(names)]
    return load_tasks(spec)


__all__ = ["ROOT", "SPLITS", "builtin_tasks", "tasks_from_spec"]
