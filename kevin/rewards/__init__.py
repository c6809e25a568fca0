"""Reward math: the per-kernel score and the per-turn returns. Imports only torch and the standard library.

>>> from kevin.rewards import kernel_score, aggregate_rewards
>>> aggregate_rewards([kernel_score(False, None), kernel_score(True, 1.0)], gamma=0.4)
[0.52, 1.3]
"""

from kevin.rewards.aggregate import aggregate_rewards
from kevin.rewards.score import kernel_score

__all__ = ["aggregate_rewards", "kernel_score"]
