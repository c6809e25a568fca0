"""kevin.rewards.samples: the advantage baselines of `rewarded_samples`, on one task of 2 trajectories x 2 turns."""

import pytest

from kevin.core.types import Trajectory, Turn
from kevin.rewards.samples import rewarded_samples
from kevin.sandbox.result import EvalResult


def _turn(speedup=None):
    """A correct kernel at ``speedup`` (baseline 1 ms) or an incorrect one."""
    result = EvalResult("correct", "", runtime_ms=1 / speedup, baseline_ms=1.0) if speedup else EvalResult("incorrect", "")
    return Turn((1,), (2,), "", result)


# Scores S = 0.3 * correct + speedup * correct: trajectory 0 [0, 1.3], trajectory 1 [1.3, 0]. Returns with gamma 0.4:
# trajectory 0 [0.52, 1.3], trajectory 1 [1.3, 0].
ROLLOUT = [Trajectory("t", 0, 0, (_turn(), _turn(1.0))), Trajectory("t", 0, 1, (_turn(1.0), _turn()))]


def _advantages(**kwargs):
    return [round(s.advantage, 4) for s in rewarded_samples(ROLLOUT, **kwargs).samples]


def test_the_task_turn_baseline_normalises_each_turn_over_the_tasks_trajectories():
    # turn 0: returns [0.52, 1.3], mean 0.91, unbiased std 0.39 * sqrt(2) = 0.5515 -> -/+ 0.7071;
    # turn 1: returns [1.3, 0], mean 0.65, std 0.9192 -> +/- 0.7071
    assert _advantages(baseline="task_turn") == [-0.7071, 0.7071, 0.7071, -0.7071]


def test_the_leave_one_out_baseline_is_each_return_less_the_mean_of_the_others_unscaled():
    # one group of the task's 4 returns [0.52, 1.3, 1.3, 0]: 0.52 - (1.3 + 1.3 + 0)/3 = -0.3467,
    # 1.3 - (0.52 + 1.3 + 0)/3 = 0.6933, the same for the other 1.3, 0 - (0.52 + 1.3 + 1.3)/3 = -1.04
    assert _advantages(baseline="loo") == [-0.3467, 0.6933, 0.6933, -1.04]


def test_the_final_broadcast_baseline_gives_every_turn_its_trajectorys_final_advantage():
    # final returns [1.3, 0]: mean 0.65, std 0.9192 -> trajectory 0: 0.7071 on both turns, trajectory 1: -0.7071
    assert _advantages(baseline="final_broadcast") == [0.7071, 0.7071, -0.7071, -0.7071]


def test_an_unknown_baseline_is_a_value_error_naming_the_choices():
    with pytest.raises(ValueError, match="final_broadcast"):
        rewarded_samples(ROLLOUT, baseline="trajectory")
