import math

import pytest

from kevin.rewards import kernel_score


def test_correct_kernel_scores_weight_plus_speedup():
    # 0.3 * 1 + 1.06 * 1 = 1.36 (the worked example of docs/method.md, "Score")
    assert kernel_score(True, 1.06) == pytest.approx(1.36, abs=1e-12)


def test_correct_but_slow_kernel_still_scores_above_weight():
    # 0.3 + 0.5 = 0.8: a correct kernel at half the baseline speed
    assert kernel_score(True, 0.5) == pytest.approx(0.8, abs=1e-12)


def test_incorrect_kernel_scores_zero_whatever_its_speedup():
    assert kernel_score(False, 100.0) == 0.0
    assert kernel_score(False, None) == 0.0


def test_correct_kernel_without_timing_earns_correctness_part_only():
    assert kernel_score(True, None, correctness_weight=0.3) == pytest.approx(0.3)


def test_speedup_cap_clips_only_the_speedup_part():
    # 0.3 + min(9.61, 3.0) = 3.3
    assert kernel_score(True, 9.61, speedup_cap=3.0) == pytest.approx(3.3, abs=1e-12)
    # below the cap nothing changes: 0.3 + 1.5 = 1.8
    assert kernel_score(True, 1.5, speedup_cap=3.0) == pytest.approx(1.8, abs=1e-12)


def test_correctness_weight_is_a_keyword():
    # weight 1.0 (the paper's ablation): 1.0 + 2.0 = 3.0; weight 0: 2.0
    assert kernel_score(True, 2.0, correctness_weight=1.0) == pytest.approx(3.0)
    assert kernel_score(True, 2.0, correctness_weight=0.0) == pytest.approx(2.0)


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan])
def test_invalid_speedup_raises(bad):
    with pytest.raises(ValueError):
        kernel_score(True, bad)


def test_invalid_cap_and_weight_raise():
    with pytest.raises(ValueError):
        kernel_score(True, 1.0, speedup_cap=0.0)
    with pytest.raises(ValueError):
        kernel_score(True, 1.0, correctness_weight=-0.1)
