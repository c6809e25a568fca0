"""``BatchSampler``: batches of tasks that mix difficulty levels, resumable exactly.

The paper found that training on easy tasks only made the reward plateau early, and that each batch
should mix easy and hard tasks; it does not say how (docs/method.md, "What the paper leaves open, and
kevin's answers"). Here:

- tasks are grouped by ``level`` (``None`` is a level of its own);
- each batch gives every level a quota proportional to its share of the tasks, with at least one
  slot per level whenever ``batch_size`` >= the number of levels; the rounding remainders are carried
  from batch to batch (largest accumulated remainder wins a slot), so the long-run proportions are
  exact unless the one-slot floor over-serves a small level;
- within a level, tasks are drawn without replacement in epochs, each epoch a fresh permutation
  drawn from ``random.Random(f"{seed}/{level}/{epoch}")``; a level whose quota exceeds its size
  repeats tasks inside a batch (unavoidable);
- the batch is shuffled with ``random.Random(f"{seed}/batch/{index}")``.

All randomness is a pure function of (seed, level, epoch, batch index), so ``state_dict`` is a few
counters and a resumed sampler gives exactly the batches the original would have given.

>>> from kevin.data.task import Task
>>> tasks = [Task(f"t{i}", "", level=1 + i % 2) for i in range(6)]
>>> sampler = BatchSampler(tasks, batch_size=2, seed=0)
>>> sorted(t.level for t in sampler.next_batch())
[1, 2]
"""

from __future__ import annotations

import random
from typing import Any, Iterator, Mapping, Sequence

from kevin.data.task import Task


def _level_key(level: int | None) -> str:
    return "none" if level is None else str(level)


class BatchSampler:
    """Endless stratified batches of ``batch_size`` tasks (see the module docstring).

    Args:
        tasks: the pool (non-empty); the order of ``tasks`` matters for reproducibility.
        batch_size: tasks per batch (>= 1).
        seed: all shuffles derive from it.
    """

    def __init__(self, tasks: Sequence[Task], batch_size: int, *, seed: int = 0) -> None:
        if not tasks:
            raise ValueError("BatchSampler needs at least one task")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.tasks = list(tasks)
        self.batch_size = batch_size
        self.seed = seed
        by_level: dict[str, list[int]] = {}
        for i, t in enumerate(self.tasks):
            by_level.setdefault(_level_key(t.level), []).append(i)
        # numeric levels in order, then "none"
        self._levels = sorted(by_level, key=lambda k: (k == "none", int(k) if k != "none" else 0))
        self._members = by_level
        self._share = {k: len(v) / len(self.tasks) for k, v in by_level.items()}
        self._batches = 0
        self._epoch = {k: 0 for k in self._levels}
        self._pos = {k: 0 for k in self._levels}
        self._credit = {k: 0.0 for k in self._levels}

    # -- quotas --
    def _quotas(self) -> dict[str, int]:
        """Slots per level for the next batch; updates the carried remainders."""
        want = {k: self._credit[k] + self.batch_size * self._share[k] for k in self._levels}
        given = {k: 0 for k in self._levels}
        slots = self.batch_size
        if self.batch_size >= len(self._levels):
            for k in self._levels:
                given[k], slots = 1, slots - 1
        for _ in range(slots):  # each slot to the level furthest below its running target
            k = max(self._levels, key=lambda k: (want[k] - given[k], -self._levels.index(k)))
            given[k] += 1
        # a level given more than its share (the one-slot floor) owes at most one slot later
        self._credit = {k: max(want[k] - given[k], -1.0) for k in self._levels}
        return given

    def _permutation(self, level: str, epoch: int) -> list[int]:
        order = list(self._members[level])
        random.Random(f"{self.seed}/{level}/{epoch}").shuffle(order)
        return order

    def _draw(self, level: str, count: int) -> list[int]:
        out = []
        while len(out) < count:
            order = self._permutation(level, self._epoch[level])
            take = min(count - len(out), len(order) - self._pos[level])
            out += order[self._pos[level] : self._pos[level] + take]
            self._pos[level] += take
            if self._pos[level] == len(order):
                self._epoch[level], self._pos[level] = self._epoch[level] + 1, 0
        return out

    # -- the public interface --
    def next_batch(self) -> list[Task]:
        """The next ``batch_size`` tasks."""
        picked: list[int] = []
        for level, count in self._quotas().items():
            picked += self._draw(level, count)
        random.Random(f"{self.seed}/batch/{self._batches}").shuffle(picked)
        self._batches += 1
        return [self.tasks[i] for i in picked]

    def __iter__(self) -> Iterator[list[Task]]:
        """Endless: ``for batch in itertools.islice(sampler, steps)``."""
        while True:
            yield self.next_batch()

    @property
    def batches_drawn(self) -> int:
        return self._batches

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state; ``load_state_dict`` on a sampler over the same tasks resumes it."""
        return {
            "seed": self.seed,
            "batch_size": self.batch_size,
            "task_ids": [t.task_id for t in self.tasks],
            "batches": self._batches,
            "epoch": dict(self._epoch),
            "pos": dict(self._pos),
            "credit": dict(self._credit),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``state``; ValueError when it belongs to other tasks, another batch size or seed."""
        if list(state["task_ids"]) != [t.task_id for t in self.tasks]:
            raise ValueError("BatchSampler state was saved for a different task list")
        if state["batch_size"] != self.batch_size or state["seed"] != self.seed:
            raise ValueError(
                f"BatchSampler state has batch_size={state['batch_size']}, seed={state['seed']}; "
                f"this sampler has batch_size={self.batch_size}, seed={self.seed}"
            )
        self._batches = int(state["batches"])
        self._epoch = {k: int(v) for k, v in state["epoch"].items()}
        self._pos = {k: int(v) for k, v in state["pos"].items()}
        self._credit = {k: float(v) for k, v in state["credit"].items()}


__all__ = ["BatchSampler"]
