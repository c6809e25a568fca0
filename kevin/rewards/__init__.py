"""Reward math: the per-kernel score, the per-turn returns, and both recomputed for saved rollouts. Imports only torch and the standard library.

>>> from kevin.rewards import kernel_score, aggregate_rewards
>>> aggregate_rewards([kernel_score(False, None), kernel_score(True, 1.0)], gamma=0.4)
[0.52, 1.3]
"""

from kevin.rewards.aggregate import aggregate_rewards
from kevin.rewards.rescore import rescore, turn_scores
from kevin.rewards.score import kernel_score

__all__ = ["aggregate_rewards", "kernel_score", "rescore", "turn_scores"]
