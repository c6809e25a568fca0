"""load_tasks / save_tasks / validate_source: KernelBench folders, JSONL and datasets, built here."""

import json
import subprocess
import sys

import pytest

from kevin.data import Task, builtin_tasks, load_tasks, save_tasks
from kevin.data.loaders import validate_source

GOOD = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)


N = 64


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
'''

FUSED = GOOD.replace("torch.matmul(A, B)", "torch.relu(torch.matmul(A, B))")


def _kernelbench_checkout(root):
    """root/KernelBench/level{1,2}/<id>_<name>.py, as in the KernelBench repository."""
    l1 = root / "KernelBench" / "level1"
    l2 = root / "KernelBench" / "level2"
    l1.mkdir(parents=True)
    l2.mkdir(parents=True)
    (l1 / "1_Square_matrix_multiplication_.py").write_text(GOOD)
    (l1 / "10_Another_matmul.py").write_text(GOOD)
    (l1 / "2_Second.py").write_text(GOOD)
    (l1 / "README.md").write_text("not a task")
    (l2 / "1_Matmul_ReLU.py").write_text(FUSED)
    return root


def test_kernelbench_checkout_gives_levels_ids_and_names_in_problem_order(tmp_path):
    tasks = load_tasks(_kernelbench_checkout(tmp_path))
    assert [t.task_id for t in tasks] == ["kb-L1-1", "kb-L1-2", "kb-L1-10", "kb-L2-1"]
    assert [t.level for t in tasks] == [1, 1, 1, 2]
    assert tasks[0].name == "Square_matrix_multiplication_"
    assert tasks[0].source == GOOD


def test_kernelbench_level2_names_become_operator_sequences(tmp_path):
    task = load_tasks(_kernelbench_checkout(tmp_path), levels=2)[0]
    assert task.metadata["ops"] == ("Matmul", "ReLU")


def test_folder_of_levels_and_single_level_folder_load_the_same_tasks(tmp_path):
    _kernelbench_checkout(tmp_path)
    from_root = load_tasks(tmp_path)
    from_inner = load_tasks(tmp_path / "KernelBench")
    from_level = load_tasks(tmp_path / "KernelBench" / "level1")
    assert [t.task_id for t in from_inner] == [t.task_id for t in from_root]
    assert [t.task_id for t in from_level] == ["kb-L1-1", "kb-L1-2", "kb-L1-10"]


def test_levels_filter_keeps_only_those_levels(tmp_path):
    tasks = load_tasks(_kernelbench_checkout(tmp_path), levels=[2])
    assert {t.level for t in tasks} == {2}


@pytest.mark.parametrize(
    "source, reason",
    [
        ("def get_inputs(:\n", "syntax error at line 1"),
        (GOOD.replace("class Model", "class Net"), "no class Model"),
        (GOOD.replace("def get_inputs", "def make_inputs"), "no function get_inputs()"),
        (GOOD.replace("def get_init_inputs", "def init_inputs"), "no function get_init_inputs()"),
    ],
)
def test_malformed_file_raises_naming_file_and_reason(tmp_path, source, reason):
    _kernelbench_checkout(tmp_path)
    bad = tmp_path / "KernelBench" / "level1" / "3_Broken.py"
    bad.write_text(source)
    with pytest.raises(ValueError) as err:
        load_tasks(tmp_path)
    assert "3_Broken.py" in str(err.value)
    assert reason in str(err.value)


def _with_manifest(root, entries):
    """A folder of level folders (root/level{1,2}/<id>_<name>.py) and its manifest.json."""
    (root / "level1").mkdir()
    (root / "level2").mkdir()
    (root / "level1" / "1_Square.py").write_text(GOOD)
    (root / "level2" / "1_Matmul_ReLU.py").write_text(FUSED)
    (root / "manifest.json").write_text(json.dumps(entries))
    return root


MANIFEST_ENTRIES = {
    "level1/1_Square.py": {"task_id": "own-L1-Square", "sizes": {"cpu": {"N": 8}}, "metadata": {"ops": ["Matmul"], "split": "eval"}},
    "level2/1_Matmul_ReLU.py": {"task_id": "own-L2-Matmul_ReLU", "metadata": {"ops": ["Matmul", "ReLU"], "split": "train"}},
}


def test_manifest_sets_ids_sizes_and_metadata_and_the_path_sets_level_and_name(tmp_path):
    square, fused = load_tasks(_with_manifest(tmp_path, MANIFEST_ENTRIES))
    assert (square.task_id, square.level, square.name) == ("own-L1-Square", 1, "Square")
    assert dict(square.sizes["cpu"]) == {"N": 8}
    assert dict(square.metadata) == {"ops": ("Matmul",), "split": "eval"}
    assert (fused.task_id, fused.level, fused.name, fused.metadata["ops"]) == ("own-L2-Matmul_ReLU", 2, "Matmul_ReLU", ("Matmul", "ReLU"))


def test_manifest_split_filters_the_folder(tmp_path):
    assert [t.task_id for t in load_tasks(_with_manifest(tmp_path, MANIFEST_ENTRIES), split="eval")] == ["own-L1-Square"]


def test_a_task_file_missing_from_the_manifest_raises_naming_it(tmp_path):
    entries = {k: v for k, v in MANIFEST_ENTRIES.items() if k.startswith("level1/")}
    with pytest.raises(ValueError, match=r"1_Matmul_ReLU\.py: not listed in"):
        load_tasks(_with_manifest(tmp_path, entries))


def test_a_manifest_entry_without_its_file_raises_naming_it(tmp_path):
    entries = dict(MANIFEST_ENTRIES, **{"level1/2_Gone.py": {"task_id": "own-L1-Gone"}})
    with pytest.raises(ValueError, match=r"level1/2_Gone\.py"):
        load_tasks(_with_manifest(tmp_path, entries))


def test_an_unknown_manifest_key_raises(tmp_path):
    entries = dict(MANIFEST_ENTRIES, **{"level1/1_Square.py": {"task_id": "own-L1-Square", "spilt": "eval"}})
    with pytest.raises(ValueError, match=r"unknown keys \['spilt'\]"):
        load_tasks(_with_manifest(tmp_path, entries))


def test_validate_source_accepts_a_kernelbench_program():
    assert validate_source(GOOD) == []


def test_jsonl_round_trip_keeps_every_field(tmp_path):
    tasks = builtin_tasks(names=["ReLU", "Conv2d_ReLU_BiasAdd"])
    path = save_tasks(tasks, tmp_path / "suite.jsonl")
    back = load_tasks(path)
    assert [t.to_dict() for t in back] == [t.to_dict() for t in tasks]


def test_jsonl_split_filters_on_the_stored_split(tmp_path):
    tasks = builtin_tasks(level=1)
    path = save_tasks(tasks, tmp_path / "suite.jsonl")
    assert [t.task_id for t in load_tasks(path, split="eval")] == [t.task_id for t in builtin_tasks(level=1, split="eval")]


def test_malformed_jsonl_row_names_file_and_line(tmp_path):
    path = tmp_path / "tasks.jsonl"
    rows = [Task("ok", GOOD).to_dict(), Task("bad", GOOD.replace("class Model", "class M")).to_dict()]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(ValueError, match=r"tasks\.jsonl:2: malformed task: no class Model"):
        load_tasks(path)


def _kernelbench_hub_rows():
    # the hub dataset's columns; its names keep the file's number prefix
    return {
        "code": [GOOD, GOOD],
        "level": [1, 1],
        "name": ["1_Square_matrix_multiplication_", "2_Second"],
        "problem_id": [1, 2],
    }


def test_saved_kernelbench_style_dataset_loads_with_the_checkouts_ids(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict(_kernelbench_hub_rows()).save_to_disk(str(tmp_path / "kb"))
    tasks = load_tasks(tmp_path / "kb")
    assert [(t.task_id, t.level, t.name) for t in tasks] == [
        ("kb-L1-1", 1, "Square_matrix_multiplication_"),
        ("kb-L1-2", 1, "Second"),
    ]


def test_dataset_round_trip_through_save_tasks(tmp_path):
    pytest.importorskip("datasets")
    tasks = builtin_tasks(names=["Softmax", "Gemm_ReLU_Divide"])
    back = load_tasks(save_tasks(tasks, tmp_path / "suite_ds"))
    assert [t.to_dict() for t in back] == [t.to_dict() for t in tasks]


def test_in_memory_dataset_dict_split_selects_one_level():
    datasets = pytest.importorskip("datasets")
    rows2 = dict(code=[FUSED], level=[2], name=["1_Matmul_ReLU"], problem_id=[1])
    dd = datasets.DatasetDict(
        {"level_1": datasets.Dataset.from_dict(_kernelbench_hub_rows()), "level_2": datasets.Dataset.from_dict(rows2)}
    )
    assert [t.task_id for t in load_tasks(dd)] == ["kb-L1-1", "kb-L1-2", "kb-L2-1"]
    assert [t.task_id for t in load_tasks(dd, split="level_2")] == ["kb-L2-1"]


def test_hub_id_goes_through_datasets_load_dataset(monkeypatch):
    datasets = pytest.importorskip("datasets")
    calls = []

    def fake_load_dataset(path, split=None, **kwargs):
        calls.append((path, split))
        ds = datasets.Dataset.from_dict(_kernelbench_hub_rows())
        return ds if split is not None else datasets.DatasetDict({"level_1": ds})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    everything = load_tasks("ScalingIntelligence/KernelBench")
    one_split = load_tasks("ScalingIntelligence/KernelBench", split="level_1")
    assert calls == [("ScalingIntelligence/KernelBench", None), ("ScalingIntelligence/KernelBench", "level_1")]
    assert [t.task_id for t in everything] == [t.task_id for t in one_split] == ["kb-L1-1", "kb-L1-2"]


def test_missing_absolute_path_raises(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        load_tasks(tmp_path / "nowhere" / "tasks.jsonl")


def test_importing_kevin_data_imports_neither_datasets_nor_transformers():
    code = "import sys, kevin.data; print('datasets' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
