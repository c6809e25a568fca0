import pytest
import torch

from kevin.core import group_labels, split_trajectories
from kevin.core.types import Trajectory, Turn
from kevin.sandbox.result import EvalResult


def _turn(prompt, response, logprobs=None):
    return Turn(prompt_ids=prompt, response_ids=response, response_text="", result=EvalResult("format_error", "x"),
                response_logprobs=logprobs)


def _trajs():
    a = Trajectory("task-a", 0, 0, (_turn((1, 2), (3, 4, 5), (-0.1, -0.2, -0.3)), _turn((1, 2, 9), (6,))))
    b = Trajectory("task-a", 0, 1, (_turn((1, 2), (7,)), _turn((1, 2, 8), (8, 8))))
    return [a, b]


def test_every_turn_becomes_one_sample_in_trajectory_major_order():
    samples = split_trajectories(_trajs(), [0.1, 0.2, 0.3, 0.4], [1.0, 2.0, 3.0, 4.0])
    assert [(s.trajectory_index, s.turn_index) for s in samples] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [s.ret for s in samples] == [0.1, 0.2, 0.3, 0.4]
    assert [s.advantage for s in samples] == [1.0, 2.0, 3.0, 4.0]


def test_loss_mask_covers_exactly_the_sampled_tokens():
    samples = split_trajectories(_trajs(), torch.zeros(4), torch.zeros(4))
    for s in samples:
        assert len(s.loss_mask) == len(s.response_ids) and set(s.loss_mask) <= {1}
    # the prompt (which holds earlier kernels and sandbox feedback) is never in the trained response
    assert samples[1].prompt_ids == (1, 2, 9) and samples[1].response_ids == (6,)


def test_ids_are_kept_as_sampled_and_old_logprobs_are_carried():
    samples = split_trajectories(_trajs(), torch.zeros(4), torch.zeros(4))
    assert samples[0].response_ids == (3, 4, 5)
    assert samples[0].old_logprobs == (-0.1, -0.2, -0.3)
    assert samples[1].old_logprobs is None


def test_wrong_number_of_returns_raises():
    with pytest.raises(ValueError):
        split_trajectories(_trajs(), [0.0] * 3, [0.0] * 4)


def test_group_labels_pool_all_turns_of_a_task_or_split_by_turn():
    trajs = _trajs()
    assert group_labels(trajs) == [0, 0, 0, 0]
    assert group_labels(trajs, per_turn=True) == [(0, 0), (0, 1), (0, 0), (0, 1)]
