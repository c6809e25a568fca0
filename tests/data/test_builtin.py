"""The built-in suite: its files, counts, the train/eval split, every task runs and cannot be faked."""

import configparser
import fnmatch
import json
from pathlib import Path

import pytest
import torch

from kevin.data import builtin_tasks
from kevin.data.builtin import ROOT, tasks_from_spec
from kevin.data.loaders import MANIFEST, validate_source
from kevin.data.synth import eager_runtime_ms, informative_output_problems, operator_sequence, output_shape_on_meta, run_reference
from kevin.data.writer import MAIN_OPS, OTHER_OPS, render_task

ALL = builtin_tasks()
IDS = [t.task_id for t in ALL]
TASK_FILES = sorted(ROOT.glob("level*/*.py"))
SETUP_CFG = Path(__file__).resolve().parents[2] / "setup.cfg"


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_task_file_is_a_kernelbench_program(path):
    assert validate_source(path.read_text()) == []


def test_the_manifest_lists_one_entry_per_task_file_and_task():
    manifest = json.loads((ROOT / MANIFEST).read_text())
    assert sorted(manifest) == [p.relative_to(ROOT).as_posix() for p in TASK_FILES]
    assert len(manifest) == len(ALL)


def test_setup_cfg_installs_the_manifest_and_every_task_file():
    config = configparser.ConfigParser()
    config.read(SETUP_CFG)
    patterns = [p.strip() for p in config["options.package_data"]["kevin.data.builtin"].split(",")]
    files = [MANIFEST] + [p.relative_to(ROOT).as_posix() for p in TASK_FILES]
    assert [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)] == []


@pytest.mark.parametrize("task", builtin_tasks(level=2), ids=lambda t: t.task_id)
def test_level2_files_are_what_the_writer_renders_for_their_ops(task):
    # the regeneration path the package docstring describes stays true
    rendered = render_task(task.metadata["ops"])
    assert task.source == rendered.source
    assert task.sizes == rendered.sizes


def test_suite_has_at_least_40_tasks_per_level():
    assert len(builtin_tasks(level=1)) >= 40
    assert len(builtin_tasks(level=2)) >= 40


def test_ids_and_names_are_unique():
    assert len(set(IDS)) == len(ALL)
    assert len({t.name for t in ALL}) == len(ALL)


def test_eval_split_shares_no_operator_sequence_with_train():
    train = {operator_sequence(t) for t in builtin_tasks(split="train")}
    held_out = {operator_sequence(t) for t in builtin_tasks(split="eval")}
    assert train.isdisjoint(held_out)


def test_most_tasks_train_and_both_levels_are_held_out():
    n_eval = len(builtin_tasks(split="eval"))
    assert 0.1 * len(ALL) <= n_eval <= 0.35 * len(ALL)
    assert {t.level for t in builtin_tasks(split="eval")} == {1, 2}
    assert len(builtin_tasks(split="train")) + n_eval == len(ALL)


def test_level2_tasks_are_one_main_op_and_two_to_five_vocabulary_ops():
    for t in builtin_tasks(level=2):
        main, *others = t.metadata["ops"]
        assert main in MAIN_OPS, t.task_id
        assert 2 <= len(others) <= 5 and set(others) <= set(OTHER_OPS), t.task_id


def test_filters_by_name_or_id_and_reject_unknown_names():
    assert [t.task_id for t in builtin_tasks(names=["ReLU", "kevin-L2-Gemm_ReLU_Divide"])] == [
        "kevin-L1-ReLU",
        "kevin-L2-Gemm_ReLU_Divide",
    ]
    with pytest.raises(ValueError, match="unknown built-in task names"):
        builtin_tasks(names=["NoSuchTask"])


def test_every_source_is_kernelbench_format_with_cpu_sizes():
    for t in ALL:
        assert validate_source(t.source) == [], t.task_id
        assert t.sizes.get("cpu"), t.task_id


@pytest.mark.parametrize("task", ALL, ids=IDS)
def test_task_runs_on_cpu_with_an_informative_output(task):
    inputs, out = run_reference(task, backend="cpu", seed=0)
    _, other = run_reference(task, backend="cpu", seed=0, input_seed=7)
    assert informative_output_problems(inputs, out, other) == []


# inputs that must stay positive for the op to be defined or finite: probabilities for a log, and
# factors near 1 for a long product
POSITIVE_BY_DESIGN = {"kevin-L1-KLDivLoss", "kevin-L1-Cumprod"}


@pytest.mark.parametrize("task", [t for t in ALL if t.task_id not in POSITIVE_BY_DESIGN], ids=lambda t: t.task_id)
def test_float_inputs_take_both_signs(task):
    # on U[0,1) inputs ReLU, clamp(min=0) or Hardtanh are the identity and `return x` would pass
    inputs, _ = run_reference(task, backend="cpu", seed=0)
    floats = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
    assert floats and all(x.min() < 0 < x.max() for x in floats)


@pytest.mark.parametrize("task", ALL, ids=IDS)
def test_gpu_sizes_infer_on_meta_with_the_cpu_output_rank(task):
    # the GPU-size program builds and its shapes line up, without allocating anything
    gpu_shape = output_shape_on_meta(task, "cuda")
    cpu_shape = output_shape_on_meta(task, "cpu")
    assert len(gpu_shape) == len(cpu_shape)
    assert torch.Size(gpu_shape).numel() >= torch.Size(cpu_shape).numel()


def test_every_task_passes_the_sandbox_negative_control_calibration():
    # zeros, a mean constant, the input passed through and a subsampled reference must all be rejected
    calibrate = pytest.importorskip("kevin.sandbox.calibrate")
    reports = calibrate.calibrate_many(ALL, device="cpu")
    failed = {r.task_id: r.accepted_controls or dict(r.controls) for r in reports if not r.passed}
    assert failed == {}


@pytest.mark.gpu
def test_every_task_takes_over_a_tenth_of_a_millisecond_eagerly_on_the_gpu():
    slow_enough = {t.task_id: eager_runtime_ms(t, device="cuda") for t in ALL}
    assert {k: v for k, v in slow_enough.items() if v <= 0.1} == {}


def test_a_tasks_spec_of_builtin_names_gives_those_tasks_in_the_order_given():
    tasks = tasks_from_spec("builtin:kevin-L2-Matmul_LayerNorm_GELU,GELU")  # an id and a name
    assert [t.task_id for t in tasks] == ["kevin-L2-Matmul_LayerNorm_GELU", "kevin-L1-GELU"]


def test_a_tasks_spec_of_plain_builtin_is_the_train_split():
    assert tasks_from_spec("builtin") == builtin_tasks(split="train")


@pytest.mark.parametrize("spec, words", [("builtin:Nope", "unknown built-in task names"),
                                         ("builtin: ,", "no task names")])
def test_a_bad_builtin_tasks_spec_says_what_is_wrong(spec, words):
    with pytest.raises(ValueError, match=words):
        tasks_from_spec(spec)
