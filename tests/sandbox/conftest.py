"""Fixtures of the sandbox tests: small CPU tasks, candidate files, session-wide sandboxes.

Compiling one C++ extension takes ~35 s on a 2-core machine, so every sandbox here shares one
session-scoped cache directory, and the candidates whose hack is in Python all reuse one compiled honest
extension (``candidates/_relu_extension.py``, inlined by `load_candidate`); the C++-level hacks share
``candidates/_hack_extension.py``. The `warm_builds` fixture compiles the distinct extensions in parallel
once per session.
"""

from __future__ import annotations

import os
import threading

import pytest

from kevin.sandbox import Sandbox
from sandbox_cases import LINEAR_RELU_TASK, RELU_TASK, _config, load_candidate


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory, with_shared_compiles) -> str:
    """A fresh build cache per session; ``KEVIN_TEST_CACHE_DIR`` reuses one across sessions (local iteration)."""
    return os.environ.get("KEVIN_TEST_CACHE_DIR") or with_shared_compiles(tmp_path_factory.mktemp("kevin-cache"))


@pytest.fixture(scope="session")
def permute_kernel(tmp_path_factory):
    """The sandbox's CUDA permutation kernel (`kevin.sandbox.build.harness`), built, tried on the GPU and bound in
    this process's timing module, as a Sandbox does."""
    from kevin.sandbox.build import harness

    built = harness.build_permute(str(tmp_path_factory.mktemp("harness")), harness.default_arch())
    harness.check_launch(built, "cuda")
    return built


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
