"""How a training step's work is dealt to the processes, for any number of them and any tasks per step.

The step's B*G trajectories (task-major) are dealt in contiguous blocks (`trajectory_share`): a process may run
several tasks, or part of one task's trajectories. Advantages need every trajectory of a task, so the rewards are
computed on the gathered rollout (`gather_trajectories`), and each process trains on its own trajectories' samples
(`own_samples`). The loss weights count the samples and tokens of every process (`minibatches_everywhere`), so that
the averaged gradient is the one of the whole batch however unevenly it is dealt; and every process runs as many
micro-batches as the busiest one (a padding micro-batch weighs 0), since under FSDP every forward and backward is a
collective that all processes must join.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from kevin.core.batch import Batch, collate, micro_batches, split_minibatches
from kevin.core.run.cli import ConfigError


def trajectory_share(n_tasks: int, n_trajectories: int, rank: int, world: int) -> list[tuple[int, int]]:
    """(task, trajectory) of every trajectory that process ``rank`` of ``world`` runs: the B*G trajectories of a step,
    task-major, in contiguous blocks of floor or ceil(B*G / world). Example: B=2, G=3 on 4 processes:
    [(0, 0)], [(0, 1), (0, 2)], [(1, 0)], [(1, 1), (1, 2)]. More processes than trajectories: a `ConfigError` (the
    recipe stops with its message)."""
    if world > n_tasks * n_trajectories:
        raise ConfigError(f"{world} processes for {n_tasks} x {n_trajectories} trajectories: some would have none "
                         "(raise --tasks_per_step or --n_trajectories)")
    total = n_tasks * n_trajectories
    return [divmod(i, n_trajectories) for i in range(rank * total // world, (rank + 1) * total // world)]


def share_tasks(tasks: Sequence[Any], share: Sequence[tuple[int, int]]) -> list[Any]:
    """The task of every trajectory of ``share``, in order: what `kevin.core.rollout.rollout` runs with
    ``n_trajectories=1``."""
    return [tasks[b] for b, _ in share]


def rollout_layout(share: Sequence[tuple[int, int]], sandbox: Any, stagger: int = 1) -> dict[str, int]:
    """The keywords of `kevin.core.rollout.rollout` for a share (with `share_tasks` as its tasks): one trajectory per
    listed task, and the pipelined groups its default would give the share's tasks with their own trajectory counts
    (one group per task with kevin's ``Sandbox``, `kevin.core.rollout.default_chunks`), not one per trajectory; the
    groups start in ``stagger`` waves, at most one per group (one wave, unstaggered, for a share the rollout runs in
    lockstep, such as a single trajectory's)."""
    from kevin.core.rollout import default_chunks

    n_tasks = len({b for b, _ in share})
    chunks = default_chunks(sandbox, n_tasks, max(1, len(share) // n_tasks))
    return {"n_trajectories": 1, "chunks": chunks, "stagger": min(stagger, chunks)}


def place(trajectories: Sequence[Any], share: Sequence[tuple[int, int]]) -> list[Any]:
    """The trajectories rolled out for ``share`` (one per listed task) relabelled with their place in the step:
    ``task_index`` b and ``trajectory_index`` g."""
    if len(trajectories) != len(share):
        raise ValueError(f"{len(trajectories)} trajectories for a share of {len(share)}")
    return [dataclasses.replace(t, task_index=b, trajectory_index=g) for t, (b, g) in zip(trajectories, share)]


def gather_trajectories(trajectories: list) -> list:
    """Every process's placed trajectories, task-major in the step's order (the same list on every process)."""
    from accelerate.utils import gather_object

    return sorted(gather_object(trajectories), key=lambda t: (t.task_index, t.trajectory_index))


def own_samples(samples: Sequence[Any], share: Sequence[tuple[int, int]]) -> list[Any]:
    """The samples (of the whole step's rewarded rollout) of this process's trajectories."""
    mine = set(share)
    return [s for s in samples if (s.task_index, s.trajectory_index) in mine]


@dataclass(frozen=True)
class MiniBatch:
    """One gradient step's share on this process: ``batch`` (its samples, padded), the ``micros`` to run (as many as
    on the busiest process), ``keep`` (1 for a real micro-batch, 0 for padding), and the samples and tokens of the
    whole mini-batch summed over the processes (the loss weights' denominators, `kevin.core.batch.loss_weight`)."""

    batch: Batch
    micros: list[Batch]
    keep: list[float]
    samples_everywhere: float
    tokens_everywhere: float


def minibatches_everywhere(acc: Any, samples: Sequence[Any], n: int, *, seed: int, pad_id: int,
                           micro_batch_size: int) -> list[MiniBatch]:
    """``n`` mini-batches of this process's ``samples`` (`kevin.core.batch.split_minibatches`, the same shuffle seed
    everywhere), each with as many micro-batches as the process that has the most. A process whose share of a
    mini-batch is empty runs its first sample as padding. One gather per mini-batch."""
    if not samples:
        raise ValueError("a process needs at least one sample")
    chunks = split_minibatches(samples, n, seed=seed)
    chunks += [[] for _ in range(n - len(chunks))]
    out = []
    for chunk in chunks:
        batch = collate(chunk or list(samples[:1]), pad_id).to(acc.device)
        micros = micro_batches(batch, micro_batch_size)
        real = float(bool(chunk))
        counts = torch.tensor([[len(micros), real * batch.size, real * float(batch.mask.sum())]], device=acc.device)
        counts = acc.gather(counts)  # [world, 3]
        busiest = int(counts[:, 0].max())
        keep = [real] * len(micros) + [0.0] * (busiest - len(micros))
        micros = micros + [micros[-1]] * (busiest - len(micros))
        out.append(MiniBatch(batch, micros, keep, float(counts[:, 1].sum()), float(counts[:, 2].sum())))
    return out
