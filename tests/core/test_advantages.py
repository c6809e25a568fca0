import math

import pytest
import torch

from kevin.core import group_advantages
from kevin.core.advantages import leave_one_out_advantages


def test_hand_computed_group():
    # rewards 1, 2, 3: mean 2, unbiased std sqrt((1 + 0 + 1) / 2) = 1 -> advantages -1, 0, 1
    adv = group_advantages(torch.tensor([1.0, 2.0, 3.0]), [0, 0, 0], eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([-1.0, 0.0, 1.0]))


def test_std_is_unbiased_and_eps_is_added():
    # rewards 0, 4: mean 2, unbiased std sqrt((4 + 4) / 1) = 2.828427; eps 0.1 -> -2 / 2.928427 = -0.682960
    adv = group_advantages(torch.tensor([0.0, 4.0]), [7, 7], eps=0.1)
    torch.testing.assert_close(adv, torch.tensor([-0.682960, 0.682960]), rtol=0, atol=1e-5)


def test_groups_are_independent_and_labels_are_arbitrary():
    # group "x": rewards 1, 3 -> mean 2, std 1.41421 -> -0.70711, 0.70711 ; group "y": 10, 20 -> same pattern
    adv = group_advantages(torch.tensor([1.0, 10.0, 3.0, 20.0]), ["x", "y", "x", "y"], eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([-0.70711, -0.70711, 0.70711, 0.70711]), rtol=0, atol=1e-5)


def test_tensor_group_ids_equal_sequence_group_ids():
    r = torch.tensor([0.5, 1.5, 2.0, 0.0, 3.0])
    a = group_advantages(r, torch.tensor([3, 3, 9, 9, 9]))
    b = group_advantages(r, ["a", "a", "b", "b", "b"])
    torch.testing.assert_close(a, b)


def test_per_task_turn_grouping_is_one_argument_away():
    # (task, turn) labels split the task's 4 samples into two groups of 2:
    # turn 0: 0 and 2 -> -0.7071, 0.7071 ; turn 1: 1 and 5 -> -0.7071, 0.7071
    r = torch.tensor([0.0, 1.0, 2.0, 5.0])
    labels = [(0, 0), (0, 1), (0, 0), (0, 1)]
    torch.testing.assert_close(
        group_advantages(r, labels, eps=0.0), torch.tensor([-0.70711, -0.70711, 0.70711, 0.70711]), rtol=0, atol=1e-5
    )


def test_dr_grpo_does_not_divide_by_std():
    # mean of 1, 2, 6 is 3 -> advantages -2, -1, 3
    adv = group_advantages(torch.tensor([1.0, 2.0, 6.0]), [0, 0, 0], scale_by_std=False)
    torch.testing.assert_close(adv, torch.tensor([-2.0, -1.0, 3.0]))


def test_size_one_group_gives_zero_not_nan():
    adv = group_advantages(torch.tensor([5.0]), [0])
    assert adv.tolist() == [0.0]


def test_zero_variance_group_gives_exact_zero():
    # 0.1 three times: mean is 0.10000000000000002 in floating point, yet the advantage must be exactly 0
    adv = group_advantages(torch.tensor([0.1, 0.1, 0.1], dtype=torch.float64), [0, 0, 0])
    assert adv.tolist() == [0.0, 0.0, 0.0]
    assert not torch.isnan(adv).any()


def test_all_zero_rewards_give_zero_advantages():
    adv = group_advantages(torch.zeros(64), [0] * 64)
    assert torch.equal(adv, torch.zeros(64))


def test_inputs_are_not_mutated():
    r = torch.tensor([1.0, 2.0, 3.0])
    group_advantages(r, [0, 0, 0])
    assert r.tolist() == [1.0, 2.0, 3.0]


def test_mismatched_group_ids_raise():
    with pytest.raises(ValueError):
        group_advantages(torch.tensor([1.0, 2.0]), [0])


def test_normalised_group_has_zero_mean_and_unit_std():
    r = torch.tensor([0.0, 0.3, 1.36, 1.49, 0.8, 0.0, 2.5], dtype=torch.float64)
    adv = group_advantages(r, [0] * 7, eps=0.0)
    assert math.isclose(adv.mean().item(), 0.0, abs_tol=1e-12)
    assert math.isclose(adv.std().item(), 1.0, abs_tol=1e-12)


# --- leave-one-out (RLOO) ------------------------------------------------------------------------------------------


def test_leave_one_out_subtracts_the_mean_of_the_others():
    # [1, 3, 5]: 1 - (3 + 5)/2 = -3, 3 - (1 + 5)/2 = 0, 5 - (1 + 3)/2 = 3
    adv = leave_one_out_advantages(torch.tensor([1.0, 3.0, 5.0]), [0, 0, 0])
    assert adv.tolist() == [-3.0, 0.0, 3.0]


def test_leave_one_out_scaled_by_std_divides_by_the_groups_std():
    # [1, 3, 5]: unbiased std sqrt((4 + 0 + 4) / 2) = 2, so [-3, 0, 3] / 2
    adv = leave_one_out_advantages(torch.tensor([1.0, 3.0, 5.0]), [0, 0, 0], scale_by_std=True, eps=0.0)
    assert adv.tolist() == [-1.5, 0.0, 1.5]


def test_leave_one_out_gives_zero_to_single_and_equal_groups_never_nan():
    adv = leave_one_out_advantages(torch.tensor([2.0, 2.0, 7.0]), ["a", "a", "b"], scale_by_std=True)
    assert adv.tolist() == [0.0, 0.0, 0.0]
