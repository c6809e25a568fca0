import json

import pytest

from kevin.core.eval.ablation import ablation_rows, markdown_table, read_run, varied_fields


def _run(tmp_path, name, config, correct, turn2=None, score=None):
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    lines = [{"step": 0, "config": config}]
    for i, c in enumerate(correct):
        rec = {"step": i + 1, "rollout/correct": c}
        if turn2 is not None:
            rec["turn1/correct"], rec["turn2/correct"] = c, turn2[i]
        if score is not None:
            rec["reward/score_mean"] = score[i]
        lines.append(rec)
    (path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_only_the_fields_that_differ_are_columns():
    configs = [{"gamma": 0.4, "reward_mode": "sum", "seed": 0}, {"gamma": 0.0, "reward_mode": "sum", "seed": 0}]
    assert varied_fields(configs) == ["gamma"]


def test_the_step_0_config_record_is_not_a_step(tmp_path):
    config, records = read_run(_run(tmp_path, "a", {"gamma": 0.4}, [0.5, 0.25]))
    assert config == {"gamma": 0.4} and [r["step"] for r in records] == [1, 2]


def test_the_last_steps_are_averaged(tmp_path):
    runs = {"a": read_run(_run(tmp_path, "a", {"gamma": 0.4}, [0.25, 0.5, 1.0], turn2=[0.0, 0.5, 0.75],
                                score=[0.1, 0.2, 0.4]))}
    (row,) = ablation_rows(runs, last=2)
    assert row["correct, first"] == 0.25
    assert row["correct, last 2"] == pytest.approx(0.75)  # (0.5 + 1.0) / 2
    assert row["turn 2 correct, last 2"] == pytest.approx(0.625)  # (0.5 + 0.75) / 2
    assert row["score, last 2"] == pytest.approx(0.3)  # (0.2 + 0.4) / 2
    assert row["steps"] == 3


def test_the_table_has_one_line_per_run_under_its_header(tmp_path):
    runs = {name: read_run(_run(tmp_path, name, {"gamma": g}, [0.5, 0.5])) for name, g in (("g0", 0.0), ("g4", 0.4))}
    lines = markdown_table(ablation_rows(runs)).splitlines()
    assert lines[0].startswith("| run | gamma | steps |")
    assert lines[2].startswith("| g0 | 0 | 2 |") and lines[3].startswith("| g4 | 0.4 | 2 |")  # 3 significant digits


def test_a_folder_without_metrics_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a training run"):
        read_run(tmp_path)
