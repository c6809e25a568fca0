"""`kevin.core.eval.plots`: the panels read from step records, and the PNGs drawn from them."""

import pytest

from kevin.core.eval.metrics import metrics_dict
from kevin.core.eval.plots import PANELS, PLOT_FILES, plot_file, step_panels, write_step_plots
from kevin.core.types import Trajectory, Turn
from kevin.rewards.telemetry import rejection_shares
from kevin.sandbox.result import EvalResult

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def rollout_record(step):
    """A step record with the keys `RunDir.log_step` logs: `metrics_dict` and `rejection_shares` of a rollout of
    2 trajectories x 2 turns, plus the reward means."""
    verdicts = [EvalResult("format_error", "x", details={"violations": ["try/except at line 3"]}),
                EvalResult("correct", "y", runtime_ms=0.5, baseline_ms=1.0),
                EvalResult("incorrect", "z", details={"per_set": [{"ok": False}]}),
                EvalResult("correct", "y", runtime_ms=1.0, baseline_ms=1.0)]
    turns = [Turn((1,), (2, 3), "Okay, fuse.", v) for v in verdicts]
    trajectories = [Trajectory("add", 0, g, tuple(turns[2 * g:2 * g + 2])) for g in range(2)]
    return {"step": step, "loss/policy": 0.1, "reward/score_mean": 0.5 * step, "reward/return_mean": 0.6 * step,
            **metrics_dict(trajectories), **rejection_shares(t.result for tr in trajectories for t in tr.turns)}


def by_name(panels):
    return {p.name: p for p in panels}


def test_a_logged_rollout_fills_every_panel():
    assert [p.name for p in step_panels([rollout_record(1), rollout_record(2)])] == list(PANELS)


def test_a_panel_whose_keys_no_record_has_is_skipped():
    records = [{k: v for k, v in rollout_record(s).items() if not k.startswith("reject/")} for s in (1, 2)]
    assert "rejections" not in by_name(step_panels(records))


def test_only_the_panels_with_keys_are_made_from_a_sparse_record():
    assert [p.name for p in step_panels([{"step": 1, "reward/score_mean": 0.2}])] == ["reward"]


def test_nothing_is_made_from_no_records_or_records_without_a_step():
    assert step_panels([]) == [] and step_panels([{"reward/score_mean": 1.0}]) == []


def test_the_correct_share_has_the_pooled_line_then_one_per_turn_in_numeric_order():
    record = {"step": 1, "rollout/correct": 0.5, "turn10/correct": 0.9, "turn2/correct": 0.4, "turn1/correct": 0.1}
    series = by_name(step_panels([record]))["correct_per_turn"].series
    assert [s.label for s in series] == ["all turns", "turn 1", "turn 2", "turn 10"]


def test_the_speedup_of_correct_kernels_is_the_mean_speedup_over_the_correct_share():
    # the record's rollout: speedups 2.0 and 1.0 for the 2 correct kernels of 4: rollout/speedup = 3/4,
    # rollout/correct = 2/4, so the correct kernels' mean is (3/4) / (2/4) = 1.5 = (2.0 + 1.0) / 2
    pooled = by_name(step_panels([rollout_record(1)]))["speedup"].series[0]
    assert pooled.label == "all turns" and pooled.values == pytest.approx((1.5,))


def test_a_step_without_a_correct_kernel_has_no_speedup_point():
    records = [{"step": 1, "rollout/speedup": 0.0, "rollout/correct": 0.0},
               {"step": 2, "rollout/speedup": 0.3, "rollout/correct": 0.2}]  # 0.3 / 0.2 = 1.5
    series = by_name(step_panels(records))["speedup"].series[0]
    assert (series.steps, series.values) == ((2,), pytest.approx((1.5,)))


def test_null_and_missing_values_leave_gaps():
    records = [{"step": 1, "reward/score_mean": None}, {"step": 2}, {"step": 3, "reward/score_mean": 0.25}]
    series = by_name(step_panels(records))["reward"].series
    assert [(s.label, s.steps, s.values) for s in series] == [("score", (3,), (0.25,))]


def test_records_are_plotted_in_step_order():
    records = [{"step": 2, "rollout/truncated": 0.2}, {"step": 1, "rollout/truncated": 0.1}]
    assert by_name(step_panels(records))["truncation"].series[0].steps == (1, 2)


def test_status_shares_are_stacked():
    assert by_name(step_panels([rollout_record(1)]))["status"].stacked


def test_a_rejection_key_missing_from_a_step_that_logged_others_counts_zero():
    records = [{"step": 1, "reject/any": 0.5, "reject/dynamic/tripwire": 0.25},
               {"step": 2, "reject/any": 0.25}, {"step": 3}]  # step 3 logged no telemetry: no point
    series = {s.label: s for s in by_name(step_panels(records))["rejections"].series}
    assert (series["dynamic/tripwire"].steps, series["dynamic/tripwire"].values) == ((1, 2), (0.25, 0.0))


def test_rejection_families_at_zero_throughout_are_not_drawn():
    records = [{"step": 1, "reject/any": 0.5, "reject/format/static": 0.5, "reject/dynamic/wall_check": 0.0}]
    labels = [s.label for s in by_name(step_panels(records))["rejections"].series]
    assert labels == ["any", "format/static"]


def test_telemetry_at_zero_everywhere_still_shows_its_pooled_line():
    records = [{"step": 1, "reject/any": 0.0, "reject/format/static": 0.0}]
    series = by_name(step_panels(records))["rejections"].series
    assert [(s.label, s.values) for s in series] == [("any", (0.0,))]


def test_every_panel_is_written_as_a_valid_png(tmp_path):
    written = write_step_plots([rollout_record(1), rollout_record(2), rollout_record(3)], tmp_path)
    assert [path.name for _, path in written] == list(PLOT_FILES)
    for _, path in written:
        assert path.read_bytes()[:8] == PNG_SIGNATURE
    import matplotlib.image

    assert all(matplotlib.image.imread(path).shape[0] > 50 for _, path in written)


def test_one_step_is_drawn(tmp_path):
    written = write_step_plots([rollout_record(1)], tmp_path)
    assert len(written) == len(PANELS)
    assert all(path.read_bytes()[:8] == PNG_SIGNATURE for _, path in written)


def test_only_the_panels_with_data_are_written(tmp_path):
    written = write_step_plots([{"step": 1, "rollout/not_okay": 0.5}], tmp_path)
    assert [path.name for _, path in written] == [plot_file("not_okay")]
    assert sorted(p.name for p in tmp_path.iterdir()) == [plot_file("not_okay")]


def test_no_records_write_nothing(tmp_path):
    assert write_step_plots([], tmp_path / "out") == [] and not (tmp_path / "out").exists()
