"""Metric loggers: JSONL lines per step, a null logger, accelerate forwarding."""

import json

import torch

from kevin.core.run.loggers import AccelerateLogger, JsonlLogger, MultiLogger, NullLogger, read_jsonl, to_jsonable


def test_each_log_call_writes_one_line_with_the_step_first(tmp_path):
    path = tmp_path / "m.jsonl"
    lg = JsonlLogger(path)
    lg.log({"reward/mean": 0.5}, step=0)
    lg.log({"reward/mean": 0.75, "loss/policy": -0.1}, step=1)
    lg.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    assert list(json.loads(lines[1])) == ["step", "reward/mean", "loss/policy"]


def test_a_reopened_logger_appends_so_a_resumed_run_keeps_its_history(tmp_path):
    path = tmp_path / "m.jsonl"
    JsonlLogger(path).log({"x": 1}, step=0)
    JsonlLogger(path).log({"x": 2}, step=1)
    assert [r["x"] for r in read_jsonl(path)] == [1, 2]


def test_tensors_become_numbers_and_nan_becomes_null():
    out = to_jsonable({"a": torch.tensor(1.5), "b": torch.tensor([1, 2]), "c": float("inf")})
    assert out == {"a": 1.5, "b": [1, 2], "c": None}


def test_a_torn_last_line_is_dropped_when_reading(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 0, "x": 1}\n{"step": 1, "x"')
    assert read_jsonl(path) == [{"step": 0, "x": 1}]


def test_null_logger_accepts_everything():
    lg = NullLogger()
    lg.log({"x": 1}, step=0)
    lg.close()


class _FakeAccelerator:
    def __init__(self):
        self.logged, self.ended = [], False

    def log(self, values, step):
        self.logged.append((values, step))

    def end_training(self):
        self.ended = True


def test_accelerate_logger_forwards_only_numbers():
    acc = _FakeAccelerator()
    lg = AccelerateLogger(acc)
    lg.log({"reward/mean": torch.tensor(0.5), "run/name": "x", "flag": True, "n": 3}, step=2)
    lg.close()
    assert acc.logged == [({"reward/mean": 0.5, "n": 3}, 2)] and acc.ended


def test_multi_logger_sends_to_every_logger(tmp_path):
    acc = _FakeAccelerator()
    lg = MultiLogger([JsonlLogger(tmp_path / "m.jsonl"), AccelerateLogger(acc)])
    lg.log({"x": 1.0}, step=0)
    assert read_jsonl(tmp_path / "m.jsonl") == [{"step": 0, "x": 1.0}] and acc.logged == [({"x": 1.0}, 0)]


def test_records_logged_after_the_resumed_step_are_dropped(tmp_path):
    from kevin.core.run.loggers import drop_records_from

    path = tmp_path / "m.jsonl"
    lg = JsonlLogger(path)
    for step in range(4):
        lg.log({"x": step}, step=step)
    lg.close()
    assert drop_records_from(path, 2) == 2
    assert [r["step"] for r in read_jsonl(path)] == [0, 1]


def test_markdown_table_leaves_missing_cells_empty():
    from kevin.core.run.loggers import markdown_table

    table = markdown_table([{"a": 1}, {"a": 2, "b": 0.5}], ["a", "b"])
    assert table.splitlines()[2:] == ["| 1 |  |", "| 2 | 0.500 |"]


def test_delete_earlier_run_removes_the_runs_files_only_and_a_linked_folder_as_a_link(tmp_path):
    from kevin.core.run.rundir import delete_earlier_run, earlier_run

    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "notes.txt").write_text("mine")
    scratch = tmp_path / "scratch"
    (scratch / "step_000001").mkdir(parents=True)
    (run / "checkpoints").symlink_to(scratch, target_is_directory=True)  # checkpoints on a scratch disk
    assert sorted(earlier_run(run)) == ["checkpoints", "config.json", "rollouts"]
    assert sorted(delete_earlier_run(run)) == ["checkpoints", "config.json", "rollouts"]
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]
    assert (scratch / "step_000001").is_dir()  # the link went, not what it points to
