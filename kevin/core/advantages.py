"""Advantages: each sample's return against a baseline from its group.

`group_advantages` is the paper's (GRPO, Kevin arXiv 2507.11948 Eq. 1): the group's mean, scaled by its std;
`leave_one_out_advantages` is RLOO's: the mean of the group's other samples. Which samples form a group is the
caller's choice (`kevin.core.split.group_labels`; `kevin.rewards.samples.BASELINES` names the combinations).
"""

from __future__ import annotations

from typing import Hashable, Sequence

import torch
from torch import Tensor


def group_advantages(
    rewards: Tensor,
    group_ids: Tensor | Sequence[Hashable],
    *,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """``A_i = (R_i - mean_g) / (std_g + eps)`` over the samples ``i`` of each group ``g``.

    ``std_g`` is the unbiased (n - 1) standard deviation, as in verl and TRL. ``scale_by_std=False``
    gives Dr. GRPO's mean-only advantage ``A_i = R_i - mean_g``. A group of one sample, or a group whose
    rewards are all equal, gets advantage exactly 0 (never NaN): it carries no learning signal.

    Groups are arbitrary labels. The paper pools all T turns of all G trajectories of a task into one
    group of G*T samples: pass the task index of every sample. Grouping per (task, turn index) is one
    argument away: pass ``(task_index, turn_index)`` tuples (see ``kevin.core.split.group_labels``).

    Args:
        rewards: ``[N]`` float returns, one per sample.
        group_ids: ``[N]`` integer tensor, or a length-N sequence of hashable labels.
        scale_by_std: divide by the group's std (GRPO) or not (Dr. GRPO).
        eps: added to the std.

    Returns:
        ``[N]`` advantages, same dtype as ``rewards``.

    >>> group_advantages(torch.tensor([1.0, 3.0, 5.0, 7.0]), ["a", "a", "b", "c"])
    tensor([-0.7071,  0.7071,  0.0000,  0.0000])

    (Group a: mean 2, unbiased std sqrt(((1-2)^2 + (3-2)^2) / 1) = 1.4142, so -1/1.4142 = -0.7071;
    groups b and c have one sample each, so 0.)
    """
    index, count, centred, std, informative = _group_stats(rewards, group_ids)
    adv = centred / (std[index] + eps) if scale_by_std else centred
    return torch.where(informative[index], adv, torch.zeros_like(adv))


def _group_stats(rewards: Tensor, group_ids: Tensor | Sequence[Hashable]) -> tuple[Tensor, ...]:
    """(index ``[N]``, count ``[G]``, ``R_i - mean_g`` ``[N]``, unbiased std ``[G]``, informative ``[G]``): a group
    is informative when it has at least 2 samples that are not all equal."""
    assert rewards.ndim == 1, rewards.shape
    if not rewards.is_floating_point():
        raise TypeError(f"rewards must be a floating tensor, got {rewards.dtype}")
    n = rewards.shape[0]
    if isinstance(group_ids, Tensor):
        assert group_ids.shape == (n,), (group_ids.shape, n)
        _, index = torch.unique(group_ids, return_inverse=True)
    else:
        if len(group_ids) != n:
            raise ValueError(f"got {len(group_ids)} group ids for {n} rewards")
        codes: dict[Hashable, int] = {}
        index = torch.tensor([codes.setdefault(g, len(codes)) for g in group_ids], dtype=torch.long)
    index = index.to(rewards.device)
    n_groups = int(index.max().item()) + 1 if n else 0

    zeros = torch.zeros(n_groups, dtype=rewards.dtype, device=rewards.device)
    count = zeros.index_add(0, index, torch.ones_like(rewards))  # [G]
    mean = zeros.index_add(0, index, rewards) / count  # [G]
    centred = rewards - mean[index]  # [N]
    sq = zeros.index_add(0, index, centred * centred)  # [G]
    std = (sq / (count - 1).clamp(min=1)).sqrt()  # [G], unbiased
    g_max = torch.full_like(zeros, -float("inf")).scatter_reduce(0, index, rewards, reduce="amax")
    g_min = torch.full_like(zeros, float("inf")).scatter_reduce(0, index, rewards, reduce="amin")
    return index, count, centred, std, (count > 1) & (g_max > g_min)


def leave_one_out_advantages(
    rewards: Tensor,
    group_ids: Tensor | Sequence[Hashable],
    *,
    scale_by_std: bool = False,
    eps: float = 1e-6,
) -> Tensor:
    """``A_i = R_i - mean_{j in g, j != i} R_j = n_g / (n_g - 1) * (R_i - mean_g)`` (RLOO; TRLOO per turn group).

    Each sample's baseline is the mean of the other samples of its group, so it does not depend on the sample's
    own return. ``scale_by_std=True`` also divides by the group's unbiased std. A group of one sample, or of equal
    returns, gets exactly 0 (never NaN). Shapes as `group_advantages`: ``rewards`` ``[N]`` -> ``[N]``.

    >>> leave_one_out_advantages(torch.tensor([1.0, 3.0, 5.0, 7.0]), ["a", "a", "a", "b"])
    tensor([-3.,  0.,  3.,  0.])

    (Group a: 1 - mean(3, 5) = -3, 3 - mean(1, 5) = 0, 5 - mean(1, 3) = 3; group b has one sample, so 0.)
    """
    index, count, centred, std, informative = _group_stats(rewards, group_ids)
    adv = centred * count[index] / (count[index] - 1).clamp(min=1)  # R_i - (n mean_g - R_i) / (n - 1)
    if scale_by_std:
        adv = adv / (std[index] + eps)
    return torch.where(informative[index], adv, torch.zeros_like(adv))
