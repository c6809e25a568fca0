import json

import pytest

from recipes import ablation_table


def _run(path, gamma, correct):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"gamma": gamma, "seed": 0}))
    (path / "metrics.jsonl").write_text("\n".join(json.dumps({"step": i + 1, "rollout/correct": c})
                                                  for i, c in enumerate(correct)) + "\n")
    return str(path)


def test_the_table_lines_up_the_runs_by_what_they_changed(tmp_path, capsys):
    runs = [_run(tmp_path / "g0", 0.0, [0.5, 0.25, 0.25]), _run(tmp_path / "g8", 0.8, [0.5, 0.75, 1.0])]
    ablation_table.main(runs)
    out = capsys.readouterr().out.splitlines()
    assert "| gamma |" in out[0] and "| seed |" not in out[0]  # the seed is the same in both runs
    assert out[3].endswith("| 0.875 |  |")  # g8: (0.75 + 1.0) / 2; no score logged


def test_a_folder_that_is_no_run_stops_with_one_line(tmp_path):
    with pytest.raises(SystemExit, match="has no metrics.jsonl"):
        ablation_table.main([str(tmp_path)])


def test_files_a_glob_matched_beside_the_runs_are_skipped(tmp_path, capsys):
    runs = [_run(tmp_path / "g0", 0.0, [0.5]), _run(tmp_path / "g8", 0.8, [0.75])]
    (tmp_path / "g0.log").write_text("the run's output")
    ablation_table.main([*runs, str(tmp_path / "g0.log")])
    captured = capsys.readouterr()
    assert "skipping" in captured.err and len(captured.out.splitlines()) == 4  # header, rule, two runs
