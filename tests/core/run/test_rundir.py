"""`kevin.core.run.rundir.write_run_report`: report.md, its table and the plots it embeds."""

import json
import re

import pytest

from kevin.core.eval.plots import PLOT_FILES, plot_file
from kevin.core.run.rundir import RUN_FILES, earlier_run, write_run_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STATUSES = ("format_error", "compile_error", "runtime_error", "timeout", "incorrect", "correct")


def step_record(step, *, telemetry=True):
    record = {"step": step, "loss/policy": 0.1, "reward/score_mean": 0.2 * step, "reward/return_mean": 0.3 * step,
              "reward/score_max": 1.3, "rollout/correct": 0.5, "turn1/correct": 0.25, "turn2/correct": 0.75,
              "rollout/speedup": 0.6, "rollout/not_okay": 0.1, "rollout/truncated": 0.05,
              "rollout/response_tokens": 800.0, **{f"rollout/status/{s}": 1 / 6 for s in STATUSES}}
    if telemetry:
        record.update({"reject/any": 0.25, "reject/format/static": 0.25})
    return record


@pytest.fixture
def quick_plots(monkeypatch):
    """Plot files written without drawing (for tests about which files, not what they show)."""
    import kevin.core.eval.plots as plots

    monkeypatch.setattr(plots, "_pyplot", lambda: None)
    monkeypatch.setattr(plots, "_draw", lambda plt, panel, path: path.write_bytes(PNG_SIGNATURE))


def write_metrics(out, records):
    out.mkdir(parents=True, exist_ok=True)
    lines = [{"step": 0, "config": {"model": "tiny"}}, *records]  # the config record is no step
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def report(out):
    return write_run_report(out, title="Test run", summary="a summary.").read_text()


def linked(text):
    return re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)


def plot_files(out):
    return sorted(p.name for p in out.glob("plot_*.png"))


def test_the_report_links_exactly_the_plots_written(tmp_path):
    write_metrics(tmp_path, [step_record(1), step_record(2)])
    text = report(tmp_path)
    assert sorted(linked(text)) == plot_files(tmp_path) == sorted(PLOT_FILES)
    assert all((tmp_path / name).read_bytes()[:8] == PNG_SIGNATURE for name in linked(text))


def test_the_table_is_still_written_beside_the_plots(tmp_path, quick_plots):
    write_metrics(tmp_path, [step_record(1), step_record(2)])
    text = report(tmp_path)
    assert "2 steps; a summary." in text and "| step |" in text and text.count("\n| 2 |") == 1


def test_one_step_gets_its_plots(tmp_path):
    write_metrics(tmp_path, [step_record(1)])
    assert sorted(linked(report(tmp_path))) == plot_files(tmp_path) == sorted(PLOT_FILES)


def test_a_panel_without_logged_keys_is_skipped_and_named(tmp_path, quick_plots):
    write_metrics(tmp_path, [step_record(1, telemetry=False)])
    text = report(tmp_path)
    assert plot_file("rejections") not in plot_files(tmp_path) and plot_file("rejections") not in linked(text)
    assert sorted(linked(text)) == plot_files(tmp_path)
    assert "Not plotted" in text and "Rejections by rule family" in text


def test_a_plot_of_an_earlier_report_that_is_not_drawn_again_is_deleted(tmp_path, quick_plots):
    write_metrics(tmp_path, [step_record(1)])
    report(tmp_path)
    write_metrics(tmp_path, [step_record(1, telemetry=False)])  # the same directory, now without telemetry
    report(tmp_path)
    assert not (tmp_path / plot_file("rejections")).exists()


def test_no_step_gives_no_plots_and_no_plot_section(tmp_path):
    write_metrics(tmp_path, [])
    text = report(tmp_path)
    assert linked(text) == [] and plot_files(tmp_path) == [] and "Not plotted" not in text


def test_without_matplotlib_the_report_says_so_and_keeps_its_table(tmp_path, monkeypatch):
    import kevin.core.eval.plots as plots

    def no_matplotlib():
        raise ImportError("No module named 'matplotlib'")

    monkeypatch.setattr(plots, "_pyplot", no_matplotlib)
    write_metrics(tmp_path, [step_record(1)])
    text = report(tmp_path)
    assert linked(text) == [] and "Plots not drawn: No module named 'matplotlib'" in text and "| step |" in text


def test_the_plots_belong_to_an_earlier_run(tmp_path):
    (tmp_path / plot_file("reward")).write_bytes(PNG_SIGNATURE)
    assert set(PLOT_FILES) <= set(RUN_FILES) and earlier_run(tmp_path) == [plot_file("reward")]
