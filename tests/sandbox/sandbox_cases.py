"""The sandbox tests' shared cases: small CPU tasks, the candidate files and a test config.

Imported by name (``from sandbox_cases import ...``), never as ``conftest``: several test folders have a
``conftest.py``, and ``from conftest import`` would pick whichever one was imported first.
"""

from __future__ import annotations

import re
from pathlib import Path

from kevin.data.task import Task
from kevin.sandbox import SandboxConfig

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
    # 100 timed calls: the wall-clock check tolerates about 0.65 ms per call for a 0.05 ms kernel, so over 22 calls
    # one 15 ms scheduler pause on this 2-core machine judged an honest kernel incorrect; over 105 it takes 70 ms
    # reuse_verdicts off: the session's sandboxes are shared, and each test judges its own candidate (test_verdicts.py
    # tests the reuse); recheck_baseline_speedup off: a second timing of the reference would make a test's baseline
    # depend on which candidate came first (test_baselines.py tests the recheck)
    base = dict(cache_dir=cache_dir, n_trials=100, n_warmup=5, timing_budget_s=2.0, run_timeout_s=120.0,
                compile_timeout_s=400.0, workers=2, seed=None, reuse_verdicts=False, recheck_baseline_speedup=None)
    base.update(overrides)
    return SandboxConfig(**base)
