"""The built-in suite: our own KernelBench-format tasks, level 1 (single operators) and level 2 (fused).

``builtin_tasks()`` returns all of it; ``level``, ``split`` and ``names`` filter. The split mirrors the
paper's (kevin-method.md section 2): most tasks train, a held-out evaluation set (about a fifth) shares
no operator sequence with the training tasks, so an evaluation measures generalisation to operators
and fusions never trained on. Each task stores its operator sequence in ``metadata["ops"]`` and its
split in ``metadata["split"]``; ids are "kevin-L<level>-<name>".

>>> len(builtin_tasks(level=1)) >= 40 and len(builtin_tasks(level=2)) >= 40
True
>>> {t.metadata["split"] for t in builtin_tasks(split="eval")}
{'eval'}
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable

from kevin.data.builtin.level1 import LEVEL1
from kevin.data.builtin.level2 import LEVEL2
from kevin.data.task import Task

SPLITS = ("train", "eval")


@lru_cache(maxsize=1)
def _all_tasks() -> tuple[Task, ...]:
    from kevin.data.synth import render_task

    tasks = []
    for name, ops, split, cpu, source in LEVEL1:
        meta = {"ops": ops, "split": split, "origin": "kevin-builtin"}
        tasks.append(Task(f"kevin-L1-{name}", source, level=1, name=name, sizes={"cpu": cpu}, metadata=meta))
    for ops, split in LEVEL2:
        name = "_".join(ops)
        meta = {"split": split, "origin": "kevin-builtin"}
        tasks.append(render_task(ops, task_id=f"kevin-L2-{name}", level=2, metadata=meta))
    return tuple(tasks)


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


__all__ = ["SPLITS", "builtin_tasks"]
