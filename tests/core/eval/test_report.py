"""kevin.core.eval.report: bootstrap intervals, Table 1 per turn, Table 2 at equal budget, compute sums, baselines."""

import dataclasses
import json
import math

import pytest

from kevin.core.eval.report import (
    BaselineRow,
    Compute,
    baseline_table,
    bootstrap_ci,
    compute_used,
    equal_budget_table,
    is_beam,
    markdown_report,
    metrics_records,
    scaling_curve,
    summarize,
    turn_table,
)
from kevin.core.types import Trajectory, Turn
from kevin.sandbox.result import EvalResult


def _turn(status="incorrect", speedup=None, *, prompt=10, generated=5, gen_s=1.0, eval_s=0.5):
    """A Turn whose kernel has ``status``; a correct one runs in 1/speedup ms against a 1 ms baseline."""
    if status == "correct":
        result = EvalResult("correct", "ok", runtime_ms=1.0 / speedup, baseline_ms=1.0)
    else:
        result = EvalResult(status, status)
    return Turn(prompt_ids=tuple(range(prompt)), response_ids=tuple(range(generated)), response_text="",
                result=result, generation_s=gen_s, evaluation_s=eval_s)


def _traj(task, index, turns):
    return Trajectory(task_id=f"t{task}", task_index=task, trajectory_index=index, turns=tuple(turns))


C = lambda s: _turn("correct", s)  # noqa: E731  a correct kernel with speedup s
X = lambda: _turn("incorrect")  # noqa: E731
F = lambda: _turn("compile_error")  # noqa: E731


# --------------------------------------------------------------------------------------------------
# bootstrap_ci


def test_constant_values_give_a_zero_width_interval():
    assert bootstrap_ci([0.7, 0.7, 0.7, 0.7]) == (0.7, 0.7, 0.7)


def test_mean_is_the_plain_mean_and_lies_inside_the_interval():
    values = [0.0, 1.0, 0.0, 1.0, 1.0, 0.5, 2.0, 0.0]  # sum 5.5 over 8 tasks -> mean 0.6875
    mean, lo, hi = bootstrap_ci(values)
    assert mean == pytest.approx(0.6875, abs=1e-12)
    assert 0.0 <= lo < mean < hi <= 2.0


def test_interval_is_reproducible_for_a_seed_and_narrower_at_lower_confidence():
    values = [float(i % 5) for i in range(40)]
    assert bootstrap_ci(values, seed=3) == bootstrap_ci(values, seed=3)
    _, lo95, hi95 = bootstrap_ci(values, alpha=0.05)
    _, lo50, hi50 = bootstrap_ci(values, alpha=0.5)
    assert lo95 <= lo50 and hi50 <= hi95


def test_interval_of_zero_one_values_matches_the_normal_approximation():
    # 100 tasks, 30 solved: mean 0.3, standard error sqrt(0.3 * 0.7 / 100) = 0.0458;
    # a 95% interval is about 0.3 +- 1.96 * 0.0458 = [0.210, 0.390]
    values = [1.0] * 30 + [0.0] * 70
    _, lo, hi = bootstrap_ci(values, n_resamples=4000)
    assert lo == pytest.approx(0.210, abs=0.02)
    assert hi == pytest.approx(0.390, abs=0.02)


def test_empty_values_are_an_error():
    with pytest.raises(ValueError):
        bootstrap_ci([])


# --------------------------------------------------------------------------------------------------
# Per-trajectory scoring through summarize / turn_table


def test_best_at_k_is_the_unbiased_estimate_over_subsets():
    # one task, three 1-turn trajectories with speedups 0 (incorrect), 1.0, 2.0.
    # best@2 over the three pairs: {0,1} -> 1, {0,2} -> 2, {1,2} -> 2; mean 5/3
    trajs = [_traj(0, 0, [X()]), _traj(0, 1, [C(1.0)]), _traj(0, 2, [C(2.0)])]
    s = summarize(trajs, k=2)
    assert s.speedup_best.mean == pytest.approx(5 / 3)
    # correctness best@2: pairs {0,1} -> 1, {0,2} -> 1, {1,2} -> 1
    assert s.correct_best.mean == pytest.approx(1.0)
    assert s.speedup_avg.mean == pytest.approx(1.0)  # (0 + 1 + 2) / 3
    assert s.correct_avg.mean == pytest.approx(2 / 3)


def test_a_trajectory_scores_its_fastest_correct_kernel_and_later_turns_count_only_once_reached():
    # task 0: trajectory a = [incorrect, correct 1.2x, correct 0.8x], b = [correct 2.0x, fail, fail]
    # task 1: both trajectories never correct
    trajs = [_traj(0, 0, [X(), C(1.2), C(0.8)]), _traj(0, 1, [C(2.0), F(), F()]),
             _traj(1, 0, [X(), X(), F()]), _traj(1, 1, [F(), F(), F()])]
    rows = turn_table(trajs, n_resamples=200)
    assert [r.turns for r in rows] == [1, 2, 3]
    # t = 1: task 0 -> a: 0, b: 2.0 -> best 2.0, avg 1.0, correct avg 0.5; task 1 -> 0. Means over tasks:
    assert rows[0].summary.speedup_best.mean == pytest.approx(1.0)  # (2.0 + 0) / 2
    assert rows[0].summary.speedup_avg.mean == pytest.approx(0.5)  # (1.0 + 0) / 2
    assert rows[0].summary.correct_avg.mean == pytest.approx(0.25)  # (0.5 + 0) / 2
    # t = 2: a reaches 1.2x -> task 0 avg (1.2 + 2.0) / 2 = 1.6, correct avg 1.0
    assert rows[1].summary.speedup_avg.mean == pytest.approx(0.8)  # (1.6 + 0) / 2
    assert rows[1].summary.correct_avg.mean == pytest.approx(0.5)
    # t = 3: a's 0.8x kernel does not lower its best (1.2x): unchanged from t = 2
    assert rows[2].summary.speedup_avg.mean == pytest.approx(0.8)
    # fast_1: t = 2 task 0 a (1.2) and b (2.0) both >= 1 -> avg 1; fast_1.5: only b -> avg 0.5
    assert rows[1].summary.fast1_avg.mean == pytest.approx(0.5)  # (1 + 0) / 2
    assert rows[1].summary.fast15_avg.mean == pytest.approx(0.25)  # (0.5 + 0) / 2
    assert rows[1].summary.fast15_best.mean == pytest.approx(0.5)  # (1 + 0) / 2


def test_ragged_rollouts_are_rejected():
    with pytest.raises(ValueError, match="trajectories"):
        summarize([_traj(0, 0, [X()]), _traj(0, 1, [X()]), _traj(1, 0, [X()])])
    with pytest.raises(ValueError, match="turns"):
        summarize([_traj(0, 0, [X()]), _traj(0, 1, [X(), X()])])


# --------------------------------------------------------------------------------------------------
# Table 2 and compute


def _budget_rollouts():
    """Two tasks, budget 4 kernels each: 2 x 2 (serial) and 4 x 1 (parallel)."""
    serial = [_traj(0, 0, [X(), C(1.5)]), _traj(0, 1, [C(1.0), C(3.0)]),
              _traj(1, 0, [F(), X()]), _traj(1, 1, [X(), C(0.5)])]
    parallel = [_traj(0, i, [t]) for i, t in enumerate([C(2.0), X(), X(), F()])] + \
               [_traj(1, i, [t]) for i, t in enumerate([X(), X(), F(), F()])]
    return serial, parallel


def test_equal_budget_table_scores_best_at_m_after_n_turns():
    serial, parallel = _budget_rollouts()
    rows = equal_budget_table([serial, parallel], n_resamples=200)
    assert [r.label for r in rows] == ["2x2", "4x1"]
    # 2x2: task 0 best of (1.5, 3.0) = 3.0; task 1 best of (0, 0.5) = 0.5 -> mean 1.75
    assert rows[0].summary.speedup_best.mean == pytest.approx(1.75)
    assert rows[0].summary.correct_best.mean == pytest.approx(1.0)  # both tasks solved
    assert rows[0].summary.fast1_best.mean == pytest.approx(0.5)  # only task 0 reaches >= 1
    # 4x1: task 0 best 2.0; task 1 nothing -> mean 1.0; solved 1 of 2
    assert rows[1].summary.speedup_best.mean == pytest.approx(1.0)
    assert rows[1].summary.correct_best.mean == pytest.approx(0.5)
    assert rows[1].summary.k == 4 and rows[1].n_tasks == 2


def test_compute_is_summed_over_every_turn_of_every_trajectory():
    trajs = [_traj(0, 0, [_turn(prompt=10, generated=4, gen_s=1.0, eval_s=0.25),
                          _turn(prompt=30, generated=6, gen_s=2.0, eval_s=0.5)]),
             _traj(0, 1, [_turn(prompt=12, generated=5, gen_s=1.5, eval_s=0.75),
                          _turn(prompt=40, generated=7, gen_s=0.5, eval_s=1.0)])]
    # prompts 10 + 30 + 12 + 40 = 92; generated 4 + 6 + 5 + 7 = 22; gen 5.0 s; eval 2.5 s
    assert compute_used(trajs) == Compute(4, 92, 22, 5.0, 2.5)
    # first turn only: prompts 10 + 12, generated 4 + 5, gen 2.5 s, eval 1.0 s
    assert compute_used(trajs, turns=1) == Compute(2, 22, 9, 2.5, 1.0)


def test_compute_counts_the_tokens_an_api_reported_when_it_gave_no_ids():
    api = Turn((), (), "", EvalResult("incorrect", "x"), reported_prompt_tokens=120, reported_generated_tokens=37)
    # one turn, no ids: its usage counts, 120 prompt and 37 generated tokens
    assert compute_used([_traj(0, 0, [api])]) == Compute(1, 120, 37, 0.0, 0.0)


def test_budget_rows_carry_the_compute_of_their_own_rollout():
    serial, parallel = _budget_rollouts()
    rows = equal_budget_table([serial, parallel], n_resamples=50)
    # every helper turn has 10 prompt and 5 generated tokens: 8 kernels -> 80 and 40
    assert rows[0].compute == Compute(8, 80, 40, 8.0, 4.0)
    assert rows[1].compute == Compute(8, 80, 40, 8.0, 4.0)


def test_scaling_curve_ends_at_the_table_2_number_and_counts_kernels_and_tokens():
    serial, _ = _budget_rollouts()
    points = scaling_curve(serial)
    assert [p.k for p in points] == [1, 2]
    assert [p.kernels for p in points] == [2.0, 4.0]
    # one trajectory = 2 turns x 5 generated tokens = 10 tokens
    assert [p.generated_tokens for p in points] == [10.0, 20.0]
    assert points[-1].speedup_best == pytest.approx(1.75)
    # k = 1 is avg: task 0 (1.5 + 3.0) / 2 = 2.25, task 1 (0 + 0.5) / 2 = 0.25 -> 1.25
    assert points[0].speedup_best == pytest.approx(1.25)


# --------------------------------------------------------------------------------------------------
# Records and markdown


def test_metrics_records_are_flat_and_namespaced():
    serial, parallel = _budget_rollouts()
    records = metrics_records(turn_table(serial, n_resamples=50), equal_budget_table([serial, parallel],
                                                                                     n_resamples=50))
    assert [r["table"] for r in records] == ["turns", "turns", "budget", "budget"]
    assert records[2]["config"] == "2x2"
    assert records[2]["speedup/best@k"] == pytest.approx(1.75)
    assert records[2]["speedup/best@k_lo"] <= 1.75 <= records[2]["speedup/best@k_hi"]
    assert records[3]["compute/generated_tokens"] == 40
    assert all(isinstance(v, (int, float, str)) and not (isinstance(v, float) and math.isnan(v))
               for r in records for v in r.values())


def test_markdown_report_holds_both_tables_and_flags_unequal_budgets():
    serial, parallel = _budget_rollouts()
    text = markdown_report(turn_table(serial, n_resamples=50), equal_budget_table([serial, parallel],
                                                                                  n_resamples=50),
                           n_tasks=2, plots=["turns.png"])
    assert "## Per turn budget" in text and "## Equal kernel budget" in text
    assert "| 2x2 | 4 | 1.75x" in text
    assert "![turns](turns.png)" in text
    assert "do not share one kernel budget" not in text
    two_by_one = [parallel[0], parallel[1], parallel[4], parallel[5]]  # 2 trajectories x 1 turn: budget 2
    uneven = markdown_report([], equal_budget_table([serial, two_by_one], n_resamples=50))
    assert "do not share one kernel budget" in uneven


def test_markdown_report_notes_rollouts_over_different_task_sets_and_missing_token_ids():
    serial, parallel = _budget_rollouts()
    # the 4x1 rollout of task 0 only, with its token ids dropped as an API backend would
    api = [Trajectory(t.task_id, t.task_index, t.trajectory_index,
                      tuple(Turn((), (), "", u.result) for u in t.turns)) for t in parallel[:4]]
    text = markdown_report([], equal_budget_table([serial, api], n_resamples=50))
    assert "different numbers of tasks ([1, 2])" in text
    assert "neither token ids nor usage counts" in text


# --------------------------------------------------------------------------------------------------
# Speedups against each baseline


def _timed(runtime_ms, status="correct", **baselines_ms):
    """A turn whose kernel ran in ``runtime_ms`` against the eager baseline and ``baselines_ms`` (name -> ms)."""
    result = EvalResult(status, status, runtime_ms=runtime_ms if status == "correct" else None,
                        baseline_ms=baselines_ms.get("eager"), baselines_ms=baselines_ms)
    return Turn((1,), (2,), "", result)


def _baseline_rollouts():
    """Task 0: kernels of 0.5 ms and 1 ms against eager 1 ms, tf32 0.8 ms, compile 0.4 ms; task 1: one
    correct kernel of 2 ms (eager 2.2 ms, tf32 1.0 ms, no compile timing) and one incorrect."""
    t0 = dict(eager=1.0, tf32=0.8, compile=0.4)
    return {"2x1": [_traj(0, 0, [_timed(0.5, **t0)]), _traj(0, 1, [_timed(1.0, **t0)]),
                    _traj(1, 0, [_timed(2.0, eager=2.2, tf32=1.0)]), _traj(1, 1, [_timed(None, "incorrect")])]}


def test_baseline_table_gives_each_baselines_mean_speedup_of_correct_kernels_and_fast_1():
    rows = {r.baseline: r for r in baseline_table(_baseline_rollouts())}
    assert list(rows) == ["eager", "tf32", "compile"]  # a fixed order, whatever the dicts held
    # eager: speedups 1/0.5 = 2.0, 1/1 = 1.0, 2.2/2 = 1.1 -> mean 4.1/3; both tasks have one >= 1
    assert rows["eager"] == BaselineRow("2x1", "eager", 2, 3, 3, pytest.approx(4.1 / 3), 1.0)
    # tf32: 1.6, 0.8, 0.5 -> mean 2.9/3; only task 0 (1.6x) reaches 1
    assert rows["tf32"].mean_speedup == pytest.approx(2.9 / 3) and rows["tf32"].fast1 == 0.5
    # compile: task 0 only, 0.8 and 0.4 -> mean 0.6; task 1 was not timed: 2 of 3 correct kernels, fast_1 0
    assert (rows["compile"].n_timed, rows["compile"].n_correct) == (2, 3)
    assert rows["compile"].mean_speedup == pytest.approx(0.6) and rows["compile"].fast1 == 0.0


def test_results_without_baselines_give_no_baseline_rows():
    serial, _ = _budget_rollouts()  # EvalResults made without baselines_ms, as every record before them
    assert baseline_table({"2x2": serial}) == []


def test_records_saved_before_baselines_ms_existed_still_load(tmp_path):
    from kevin.core.records import load_rollout

    row = _traj(0, 0, [C(2.0)]).to_dict()
    del row["turns"][0]["result"]["baselines_ms"]
    (tmp_path / "old.jsonl").write_text(json.dumps(row) + "\n")
    (turn,) = load_rollout(tmp_path / "old.jsonl")[0].turns
    assert turn.result.baselines_ms == {} and turn.result.speedup == pytest.approx(2.0)
    assert EvalResult.from_dict(_timed(0.5, eager=1.0, tf32=0.8).result.to_dict()).speedup_vs("tf32") == 1.6


def test_the_report_names_the_rule_set_and_baseline_and_shows_every_baselines_speedups():
    rollouts = _baseline_rollouts()
    rows = baseline_table(rollouts)
    text = markdown_report([], equal_budget_table(list(rollouts.values()), n_resamples=50), baseline_rows=rows,
                           rules="kernelbench", baseline="eager")
    assert "Rule set: kernelbench. Speedups divide by the eager baseline" in text
    assert "## Speedup against each baseline" in text
    assert "| 2x1 | eager (used above) | 1.37x | 100.0% | 3/3 |" in text
    assert "| 2x1 | tf32 | 0.97x | 50.0% | 3/3 |" in text
    assert "| 2x1 | compile | 0.60x | 0.0% | 2/3 |" in text
    records = [r for r in metrics_records([], [], rows) if r["table"] == "baselines"]
    assert [(r["baseline"], r["fast_1"], r["kernels/timed"]) for r in records] == \
        [("eager", 1.0, 3), ("tf32", 0.5, 3), ("compile", 0.0, 2)]
    assert "Speedup against each baseline" not in markdown_report([], [])


# --------------------------------------------------------------------------------------------------
# Beam search rollouts: replicas counted once, pruned turns counted


def _beam_rollout():
    """1 task, G 2, T 2, beam search kept slot 1 after turn 1. Slot 1 generated a (2x, 1 token) and d (3x,
    8 tokens); slot 0 generated b (incorrect, 2 tokens), pruned, and c (incorrect, 4 tokens) after a copy of a."""
    a, d = _turn("correct", 2.0, generated=1), _turn("correct", 3.0, generated=8)
    b, c = _turn(generated=2), _turn(generated=4)
    return [Trajectory("t0", 0, 0, (dataclasses.replace(a, replica=True), c), pruned=((0, b),)),
            _traj(0, 1, [a, d])]


def test_compute_of_a_beam_rollout_counts_every_generated_kernel_once():
    # a, b, c, d: 4 kernels (G * T), generated 1 + 2 + 4 + 8 = 15 (the replica of a is not counted, b is);
    # prompts 4 * 10; generation 4 * 1.0 s; sandbox 4 * 0.5 s
    assert compute_used(_beam_rollout()) == Compute(4, 40, 15, 4.0, 2.0)


def test_compute_of_a_beam_rollout_at_one_turn_counts_the_first_position_only():
    # position 0: a (slot 1) and b (pruned from slot 0): 2 kernels (G * 1), 1 + 2 = 3 tokens
    assert compute_used(_beam_rollout(), turns=1) == Compute(2, 20, 3, 2.0, 1.0)


def test_a_beam_rollout_has_one_scaling_point_at_k_equal_g():
    # k = G = 2: kernels 2 * 2 = 4, tokens 15 generated on the one task, best speedup max(2, 3) = 3
    (point,) = scaling_curve(_beam_rollout())
    assert (point.k, point.kernels, point.generated_tokens) == (2, 4.0, 15.0)
    assert point.speedup_best == pytest.approx(3.0)


def test_only_copied_or_pruned_turns_make_a_rollout_a_beam_one():
    serial, _ = _budget_rollouts()
    assert is_beam(_beam_rollout()) and not is_beam(serial)


def test_a_beam_row_of_table_2_carries_its_label_and_the_kernels_it_generated():
    (row,) = equal_budget_table([_beam_rollout()], n_resamples=50, labels=["2x2 beam 1/1"])
    assert (row.label, row.m, row.n, row.compute.kernels) == ("2x2 beam 1/1", 2, 2, 4)
    assert "| 2x2 beam 1/1 | 4 | 3.00x" in markdown_report([], [row])


def test_the_baseline_table_counts_a_replicated_kernel_once():
    # slot 1's kernel (2x against eager) is copied into slot 0, whose own incorrect kernel was pruned
    kernel = _timed(0.5, eager=1.0)
    rollout = [Trajectory("t0", 0, 0, (dataclasses.replace(kernel, replica=True),),
                          pruned=((0, _timed(None, "incorrect")),)), _traj(0, 1, [kernel])]
    (row,) = baseline_table({"2x1 beam 1/1": rollout})
    assert (row.n_correct, row.n_timed, row.mean_speedup, row.fast1) == (1, 1, 2.0, 1.0)
