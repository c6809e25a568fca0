"""Rollout metrics: per-turn rates, Not-Okay ratio, repetition, and the unbiased best@k / pass@k."""

import itertools
import math
import random

import pytest

from kevin.core.eval.metrics import (
    TaskMetrics,
    avg_at_k,
    best_at_k,
    group_by_task,
    mean_over_tasks,
    metrics_dict,
    pass_at_k,
    repetition_score,
    starts_with_opener,
    summarize_turns,
    task_metrics,
    trajectory_correct,
    trajectory_fast,
    trajectory_speedup,
    turn_metrics,
    turn_repetition,
)
from kevin.core.types import Trajectory, Turn
from kevin.sandbox.result import STATUSES, EvalResult


def result(status: str, speedup: float | None = None) -> EvalResult:
    if status == "correct" and speedup is not None:
        return EvalResult("correct", f"Correct; speedup {speedup:.2f}x.", runtime_ms=1.0, baseline_ms=speedup)
    return EvalResult(status, f"{status}.")


def turn(status: str = "compile_error", speedup: float | None = None, *, thought: str | None = "Okay, go.",
         response_ids=(1, 2, 3), text: str = "", truncated: bool = False, prompt_len: int = 5) -> Turn:
    return Turn(prompt_ids=tuple(range(prompt_len)), response_ids=tuple(response_ids), response_text=text,
                result=result(status, speedup), thought=thought, truncated=truncated)


def traj(turns, task_id: str = "t0", index: int = 0) -> Trajectory:
    return Trajectory(task_id=task_id, task_index=0, trajectory_index=index, turns=tuple(turns))


# ------------------------------------------------------------------------------------------------
# One turn and per turn index


def test_summarize_turns_counts_statuses_and_scores_incorrect_as_zero_speedup():
    m = summarize_turns([turn("correct", 2.0), turn("correct", None), turn("compile_error")])
    assert m.count == 3
    assert m.correct == pytest.approx(2 / 3)
    assert m.speedup == pytest.approx((2.0 + 0.0 + 0.0) / 3)  # untimed correct and failed count 0
    assert dict(m.status_counts) == {s: {"correct": 2, "compile_error": 1}.get(s, 0) for s in STATUSES}


def test_summarize_turns_means_lengths_and_truncation():
    m = summarize_turns([turn(response_ids=range(10), truncated=True, prompt_len=4),
                         turn(response_ids=range(30), prompt_len=8)])
    assert m.response_tokens == 20.0 and m.prompt_tokens == 6.0 and m.truncated == 0.5


def test_turn_metrics_pools_each_turn_index_across_trajectories():
    trs = [traj([turn("compile_error"), turn("correct", 1.5)], index=0),
           traj([turn("correct", 0.5), turn("incorrect")], index=1)]
    per_turn = turn_metrics(trs)
    assert [m.turn_index for m in per_turn] == [0, 1]
    assert per_turn[0].correct == 0.5 and per_turn[0].speedup == pytest.approx(0.25)  # (0 + 0.5) / 2
    assert per_turn[1].correct == 0.5 and per_turn[1].speedup == pytest.approx(0.75)  # (1.5 + 0) / 2


def test_not_okay_ratio_counts_thoughts_not_starting_with_the_opener():
    turns = [turn(thought="Okay, let's see."), turn(thought="\n  Okay, so"), turn(thought="Hmm, okay."),
             turn(thought="")]
    # 2 start with "Okay," (after leading whitespace), "Hmm" and the empty thought do not: 2/4.
    assert summarize_turns(turns).not_okay == pytest.approx(2 / 4)


def test_not_okay_counts_the_papers_drift_that_keeps_the_word_okay():
    # the paper's examples of drift before junk: "Okay Amigos, ..." and "Okay Holy crap, ..." (no comma after Okay)
    turns = [turn(thought="Okay Amigos, so"), turn(thought="Okay Holy crap, "), turn(thought="Okayyyy"),
             turn(thought="Okay, fine.")]
    assert summarize_turns(turns).not_okay == pytest.approx(3 / 4)


def test_not_okay_uses_the_response_when_there_is_no_thought_and_the_opener_is_configurable():
    assert starts_with_opener(turn(thought=None, text="<think>\nOkay, first"))
    assert not starts_with_opener(turn(thought=None, text="Sure! Here is the kernel"))
    assert starts_with_opener(turn(thought="Alright, so"), opener="Alright")
    assert summarize_turns([turn(thought="Alright")], opener="Alright").not_okay == 0.0


def test_repetition_score_is_high_on_a_repeated_string_and_low_on_prose():
    junk = ("the kernel " * 200).split()
    prose = ("We tile the matrix into 32 by 32 blocks held in shared memory, so every global load is "
             "reused by a whole warp; the inner product then accumulates in registers and the result is "
             "written back once, which removes the redundant traffic of the naive version.").split()
    assert repetition_score(junk) > 0.95  # 397 four-grams, 2 distinct: 1 - 2/397
    assert repetition_score(prose) < 0.05  # every four-gram distinct: 0
    assert repetition_score(["a", "b"], n=4) == 0.0  # shorter than n


def test_turn_repetition_prefers_token_ids_and_falls_back_to_words():
    assert turn_repetition(turn(response_ids=[7] * 50)) == pytest.approx(1 - 1 / 47)  # 47 windows, 1 distinct
    assert turn_repetition(turn(response_ids=(), text="go " * 50)) == pytest.approx(1 - 1 / 47)
    assert turn_repetition(turn(response_ids=range(50))) == 0.0


# ------------------------------------------------------------------------------------------------
# Trajectories


def test_trajectory_is_correct_if_any_kernel_is_and_performs_as_its_fastest_correct_kernel():
    tr = traj([turn("compile_error"), turn("correct", 1.2), turn("incorrect"), turn("correct", 0.9)])
    assert trajectory_correct(tr) and trajectory_speedup(tr) == pytest.approx(1.2)
    assert not trajectory_correct(tr, turns=1) and trajectory_speedup(tr, turns=1) == 0.0
    assert trajectory_fast(tr, 1.0) and not trajectory_fast(tr, 1.5)


def test_fast_p_is_inclusive_unless_strict():
    tr = traj([turn("correct", 1.0)])
    assert trajectory_fast(tr, 1.0) and not trajectory_fast(tr, 1.0, strict=True)


# ------------------------------------------------------------------------------------------------
# Estimators


def test_best_at_k_hand_computed():
    # values sorted: 0, 0.5, 1.2, 2.0; k = 2 of n = 4, C(4,2) = 6 subsets.
    # v_(i) is the max of C(i-1, 1) = i-1 subsets: 0*0 + 0.5*1 + 1.2*2 + 2.0*3 = 8.9 -> 8.9 / 6
    assert best_at_k([2.0, 0.0, 1.2, 0.5], 2) == pytest.approx(8.9 / 6)
    # k = 3: weights C(i-1, 2) = 0, 0, 1, 3 over C(4,3) = 4: (1.2 + 6.0) / 4 = 1.8
    assert best_at_k([2.0, 0.0, 1.2, 0.5], 3) == pytest.approx(1.8)


def test_best_at_k_equals_the_mean_max_over_all_subsets():
    rng = random.Random(0)
    values = [rng.choice([0.0, 0.3, 1.0, 1.7]) for _ in range(7)]  # ties included
    for k in range(1, 8):
        subsets = list(itertools.combinations(values, k))
        brute = sum(max(s) for s in subsets) / len(subsets)
        assert best_at_k(values, k) == pytest.approx(brute, rel=1e-12)


def test_best_at_k_is_max_at_k_equals_n_and_mean_at_k_equals_one():
    values = [0.0, 3.0, 1.0]
    assert best_at_k(values, 3) == 3.0
    assert best_at_k(values, 1) == pytest.approx(4.0 / 3)


def test_pass_at_k_matches_brute_force_enumeration_over_subsets():
    for n in range(1, 8):
        for c in range(n + 1):
            outcomes = [1] * c + [0] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(outcomes, k))
                brute = sum(any(s) for s in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)
                assert best_at_k([float(o) for o in outcomes], k) == pytest.approx(brute, abs=1e-12)


def test_avg_at_k_is_the_mean_and_k_is_checked():
    assert avg_at_k([0.0, 1.0, 2.0], 2) == 1.0
    with pytest.raises(ValueError):
        avg_at_k([1.0], 2)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 0)


# ------------------------------------------------------------------------------------------------
# Tasks


def three_trajectories(task_id: str = "t0"):
    return [
        traj([turn("compile_error"), turn("incorrect")], task_id, 0),  # never correct: performance 0
        traj([turn("correct", 1.2), turn("correct", 0.7)], task_id, 1),  # best 1.2
        traj([turn("incorrect"), turn("correct", 2.0)], task_id, 2),  # correct only at turn 2: 2.0
    ]


def test_task_metrics_hand_computed_with_k_below_n():
    m = task_metrics(three_trajectories(), k=2)
    # correct: (0, 1, 1) -> best@2 = pass@2 with c = 2 = 1 - C(1,2)/C(3,2) = 1; avg = 2/3
    assert m.correct_best == pytest.approx(1.0) and m.correct_avg == pytest.approx(2 / 3)
    # speedup: sorted (0, 1.2, 2.0), weights C(i-1,1)/C(3,2) = 0, 1/3, 2/3 -> 1.2/3 + 4/3 = 5.2/3
    assert m.speedup_best == pytest.approx(5.2 / 3) and m.speedup_avg == pytest.approx(3.2 / 3)
    # fast_1: (0, 1, 1) as correctness; fast_1.5: (0, 0, 1) -> 1 - C(2,2)/C(3,2) = 2/3, avg 1/3
    assert m.fast1_best == pytest.approx(1.0) and m.fast15_best == pytest.approx(2 / 3)
    assert m.fast15_avg == pytest.approx(1 / 3)


def test_task_metrics_over_the_first_turn_only():
    m = task_metrics(three_trajectories(), turns=1)  # k = n = 3: plain max and mean
    # first turns: compile_error, correct 1.2, incorrect -> correct (0, 1, 0), speedup (0, 1.2, 0)
    assert (m.correct_best, m.correct_avg) == (1.0, pytest.approx(1 / 3))
    assert (m.speedup_best, m.speedup_avg) == (pytest.approx(1.2), pytest.approx(0.4))
    assert (m.fast1_best, m.fast15_best) == (1.0, 0.0)


def test_task_metrics_rejects_mixed_tasks():
    with pytest.raises(ValueError, match="one task"):
        task_metrics(three_trajectories("a") + three_trajectories("b"))


def test_mean_over_tasks_is_arithmetic():
    a = task_metrics(three_trajectories("a"))
    b = task_metrics([traj([turn("compile_error")], "b", i) for i in range(3)])
    means = mean_over_tasks([a, b])
    assert means["speedup_best"] == pytest.approx((2.0 + 0.0) / 2)
    assert set(means) == set(TaskMetrics.VALUE_FIELDS)


def test_group_by_task_keeps_task_order_and_sorts_trajectories():
    trs = [traj([], "b", 1), traj([], "a", 0), traj([], "b", 0)]
    groups = group_by_task(trs)
    assert list(groups) == ["b", "a"] and [t.trajectory_index for t in groups["b"]] == [0, 1]


def test_metrics_dict_has_namespaced_keys_with_consistent_values():
    trs = three_trajectories("a") + three_trajectories("b")
    d = metrics_dict(trs, k=2, turn_budgets=(1,))
    assert d["turn1/correct"] == pytest.approx(1 / 3)  # one correct first turn in each task's three
    assert d["turn2/status/correct"] == pytest.approx(2 / 3)
    assert d["rollout/count"] == 12.0 and d["rollout/tasks"] == 2.0 and d["rollout/trajectories"] == 6.0
    assert d["rollout/not_okay"] == 0.0
    assert d["tasks/speedup/best@2"] == pytest.approx(5.2 / 3)  # both tasks identical
    assert d["upto_turn1/correct/avg@2"] == pytest.approx(1 / 3)
    assert all(isinstance(v, float) and math.isfinite(v) for v in d.values())


def test_metrics_dict_defaults_k_to_the_smallest_group_and_is_empty_without_trajectories():
    trs = three_trajectories("a") + three_trajectories("b")[:2]
    assert "tasks/correct/best@2" in metrics_dict(trs)
    assert metrics_dict([]) == {}


def test_metrics_dict_rejects_a_turn_budget_beyond_the_trajectories_turns():
    trs = three_trajectories("a")  # two turns each
    with pytest.raises(ValueError, match=r"turn budgets \[5\] outside 1..2"):
        metrics_dict(trs, turn_budgets=(1, 5))
