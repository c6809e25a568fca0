"""Per-turn returns from per-turn scores (Kevin, arXiv 2507.11948, section 4.3)."""

from __future__ import annotations

from typing import Sequence, overload

import torch
from torch import Tensor

MODES = ("sum", "max")


@overload
def aggregate_rewards(scores: Tensor, *, gamma: float = ..., mode: str = ...) -> Tensor: ...
@overload
def aggregate_rewards(scores: Sequence[float], *, gamma: float = ..., mode: str = ...) -> list[float]: ...


def aggregate_rewards(scores, *, gamma: float = 0.4, mode: str = "sum"):
    """The return of every turn of a trajectory from the scores of that turn and the later ones.

    With ``s_i`` the score of turn ``i`` of a trajectory of ``T`` turns:

        sum:  R_t = sum_{i=t}^{T-1} gamma^(i-t) * s_i      (the paper's choice, gamma = 0.4)
        max:  R_t = max_{i=t}^{T-1} gamma^(i-t) * s_i

    Both are computed by the backward recursions ``R_t = s_t + gamma * R_{t+1}`` and
    ``R_t = max(s_t, gamma * R_{t+1})`` (valid for gamma >= 0), in the same order of operations for both
    input types, so a list and a float64 tensor give bit-identical numbers.

    Args:
        scores: one trajectory as a sequence of T floats, or a batch as a tensor ``[..., T]`` (any
            leading shape; floating dtype).
        gamma: discount in [0, 1]. ``gamma = 0`` gives each turn its own score ("greedy").
        mode: ``"sum"`` or ``"max"``.

    Returns:
        ``list[float]`` of length T for a sequence; a tensor ``[..., T]`` of the input dtype for a tensor.

    >>> aggregate_rewards([0.0, 1.36, 0.0, 1.49])  # the worked example of docs/method.md, "Returns across turns"
    [0.63936, 1.5984, 0.596, 1.49]

    (R_3 = 1.49; R_2 = 0 + 0.4 * 1.49 = 0.596; R_1 = 1.36 + 0.4 * 0.596 = 1.5984;
    R_0 = 0 + 0.4 * 1.5984 = 0.63936.)

    >>> aggregate_rewards(torch.tensor([[0.0, 1.0], [2.0, 0.0]]), gamma=0.5, mode="max")
    tensor([[0.5000, 1.0000],
            [2.0000, 0.0000]])
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")

    if isinstance(scores, Tensor):
        assert scores.ndim >= 1, scores.shape
        if not scores.is_floating_point():
            raise TypeError(f"scores must be a floating tensor, got {scores.dtype}")
        T = scores.shape[-1]
        out = torch.empty_like(scores)
        if T == 0:
            return out
        out[..., T - 1] = scores[..., T - 1]
        for t in range(T - 2, -1, -1):
            later = gamma * out[..., t + 1]
            out[..., t] = scores[..., t] + later if mode == "sum" else torch.maximum(scores[..., t], later)
        return out

    values = [float(s) for s in scores]
    returns = [0.0] * len(values)
    for t in range(len(values) - 1, -1, -1):
        if t == len(values) - 1:
            returns[t] = values[t]
            continue
        later = gamma * returns[t + 1]
        returns[t] = values[t] + later if mode == "sum" else max(values[t], later)
    return returns
