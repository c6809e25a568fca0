"""kevin.core.eval.beam: which trajectories beam search keeps, when, and by what score."""

import pytest

from kevin.core.eval.beam import beam_parents, beam_resampler, trajectory_score, turn_score
from kevin.core.types import Turn
from kevin.sandbox.result import EvalResult


def _turn(speedup=None, status="incorrect"):
    """A correct kernel at ``speedup`` (1 ms baseline) when given, else a kernel with ``status``."""
    if speedup is not None:
        return Turn((), (), "", EvalResult("correct", "ok", runtime_ms=1.0 / speedup, baseline_ms=1.0))
    return Turn((), (), "", EvalResult(status, status))


# --- beam_parents -------------------------------------------------------------------------------------


def test_the_keep_best_survive_each_in_g_over_keep_slots():
    # best two: slot 1 (0.9) and slot 2 (0.5); the free slots 0 and 3 go to 1 and 2 in order
    assert beam_parents([0.1, 0.9, 0.5, 0.2], keep=2) == [1, 1, 2, 2]


def test_a_survivor_keeps_its_own_slot():
    # best two: slot 3 (5) and slot 0 (4); free slots 1, 2, 4, 5 go to 0, 0, 3, 3 (3 copies each)
    parents = beam_parents([4.0, 1.0, 2.0, 5.0, 0.0, 3.0], keep=2)
    assert parents == [0, 0, 0, 3, 3, 3]
    assert parents[0] == 0 and parents[3] == 3


def test_ties_go_to_the_lower_index():
    # all equal: slots 0 and 1 survive; free slots 2 and 3 go to 0 and 1
    assert beam_parents([0.0, 0.0, 0.0, 0.0], keep=2) == [0, 1, 0, 1]


def test_keeping_one_gives_every_slot_the_best():
    assert beam_parents([0.3, 1.8, 0.0], keep=1) == [1, 1, 1]


def test_keeping_all_changes_nothing():
    assert beam_parents([0.3, 1.8, 0.0, 0.5], keep=4) == [0, 1, 2, 3]


@pytest.mark.parametrize("g, keep", [(4, 3), (2, 4), (4, 0)])
def test_g_must_be_a_multiple_of_keep(g, keep):
    with pytest.raises(ValueError, match="multiple of keep"):
        beam_parents([0.0] * g, keep=keep)


# --- scores -------------------------------------------------------------------------------------------


def test_a_turn_scores_the_papers_kernel_score():
    # 0.3 * correct + speedup * correct
    assert turn_score(_turn(1.5)) == pytest.approx(1.8)
    assert turn_score(_turn(status="compile_error")) == 0.0


def test_a_trajectory_scores_its_best_turn_so_far():
    # max(0, 0.3 + 1.5, 0.3 + 0.5) = 1.8; no turns: 0
    assert trajectory_score([_turn(), _turn(1.5), _turn(0.5)]) == pytest.approx(1.8)
    assert trajectory_score([]) == 0.0


# --- beam_resampler -----------------------------------------------------------------------------------


def test_the_resampler_acts_after_every_every_turns_only():
    resample = beam_resampler(2, keep=1, every=2)
    histories = [(_turn(),), (_turn(2.0),)]
    # (t + 1) % 2 == 0 for t = 1 and 3 only
    assert [resample(t, histories) for t in range(4)] == [None, [1, 1], None, [1, 1]]


def test_the_resampler_picks_per_task_with_task_offsets():
    # G = 2, keep 1; task 0 scores (0, 2.3): slot 1 survives; task 1 scores (1.3, 0): slot 2 = 2 + 0 survives
    histories = [(_turn(),), (_turn(2.0),), (_turn(1.0),), (_turn(),)]
    assert beam_resampler(2, keep=1, every=1)(0, histories) == [1, 1, 2, 2]


def test_the_resampler_takes_another_turn_score():
    # scored by prompt length instead: slot 0 (3 tokens) beats slot 1 (1 token)
    long, short = Turn((1, 2, 3), (), "", EvalResult("incorrect", "")), Turn((1,), (), "", EvalResult("incorrect", ""))
    resample = beam_resampler(2, keep=1, every=1, score=lambda t: float(t.prompt_tokens))
    assert resample(0, [(long,), (short,)]) == [0, 0]


@pytest.mark.parametrize("g, keep, every", [(4, 3, 1), (4, 2, 0), (4, 0, 1)])
def test_the_resampler_refuses_an_impossible_beam(g, keep, every):
    with pytest.raises(ValueError, match="beam search needs"):
        beam_resampler(g, keep=keep, every=every)
