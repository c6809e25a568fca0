"""Fixtures of the rollout / policy tests: the scripted-policy fakes, a CPU sandbox, an add task.

``fakes.py`` is registered as the module ``core_fakes`` so test files can import it by a name no other
test folder can shadow.
"""

import importlib.util
import pathlib
import sys

import pytest

_spec = importlib.util.spec_from_file_location("core_fakes", pathlib.Path(__file__).with_name("fakes.py"))
core_fakes = importlib.util.module_from_spec(_spec)
sys.modules["core_fakes"] = core_fakes
_spec.loader.exec_module(core_fakes)

ADD_SOURCE = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    """out = a + b"""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a + b


N = 1 << 20


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
'''


@pytest.fixture(scope="session")
def add_task():
    from kevin.data.task import Task

    return Task("add", ADD_SOURCE, level=1, name="elementwise add", sizes={"cpu": {"N": 4096}})


@pytest.fixture(scope="session")
def cpu_sandbox(tmp_path_factory, with_shared_compiles):
    """The real CPU sandbox, with a compile cache private to this test session (each source builds once)."""
    sandbox_mod = pytest.importorskip("kevin.sandbox", reason="kevin.sandbox.Sandbox not available")
    if not hasattr(sandbox_mod, "Sandbox"):
        pytest.skip("kevin.sandbox.Sandbox not available yet")
    from kevin.sandbox.config import SandboxConfig

    cache = with_shared_compiles(tmp_path_factory.mktemp("kevin-sandbox-cache"))
    # 50 timed calls, not 5: over 6 calls on a busy 2-core machine the wall clock implied 1.26 ms per call for a
    # 0.05 ms kernel, and the wall-clock check judged the honest kernel incorrect
    config = SandboxConfig(cache_dir=str(cache), n_trials=50, n_warmup=1, timing_budget_s=2.0, workers=2)
    return sandbox_mod.Sandbox(device="cpu", config=config)


@pytest.fixture(scope="session")
def real_rollout(add_task, cpu_sandbox):
    """1 task x 2 trajectories x 2 turns of a scripted policy against the real CPU sandbox.

    Turn 1: trajectory 0 answers an honest C++ add kernel (the prompt's own example program), trajectory 1
    answers junk (a parse failure). Turn 2: both answer the honest kernel (already compiled: cache hit).
    Returns (policy, trajectories).
    """
    from kevin.core.rollout import rollout
    from kevin.data.prompts import EXAMPLE_CPU

    honest = core_fakes.response("Okay, a plain loop.", EXAMPLE_CPU, "A scalar C++ loop adds the inputs.")
    junk = "Okay, I will think about it later."
    policy = core_fakes.ScriptedPolicy([lambda i: honest if i == 0 else junk, honest])
    trajectories = rollout(policy, [add_task], cpu_sandbox, n_trajectories=2, n_turns=2, backend="cpu", progress=False)
    return policy, trajectories
