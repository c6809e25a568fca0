"""Fixtures of the sandbox tests: small CPU tasks, candidate files, session-wide sandboxes.

Compiling one C++ extension takes ~35 s on a 2-core machine, so every sandbox here shares one
session-scoped cache directory, and the candidates whose hack is in Python all reuse one compiled honest
extension (``candidates/_relu_extension.py``, inlined by `load_candidate`); the C++-level hacks share
``candidates/_hack_extension.py``. The `warm_builds` fixture compiles the distinct extensions in parallel
once per session.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest

from kevin.data.task import Task
from kevin.sandbox import Sandbox, SandboxConfig

CANDIDATES = Path(__file__).parent / "candidates"
_INCLUDE = re.compile(r"^# include: (\S+)\s*$", re.MULTILINE)

RELU_SOURCE = '''\
import torch
import torch.nn as nn

batch_size = 64
dim = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
'''

ROW_SUM_SOURCE = RELU_SOURCE.replace("torch.relu(x)", "x.sum(dim=1)").replace("dim = 256", "dim = 1024")

LINEAR_RELU_SOURCE = '''\
import torch
import torch.nn as nn

batch_size = 32
in_features = 128
out_features = 64


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

RELU_TASK = Task("test_relu", RELU_SOURCE, level=1, name="ReLU")
ROW_SUM_TASK = Task("test_row_sum", ROW_SUM_SOURCE, level=1, name="Row sum")
LINEAR_RELU_TASK = Task("test_linear_relu", LINEAR_RELU_SOURCE, level=2, name="Linear + ReLU")


def load_candidate(name: str) -> str:
    """The source of ``candidates/<name>.py`` with its ``# include: file`` lines replaced by that file."""
    text = (CANDIDATES / f"{name}.py").read_text()
    return _INCLUDE.sub(lambda m: (CANDIDATES / m.group(1)).read_text(), text)


def _config(cache_dir: str, **overrides) -> SandboxConfig:
    base = dict(cache_dir=cache_dir, n_trials=20, n_warmup=2, timing_budget_s=2.0, run_timeout_s=120.0,
                compile_timeout_s=400.0, workers=2, seed=None)
    base.update(overrides)
    return SandboxConfig(**base)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> str:
    """A fresh build cache per session; ``KEVIN_TEST_CACHE_DIR`` reuses one across sessions (local iteration)."""
    return os.environ.get("KEVIN_TEST_CACHE_DIR") or str(tmp_path_factory.mktemp("kevin-cache"))


@pytest.fixture(scope="session")
def full_sandbox(cache_dir) -> Sandbox:
    """Every layer on: static checks, operator inventory, dynamic checks."""
    return Sandbox("cpu", _config(cache_dir))


@pytest.fixture(scope="session")
def inventory_sandbox(cache_dir) -> Sandbox:
    """Static checks bypassed: the runtime operator inventory and the dynamic checks must hold alone."""
    return Sandbox("cpu", _config(cache_dir, static_checks=False))


@pytest.fixture(scope="session")
def dynamic_sandbox(cache_dir) -> Sandbox:
    """Static checks and operator inventory bypassed: only the value, protocol and process checks."""
    return Sandbox("cpu", _config(cache_dir, static_checks=False, kernel_inventory=False))


@pytest.fixture(scope="session")
def warm_builds(full_sandbox, dynamic_sandbox):
    """Compile the three distinct test extensions at once; returns the honest results of that run."""
    results = {}

    def honest():
        results["relu"], results["linear_relu"] = full_sandbox.evaluate_many(
            [(RELU_TASK, load_candidate("honest_relu_cpu")), (LINEAR_RELU_TASK, load_candidate("honest_linear_relu_cpu"))]
        )

    def hacks():
        results["b5"] = dynamic_sandbox.evaluate(RELU_TASK, load_candidate("b5_uninitialized_output_cpp"))

    threads = [threading.Thread(target=honest), threading.Thread(target=hacks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
