"""The task synthesizer: determinism, validity, informativeness and novelty of the programs it keeps."""

import pytest
import torch

from kevin.data import Task, builtin_tasks, synthesize_tasks
from kevin.data.synth import informative_output_problems, operator_sequence, output_shape_on_meta, run_reference
from kevin.data.writer import MAIN_OPS, OTHER_OPS, render_task


@pytest.fixture(scope="module")
def fifty():
    return synthesize_tasks(50, seed=0)


def test_same_seed_gives_identical_sources():
    first = synthesize_tasks(8, seed=11)
    second = synthesize_tasks(8, seed=11)
    assert [t.source for t in first] == [t.source for t in second]


def test_different_seeds_give_different_tasks():
    assert {t.source for t in synthesize_tasks(5, seed=1)}.isdisjoint(t.source for t in synthesize_tasks(5, seed=2))


def test_fifty_tasks_come_from_one_call(fifty):
    assert len(fifty) == 50


def test_every_synthesized_program_runs_on_the_cpu_with_an_informative_output(fifty):
    for task in fifty:
        inputs, out = run_reference(task, backend="cpu", seed=3)
        _, other = run_reference(task, backend="cpu", seed=3, input_seed=99)
        assert informative_output_problems(inputs, out, other) == [], task.name


def test_every_synthesized_program_has_consistent_gpu_shapes(fifty):
    for task in fifty:
        assert len(output_shape_on_meta(task, "cuda")) == len(output_shape_on_meta(task, "cpu")), task.name


def test_synthesized_tasks_are_one_main_op_and_two_to_five_distinct_others(fifty):
    for task in fifty:
        main, *others = task.metadata["ops"]
        assert main in MAIN_OPS and set(others) <= set(OTHER_OPS)
        assert 2 <= len(others) <= 5 and len(set(others)) == len(others)
        assert task.name == "_".join(task.metadata["ops"]) and task.level == 2


def test_operator_sequences_are_new_against_builtins_and_each_other(fifty):
    sequences = [operator_sequence(t) for t in fifty]
    assert len(set(sequences)) == len(sequences)
    assert set(sequences).isdisjoint(operator_sequence(t) for t in builtin_tasks())


def test_existing_sequences_are_dropped(fifty):
    again = synthesize_tasks(10, seed=0, existing=list(builtin_tasks()) + fifty[:10])
    assert {operator_sequence(t) for t in again}.isdisjoint(operator_sequence(t) for t in fifty[:10])


def test_kernelbench_names_count_as_operator_sequences():
    kb = Task("kb-L2-1", "", level=2, name="Conv2d_ReLU_BiasAdd")
    assert operator_sequence(kb) == operator_sequence(render_task(["Conv2d", "ReLU", "BiasAdd"]))


def test_informative_check_flags_tiny_constant_and_passthrough_outputs():
    x = torch.randn(4, 8)
    tiny = x * 1e-3  # max |out| about 3e-3 < 0.05
    assert any(p.startswith("output is tiny") for p in informative_output_problems([x], tiny, tiny.flip(0)))
    const = torch.ones(4, 8)
    assert "output is constant" in informative_output_problems([x], const, const + 1)
    assert "output does not depend on the input" in informative_output_problems([x], 2 * x, 2 * x)
    assert "output is the input passed through" in informative_output_problems([x], x.clone(), torch.randn(4, 8))


@pytest.mark.gpu
def test_cuda_synthesis_keeps_only_tasks_over_the_runtime_threshold():
    tasks = synthesize_tasks(5, seed=0, device="cuda")
    assert len(tasks) == 5
    assert all(t.metadata["eager_ms"]["cuda"] >= 0.1 for t in tasks)


def test_synthesized_tasks_pass_the_sandbox_negative_control_calibration(fifty):
    calibrate = pytest.importorskip("kevin.sandbox.calibrate")
    reports = calibrate.calibrate_many(fifty[::2], device="cpu")  # half of them keeps the test under 15 s
    assert {r.task_id: r.accepted_controls or dict(r.controls) for r in reports if not r.passed} == {}


def test_calibrate_option_keeps_only_calibrated_tasks():
    pytest.importorskip("kevin.sandbox.calibrate")
    tasks = synthesize_tasks(3, seed=4, calibrate=True)
    assert len(tasks) == 3
    assert [t.source for t in tasks] == [t.source for t in synthesize_tasks(3, seed=4)]  # none dropped here
