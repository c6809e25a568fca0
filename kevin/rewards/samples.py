"""The reward path of a rollout, from the sandbox's verdicts to training samples (docs/method.md, "One training step").

`rewarded_samples` is the one function the recipes call between the rollout and the loss: every turn's kernel score
from its verdict (`turn_scores`, `kernel_score`), every turn's return from its own and the later scores
(`aggregate_rewards`), advantages normalised within each group (`group_labels`, `group_advantages`), and one
`Sample` per turn (`split_trajectories`). With one turn per trajectory it is single-turn GRPO: a sample's return is
its own score, and the group of a task is its G samples.

>>> from kevin.core.types import Trajectory, Turn
>>> from kevin.sandbox.result import EvalResult
>>> def turn(speedup=None):  # a correct kernel at ``speedup`` (baseline 1 ms), or an incorrect one
...     result = EvalResult("correct", "", runtime_ms=1 / speedup, baseline_ms=1.0) if speedup else EvalResult("incorrect", "")
...     return Turn((1,), (2,), "", result)
>>> out = rewarded_samples([Trajectory("t", 0, 0, (turn(), turn(1.0))), Trajectory("t", 0, 1, (turn(), turn()))])
>>> [round(s, 4) for s in out.scores.flatten().tolist()], [round(r, 4) for r in out.returns.flatten().tolist()]
([0.0, 1.3, 0.0, 0.0], [0.52, 1.3, 0.0, 0.0])
>>> [(s.trajectory_index, s.turn_index, round(s.advantage, 3)) for s in out.samples]
[(0, 0, 0.106), (0, 1, 1.375), (1, 0, -0.741), (1, 1, -0.741)]

(Scores S = 0.3 * correct + speedup * correct: [0, 1.3] and [0, 0]. Returns with gamma 0.4: [0 + 0.4 * 1.3, 1.3] and
[0, 0]. One group of the task's 4 samples: mean 0.455, unbiased std
sqrt((0.065^2 + 0.845^2 + 2 * 0.455^2) / 3) = 0.6144, so (0.52 - 0.455) / 0.6144 = 0.106.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from kevin.core.advantages import group_advantages, leave_one_out_advantages
from kevin.core.split import group_labels, split_trajectories
from kevin.core.types import Sample, Trajectory
from kevin.rewards.aggregate import aggregate_rewards
from kevin.rewards.rescore import turn_scores


BASELINES = ("task", "task_turn", "loo", "final_broadcast")
"""What each sample's advantage is measured against (``baseline`` of `rewarded_samples`):

- ``task`` (the paper): one group per task over all its G*T turn samples, ``A = (R - mean) / std``;
- ``task_turn``: one group per (task, turn index), the same formula;
- ``loo``: leave-one-out (RLOO) within the task's group, ``A_i = R_i - mean of the others`` (``scale_by_std``
  divides by the group's std);
- ``final_broadcast``: one advantage per trajectory, its final turn's return normalised over the task's G
  trajectories, copied to every turn (trajectory-level credit, as SkyRL's and verl's multi-turn modes assign it).
"""


@dataclass(frozen=True)
class RewardedRollout:
    """What `rewarded_samples` computed: ``scores`` and ``returns`` ``[B*G, T]`` (float32, trajectory-major), the
    ``advantages`` ``[N]`` and the N ``samples`` (turn ``t`` of trajectory ``j`` is sample ``j * T + t``)."""

    scores: Tensor
    returns: Tensor
    advantages: Tensor
    samples: list[Sample]


def rewarded_samples(
    trajectories: Sequence[Trajectory],
    *,
    correctness_weight: float = 0.3,
    speedup_cap: float | None = None,
    gamma: float = 0.4,
    mode: str = "sum",
    baseline: str = "task",
    scale_by_std: bool | None = None,
) -> RewardedRollout:
    """Score, return, advantage and split every turn of a rollout of B*G trajectories of T turns each.

    Args:
        trajectories: B*G trajectories, every one of the same number T of turns (``rollout`` runs all T).
        correctness_weight, speedup_cap: of the kernel score ``S = w * correct + min(speedup, cap) * correct``.
        gamma, mode: of the returns, ``R_t = sum_{i>=t} gamma^(i-t) S_i`` ("sum") or ``max`` ("max").
        baseline: one of `BASELINES` ("task", the paper: one advantage group per task over its G*T samples).
        scale_by_std: divide by the group's std (GRPO) or not (Dr. GRPO); None: the baseline's own choice (yes,
            except for "loo").
    """
    lengths = {len(traj.turns) for traj in trajectories}
    if len(lengths) > 1:
        raise ValueError(f"every trajectory needs the same number of turns, got {sorted(lengths)}")
    scores = torch.tensor(turn_scores(trajectories, correctness_weight=correctness_weight, speedup_cap=speedup_cap),
                          dtype=torch.float32).reshape(len(trajectories), -1)  # [B*G, T]
    returns = aggregate_rewards(scores, gamma=gamma, mode=mode)  # [B*G, T]
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")
    if scale_by_std is None:
        scale_by_std = baseline != "loo"
    if baseline == "final_broadcast":
        final = group_advantages(returns[:, -1], [traj.task_index for traj in trajectories],
                                 scale_by_std=scale_by_std)  # [B*G]
        advantages = final[:, None].expand_as(returns).flatten()  # [N]
    else:
        advantage = leave_one_out_advantages if baseline == "loo" else group_advantages
        advantages = advantage(returns.flatten(), group_labels(trajectories, per_turn=baseline == "task_turn"),
                               scale_by_std=scale_by_std)  # [N]
    return RewardedRollout(scores, returns, advantages, split_trajectories(trajectories, returns.flatten(), advantages))
