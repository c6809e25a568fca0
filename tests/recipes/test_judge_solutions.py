"""recipes/judge_solutions.py: KernelBench-named solution files judged against their tasks on the CPU backend."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kevin.data import builtin_tasks

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = ROOT / "tests" / "sandbox" / "candidates"
HONEST_RELU = (CANDIDATES / "honest_relu_cpu.py").read_text().replace(
    "# include: _relu_extension.py", (CANDIDATES / "_relu_extension.py").read_text())
PYTORCH_LEAKY_RELU = """\
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return torch.nn.functional.leaky_relu(x, self.negative_slope)
"""


def _recipe():
    spec = importlib.util.spec_from_file_location("_recipe_judge_solutions", ROOT / "recipes" / "judge_solutions.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _kernelbench_level(root: Path) -> Path:
    """A KernelBench-style level folder holding the built-in ReLU (problem 19) and LeakyReLU (20) at CPU sizes."""
    level = root / "level1"
    level.mkdir(parents=True)
    for problem, name in ((19, "ReLU"), (20, "LeakyReLU")):
        (level / f"{problem}_{name}.py").write_text(builtin_tasks(names=[name])[0].source_for("cpu"))
    return level


def test_a_file_is_matched_by_kernelbench_sample_name_task_file_name_or_task_id(tmp_path):
    from kevin.data import load_tasks

    judge = _recipe()
    tasks = load_tasks(_kernelbench_level(tmp_path)) + builtin_tasks(names=["ReLU"])
    assert judge.match("level_1_problem_19_sample_3_kernel", tasks)[0].task_id == "kb-L1-19"
    assert judge.match("20_LeakyReLU", tasks)[0].task_id == "kb-L1-20"
    assert judge.match("kevin-L1-ReLU", tasks)[0].task_id == "kevin-L1-ReLU"
    assert judge.match("level_2_problem_19_sample_0_kernel", tasks)[0] is None  # no level 2 here
    assert judge.match("20_ReLU", tasks)[0] is None  # the number and the name must both agree
    level2 = tmp_path / "more" / "level2"
    level2.mkdir(parents=True)
    (level2 / "19_ReLU.py").write_text((tmp_path / "level1" / "19_ReLU.py").read_text())
    assert judge.match("19_ReLU", tasks + load_tasks(tmp_path / "more")) == (None, "ambiguous: kb-L1-19, kb-L2-19")


@pytest.mark.parametrize("args, message", [
    (["--tasks", "builtin"], "both --tasks and --solutions are needed"),
    (["--tasks", "builtin", "--solutions", "{tmp}/nowhere"], "nowhere: not a folder"),
    (["--tasks", "builtin", "--solutions", "{tmp}"], "holds no .py solution files"),
    (["--tasks", "{tmp}/missing.jsonl", "--solutions", "{tmp}/sol"], "missing.jsonl: no such file or folder"),
    (["--tasks", "{tmp}/sol", "--solutions", "{tmp}/sol"], "no KernelBench level folders"),
])
def test_a_bad_folder_or_task_spec_is_a_one_line_error(tmp_path, args, message):
    (tmp_path / "sol").mkdir()
    (tmp_path / "sol" / "kevin-L1-ReLU.py").write_text(HONEST_RELU)
    with pytest.raises(SystemExit, match=message) as caught:
        _recipe().main([a.format(tmp=tmp_path) for a in args])
    assert "\n" not in str(caught.value)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_solutions_are_judged_against_their_tasks_and_unmatched_files_are_listed(tmp_path, with_shared_compiles):
    level = _kernelbench_level(tmp_path / "kb")
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    (solutions / "level_1_problem_19_sample_0_kernel.py").write_text(HONEST_RELU)  # the one compile
    (solutions / "20_LeakyReLU.py").write_text(PYTORCH_LEAKY_RELU)  # PyTorch's own op: not a kernel
    (solutions / "scratch_notes.py").write_text("# not a solution of any task\n")
    out = tmp_path / "judged"
    env = {**os.environ, "KEVIN_CACHE_DIR": with_shared_compiles(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, str(ROOT / "recipes" / "judge_solutions.py"), "--tasks", str(level),
                           "--solutions", str(solutions), "--rules", "kevin", "--device", "cpu",
                           "--output_dir", str(out)], capture_output=True, text=True, env=env, timeout=550)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["file"]: r for r in map(json.loads, (out / "judged.jsonl").read_text().splitlines())}
    assert {f: (r["task"], r["status"]) for f, r in rows.items()} == {
        "level_1_problem_19_sample_0_kernel.py": ("kb-L1-19", "correct"),
        "20_LeakyReLU.py": ("kb-L1-20", "format_error"),
        "scratch_notes.py": (None, "unmatched"),
    }
    honest = rows["level_1_problem_19_sample_0_kernel.py"]
    assert honest["speedup"]["eager"] > 0 and honest["runtime_ms"] > 0 and honest["feedback"]
    assert "unmatched: scratch_notes.py" in proc.stderr
    text = (out / "judged.md").read_text()
    assert "2 solutions judged under the kevin rules: correct 1/2 (50.0%)" in text
    assert "| kb-L1-19 | level_1_problem_19_sample_0_kernel.py | correct |" in text
