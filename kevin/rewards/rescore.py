"""Scores and returns of saved rollouts, from their stored verdicts alone: re-score with other weights, another
gamma or another mode without running a single kernel again.
"""

from __future__ import annotations

from typing import Sequence

from kevin.core.types import Trajectory
from kevin.rewards.aggregate import aggregate_rewards
from kevin.rewards.score import kernel_score


def turn_scores(
    trajectories: Sequence[Trajectory], *, correctness_weight: float = 0.3, speedup_cap: float | None = None
) -> list[list[float]]:
    """Per-turn kernel scores ``S = w * correct + speedup * correct`` (``kevin.rewards.kernel_score``), [B*G][T]."""
    return [
        [
            kernel_score(
                turn.result.correct,
                turn.result.speedup,
                correctness_weight=correctness_weight,
                speedup_cap=speedup_cap,
            )
            for turn in traj.turns
        ]
        for traj in trajectories
    ]


def rescore(
    trajectories: Sequence[Trajectory],
    *,
    correctness_weight: float = 0.3,
    speedup_cap: float | None = None,
    gamma: float = 0.4,
    mode: str = "sum",
) -> list[list[float]]:
    """Per-turn returns of every trajectory, [B*G][T], from the stored verdicts alone.

    ``R_t = sum_{i>=t} gamma^(i-t) S_i`` (mode "sum") or ``max_{i>=t} gamma^(i-t) S_i`` (mode "max"), with
    ``S_i`` from :func:`turn_scores`. Example, scores [0, 1.3], gamma 0.4, sum: [0 + 0.4 * 1.3, 1.3] =
    [0.52, 1.3]. Flatten in trajectory-major turn order (``[r for traj in out for r in traj]``) for
    ``split_trajectories``.
    """
    scores = turn_scores(trajectories, correctness_weight=correctness_weight, speedup_cap=speedup_cap)
    return [list(aggregate_rewards(s, gamma=gamma, mode=mode)) if s else [] for s in scores]
