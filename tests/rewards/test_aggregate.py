import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kevin.rewards import aggregate_rewards

scores_st = st.lists(st.floats(min_value=0.0, max_value=20.0, allow_nan=False), min_size=1, max_size=8)
gamma_st = st.floats(min_value=0.0, max_value=1.0)


def test_sum_worked_example_from_the_method_notes():
    # scores [0, 1.36, 0, 1.49], gamma 0.4:
    # R3 = 1.49; R2 = 0 + 0.4*1.49 = 0.596; R1 = 1.36 + 0.4*0.596 = 1.5984; R0 = 0.4*1.5984 = 0.63936
    assert aggregate_rewards([0.0, 1.36, 0.0, 1.49], gamma=0.4) == pytest.approx([0.63936, 1.5984, 0.596, 1.49])


def test_max_takes_the_best_discounted_later_score():
    # R0 = max(0, 0.5*2, 0.25*4) = 1.0 ; R1 = max(2, 0.5*4) = 2 ; R2 = 4
    assert aggregate_rewards([0.0, 2.0, 4.0], gamma=0.5, mode="max") == pytest.approx([1.0, 2.0, 4.0])


def test_tensor_batch_has_the_input_shape():
    scores = torch.zeros(2, 3, 4, dtype=torch.float64)
    assert aggregate_rewards(scores).shape == (2, 3, 4)


def test_unknown_mode_and_bad_gamma_raise():
    with pytest.raises(ValueError):
        aggregate_rewards([1.0], mode="mean")
    with pytest.raises(ValueError):
        aggregate_rewards([1.0], gamma=1.5)


def test_integer_tensor_is_rejected():
    with pytest.raises(TypeError):
        aggregate_rewards(torch.tensor([1, 2]))


@settings(max_examples=100, deadline=None)
@given(scores_st, st.sampled_from(["sum", "max"]))
def test_gamma_zero_gives_the_scores(scores, mode):
    assert aggregate_rewards(scores, gamma=0.0, mode=mode) == pytest.approx(scores)


@settings(max_examples=100, deadline=None)
@given(scores_st)
def test_sum_with_gamma_one_gives_suffix_sums(scores):
    expected = [sum(scores[t:]) for t in range(len(scores))]
    assert aggregate_rewards(scores, gamma=1.0, mode="sum") == pytest.approx(expected, abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(scores_st, gamma_st, st.sampled_from(["sum", "max"]))
def test_matches_the_closed_form(scores, gamma, mode):
    T = len(scores)
    terms = [[gamma ** (i - t) * scores[i] for i in range(t, T)] for t in range(T)]
    expected = [sum(x) if mode == "sum" else max(x) for x in terms]
    assert aggregate_rewards(scores, gamma=gamma, mode=mode) == pytest.approx(expected, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.integers(1, 6), gamma_st, st.sampled_from(["sum", "max"]), st.randoms())
def test_batched_equals_per_trajectory_exactly(n, T, gamma, mode, rnd):
    rows = [[rnd.uniform(0, 5) for _ in range(T)] for _ in range(n)]
    batched = aggregate_rewards(torch.tensor(rows, dtype=torch.float64), gamma=gamma, mode=mode)
    for i, row in enumerate(rows):
        assert batched[i].tolist() == aggregate_rewards(row, gamma=gamma, mode=mode)


@settings(max_examples=100, deadline=None)
@given(scores_st, gamma_st)
def test_max_is_never_below_any_discounted_later_score(scores, gamma):
    returns = aggregate_rewards(scores, gamma=gamma, mode="max")
    for t in range(len(scores)):
        for i in range(t, len(scores)):
            assert returns[t] >= gamma ** (i - t) * scores[i] - 1e-12
