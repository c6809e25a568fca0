"""Every turn becomes one training sample (Kevin, arXiv 2507.11948, section 4.2)."""

from __future__ import annotations

from typing import Hashable, Sequence

from torch import Tensor

from kevin.core.types import Sample, Trajectory


def _flat(values: Tensor | Sequence[float], n: int, name: str) -> list[float]:
    if isinstance(values, Tensor):
        assert values.ndim == 1, (name, values.shape)
        values = values.tolist()
    values = [float(v) for v in values]
    if len(values) != n:
        raise ValueError(f"{name}: got {len(values)} values for {n} turns")
    return values


def split_trajectories(
    trajectories: Sequence[Trajectory],
    returns: Tensor | Sequence[float],
    advantages: Tensor | Sequence[float],
) -> list[Sample]:
    """One ``Sample`` per turn, in trajectory-major turn order.

    Sample ``k`` is turn ``t`` of trajectory ``j`` where ``k`` enumerates
    ``[(j, t) for j in trajectories for t in j.turns]``; ``returns[k]`` and ``advantages[k]`` are its
    return and advantage. The prompt (task, instructions, earlier kernels, summaries and sandbox feedback)
    is carried as ``prompt_ids`` and never trained on; ``loss_mask`` is 1 on every response token, which
    are exactly the tokens the policy sampled. Nothing is re-tokenized.

    Args:
        trajectories: the rollout, N = total number of turns.
        returns: ``[N]`` per-turn returns (from ``aggregate_rewards``).
        advantages: ``[N]`` per-turn advantages (from ``group_advantages``).

    Returns:
        ``list[Sample]`` of length N.
    """
    n = sum(len(traj.turns) for traj in trajectories)
    rets = _flat(returns, n, "returns")
    advs = _flat(advantages, n, "advantages")
    samples = []
    k = 0
    for traj in trajectories:
        for turn_index, turn in enumerate(traj.turns):
            samples.append(
                Sample(
                    prompt_ids=tuple(turn.prompt_ids),
                    response_ids=tuple(turn.response_ids),
                    loss_mask=(1,) * len(turn.response_ids),
                    ret=rets[k],
                    advantage=advs[k],
                    task_id=traj.task_id,
                    task_index=traj.task_index,
                    trajectory_index=traj.trajectory_index,
                    turn_index=turn_index,
                    old_logprobs=turn.response_logprobs,
                )
            )
            k += 1
    return samples


def group_labels(trajectories: Sequence[Trajectory], *, per_turn: bool = False) -> list[Hashable]:
    """The advantage group of every turn, in the order of ``split_trajectories``.

    ``per_turn=False`` (the paper): all G*T turns of a task form one group, labelled by task index.
    ``per_turn=True``: one group per (task index, turn index).

    >>> from kevin.core.types import Trajectory
    >>> trajs = [Trajectory("t", 0, 0, turns=(None, None)), Trajectory("t", 0, 1, turns=(None, None))]
    >>> group_labels(trajs), group_labels(trajs, per_turn=True)
    ([0, 0, 0, 0], [(0, 0), (0, 1), (0, 0), (0, 1)])
    """
    if per_turn:
        return [(traj.task_index, t) for traj in trajectories for t in range(len(traj.turns))]
    return [traj.task_index for traj in trajectories for _ in traj.turns]
