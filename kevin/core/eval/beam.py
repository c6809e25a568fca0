"""Beam search at test time (the Kevin blog): refine the trajectories that are doing best.

Each task runs G trajectories. After every ``every`` turns, each task keeps its ``keep`` best trajectories
(score: the best kernel score of their turns so far) and each survivor continues in G / keep slots; the
others' histories are dropped. Repeated until the last turn. ``kevin.core.rollout.rollout(...,
resample=beam_resampler(G, keep, every))`` runs it; copies are marked ``Turn.replica`` and dropped turns kept
in ``Trajectory.pruned``, so a beam rollout of G x n judges and counts G * n kernels per task, as the
independent G x n does (docs/method.md, "Beam search at test time").

>>> beam_parents([0.1, 0.9, 0.5, 0.2], keep=2)  # survivors 1 and 2, each in 4 / 2 = 2 slots
[1, 1, 2, 2]
"""

from __future__ import annotations

from typing import Callable, Sequence

from kevin.core.types import Turn
from kevin.rewards.score import kernel_score


def turn_score(turn: Turn) -> float:
    """The paper's score of the turn's kernel: ``0.3 * correct + speedup * correct`` (``kernel_score``)."""
    return kernel_score(turn.result.correct, turn.result.speedup)


def trajectory_score(turns: Sequence[Turn], score: Callable[[Turn], float] = turn_score) -> float:
    """The best ``score`` of ``turns`` (0.0 for none): what a trajectory has achieved so far.

    Example: an incorrect kernel (0) then a correct one at 1.5x (0.3 + 1.5) scores 1.8.
    """
    return max((score(t) for t in turns), default=0.0)


def beam_parents(scores: Sequence[float], keep: int) -> list[int]:
    """For one task's G trajectory scores, the slot each of the G slots continues: [G] parent indices.

    The ``keep`` best slots survive (ties go to the lower index), each in G / keep slots. A survivor
    keeps its own slot (its history is not copied); the freed slots, in order, go to the survivors in
    order. G must be a multiple of ``keep``, else ValueError.

    Example: scores [0.1, 0.9, 0.5, 0.2], keep 2: survivors 1 and 2 keep their slots; the free slots 0 and 3
    go to 1 and 2 -> [1, 1, 2, 2].
    """
    g = len(scores)
    if keep < 1 or g % keep:
        raise ValueError(f"beam search keeps {keep} of {g} trajectories: {g} must be a multiple of keep >= 1")
    survivors = sorted(sorted(range(g), key=lambda i: -scores[i])[:keep])  # sorted() is stable
    free = iter(sorted(set(range(g)) - set(survivors)))
    parents = list(range(g))
    for s in survivors:
        for _ in range(g // keep - 1):
            parents[next(free)] = s
    return parents


def beam_resampler(
    n_trajectories: int, keep: int, every: int, *, score: Callable[[Turn], float] = turn_score
) -> Callable[[int, Sequence[Sequence[Turn]]], list[int] | None]:
    """The ``resample`` of ``rollout`` for beam search over G = ``n_trajectories`` trajectories per task.

    After turn t (0-based) with (t + 1) % every == 0 it returns the [B*G] parents (task-major): per task,
    :func:`beam_parents` of the trajectories' :func:`trajectory_score` (``score`` per turn), offset by
    b * G; after any other turn None (no change). ``rollout`` never calls it after the last turn.

    Example: G 4, keep 2, every 2: after turns t = 1, 3, 5, ... (the 2nd, 4th, 6th).
    """
    if keep < 1 or every < 1 or n_trajectories % keep:
        raise ValueError(f"beam search needs keep >= 1 dividing n_trajectories and every >= 1, got "
                         f"keep={keep}, n_trajectories={n_trajectories}, every={every}")

    def resample(t: int, histories: Sequence[Sequence[Turn]]) -> list[int] | None:
        if (t + 1) % every:
            return None
        if len(histories) % n_trajectories:
            raise ValueError(f"{len(histories)} histories are not whole tasks of {n_trajectories} trajectories")
        parents: list[int] = []
        for start in range(0, len(histories), n_trajectories):
            scores = [trajectory_score(h, score) for h in histories[start:start + n_trajectories]]
            parents += [start + p for p in beam_parents(scores, keep)]
        return parents

    return resample
