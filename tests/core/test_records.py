import pytest

from kevin.core.records import load_rollout, save_rollout
from kevin.rewards.rescore import rescore, turn_scores
from kevin.core.split import split_trajectories
from kevin.core.types import Trajectory, Turn
from kevin.rewards import aggregate_rewards, kernel_score
from kevin.sandbox.result import EvalResult


def _turn(result, ids=(1, 2, 3)):
    return Turn(
        prompt_ids=(9, 8),
        response_ids=tuple(ids),
        response_text="text",
        result=result,
        thought="th",
        code="class ModelNew: pass",
        summary="sum",
        response_logprobs=tuple(-0.25 for _ in ids),
        truncated=False,
        generation_s=1.5,
        evaluation_s=0.5,
    )


FAIL = EvalResult("compile_error", "Compilation failed: x", details={"log": "error: x", "violations": []})
FAST = EvalResult("correct", "Correct; speedup 2.00x.", runtime_ms=0.5, baseline_ms=1.0, max_abs_error=1e-6)
SLOW = EvalResult("correct", "Correct; speedup 0.50x.", runtime_ms=2.0, baseline_ms=1.0)
UNTIMED = EvalResult("correct", "Correct.")


def _rollout():
    return [
        Trajectory("a", 0, 0, (_turn(FAIL), _turn(FAST))),
        Trajectory("a", 0, 1, (_turn(SLOW), _turn(UNTIMED, ids=()))),
    ]


def test_saved_rollout_loads_back_equal(tmp_path):
    trajs = _rollout()
    path = save_rollout(trajs, tmp_path / "r" / "step0.jsonl")
    assert load_rollout(path) == trajs


def test_reported_token_counts_load_back_and_old_records_without_them_load_as_none(tmp_path):
    api = Turn((), (), "text", FAST, reported_prompt_tokens=120, reported_generated_tokens=37)
    path = save_rollout([Trajectory("a", 0, 0, (api,))], tmp_path / "api.jsonl")
    assert load_rollout(path)[0].turns[0] == api
    old = api.to_dict()
    del old["reported_prompt_tokens"], old["reported_generated_tokens"]  # a record written before the fields
    assert Turn.from_dict(old).reported_generated_tokens is None


def test_gzip_path_is_compressed_and_loads_back_equal(tmp_path):
    path = save_rollout(_rollout(), tmp_path / "r.jsonl.gz")
    assert path.read_bytes()[:2] == b"\x1f\x8b"  # gzip magic
    assert load_rollout(path) == _rollout()


def test_append_adds_trajectories_after_the_existing_ones(tmp_path):
    path = tmp_path / "r.jsonl"
    a, b = _rollout()
    save_rollout([a], path)
    save_rollout([b], path, append=True)
    assert load_rollout(path) == [a, b]


def test_one_line_per_trajectory(tmp_path):
    path = save_rollout(_rollout(), tmp_path / "r.jsonl")
    assert len(path.read_text().splitlines()) == 2


def test_a_path_of_another_format_is_refused_rather_than_written_as_jsonl(tmp_path):
    with pytest.raises(ValueError, match=r"ends in \.jsonl or \.jsonl\.gz \(not \.parquet\)"):
        save_rollout(_rollout(), tmp_path / "r.parquet")
    assert list(tmp_path.iterdir()) == []


def test_a_truncated_last_line_names_the_file_and_the_line(tmp_path):
    path = save_rollout(_rollout(), tmp_path / "r.jsonl")
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # the second trajectory cut short
    with pytest.raises(ValueError, match=r"r\.jsonl, line 2: not a saved trajectory"):
        load_rollout(path)


def test_a_line_without_a_field_names_the_field(tmp_path):
    import json

    path = tmp_path / "r.jsonl"
    row = _rollout()[0].to_dict()
    del row["turns"][0]["response_ids"]
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match="line 1: not a saved trajectory \\(missing field 'response_ids'\\)"):
        load_rollout(path)


def test_a_gzip_file_without_the_gz_suffix_is_a_clear_error(tmp_path):
    import gzip

    path = tmp_path / "r.jsonl"
    path.write_bytes(gzip.compress(b'{"a": 1}\n'))
    with pytest.raises(ValueError, match="not a JSONL rollout file"):
        load_rollout(path)


def test_a_failed_save_leaves_no_temporary_file(tmp_path):
    def broken():
        yield _rollout()[0]
        raise RuntimeError("the rollout broke")

    with pytest.raises(RuntimeError, match="broke"):
        save_rollout(broken(), tmp_path / "r.jsonl")
    assert list(tmp_path.iterdir()) == []


def test_rescore_uses_the_stored_verdicts():
    # trajectory 0: scores [0, 0.3 + 2.0] = [0, 2.3]; sum, gamma 0.4: [0 + 0.4 * 2.3, 2.3] = [0.92, 2.3]
    # trajectory 1: scores [0.3 + 0.5, 0.3 (untimed: correctness only)] = [0.8, 0.3]; [0.8 + 0.12, 0.3]
    assert rescore(_rollout()) == [pytest.approx([0.92, 2.3]), pytest.approx([0.92, 0.3])]


def test_rescore_with_other_settings_needs_no_new_evaluation():
    # cap 1.5, weight 0.0, max mode, gamma 1: traj 0 scores [0, 1.5] -> [max(0, 1.5), 1.5]
    # traj 1 scores [0.5, 0.0] -> [max(0.5, 0.0), 0.0]
    out = rescore(_rollout(), correctness_weight=0.0, speedup_cap=1.5, gamma=1.0, mode="max")
    assert out == [pytest.approx([1.5, 1.5]), pytest.approx([0.5, 0.0])]


def test_turn_scores_are_kernel_scores():
    assert turn_scores(_rollout()) == [[0.0, pytest.approx(2.3)], [pytest.approx(0.8), pytest.approx(0.3)]]


def test_rescoring_a_saved_rollout_equals_scoring_the_original(tmp_path):
    trajs = _rollout()
    loaded = load_rollout(save_rollout(trajs, tmp_path / "r.jsonl"))
    direct = [
        aggregate_rewards([kernel_score(t.result.correct, t.result.speedup, speedup_cap=3.0) for t in tr.turns], gamma=0.4)
        for tr in trajs
    ]
    assert rescore(loaded, speedup_cap=3.0) == direct


def test_flattened_returns_line_up_with_split_trajectories():
    trajs = _rollout()
    flat = [r for per in rescore(trajs) for r in per]
    samples = split_trajectories(trajs, flat, [0.0] * len(flat))
    assert [(s.trajectory_index, s.turn_index, s.ret) for s in samples] == [
        (0, 0, pytest.approx(0.92)), (0, 1, pytest.approx(2.3)), (1, 0, pytest.approx(0.92)), (1, 1, pytest.approx(0.3))
    ]


def test_a_real_sandbox_rollout_rescored_from_disk_equals_scoring_it_in_memory(real_rollout, tmp_path):
    _, trajs = real_rollout
    loaded = load_rollout(save_rollout(trajs, tmp_path / "real.jsonl"))
    assert loaded == trajs
    for settings in ({}, {"gamma": 0.0}, {"mode": "max", "speedup_cap": 1.0}):
        assert rescore(loaded, **settings) == rescore(trajs, **settings)


def _one(n_turns):
    return [Trajectory("t", 0, 0, tuple(_turn(EvalResult("incorrect", f"turn {k}")) for k in range(n_turns)))]


def test_a_snapshot_writer_leaves_the_last_snapshot_it_was_given(tmp_path):
    from kevin.core.records import SnapshotWriter

    path = tmp_path / "r.partial.jsonl.gz"
    with SnapshotWriter(path) as save:
        for n in (1, 2, 3):  # given faster than written: the ones in between may be skipped, never the last
            save(_one(n))
    assert [len(tr.turns) for tr in load_rollout(path)] == [3]


def test_a_snapshot_writer_still_writes_the_last_snapshot_when_the_rollout_raises(tmp_path):
    from kevin.core.records import SnapshotWriter

    path = tmp_path / "r.partial.jsonl.gz"
    with pytest.raises(ConnectionError):
        with SnapshotWriter(path) as save:
            save(_one(2))
            raise ConnectionError("the server went away")
    assert [len(tr.turns) for tr in load_rollout(path)] == [2]


def test_a_snapshot_that_cannot_be_written_is_an_error_at_close(tmp_path):
    from kevin.core.records import SnapshotWriter

    (tmp_path / "file").write_text("")
    save = SnapshotWriter(tmp_path / "file" / "r.jsonl")  # its folder is a file
    save(_one(1))
    with pytest.raises(OSError):
        save.close()


def test_a_failed_snapshot_write_stops_the_rollout_at_its_next_turn(tmp_path):
    import time

    from kevin.core.records import SnapshotWriter

    (tmp_path / "file").write_text("")
    save = SnapshotWriter(tmp_path / "file" / "r.jsonl")
    save(_one(1))
    deadline = time.monotonic() + 10
    with pytest.raises(OSError):
        while time.monotonic() < deadline:  # the next turn's call raises once the write has failed
            save(_one(2))
            time.sleep(0.01)
    with pytest.raises(OSError):
        save.close()


def test_a_failed_last_write_does_not_replace_the_exception_leaving_the_block(tmp_path, caplog):
    from kevin.core.records import SnapshotWriter

    (tmp_path / "file").write_text("")
    with pytest.raises(KeyboardInterrupt):
        with SnapshotWriter(tmp_path / "file" / "r.jsonl") as save:
            save(_one(1))
            raise KeyboardInterrupt
    assert "was not written" in caplog.text


def test_a_closed_snapshot_writer_refuses_more_snapshots(tmp_path):
    from kevin.core.records import SnapshotWriter

    save = SnapshotWriter(tmp_path / "r.jsonl")
    save.close()
    with pytest.raises(RuntimeError, match="closed"):
        save(_one(1))
