"""Shared test configuration: the `gpu` marker skips where CUDA is absent; tests that share a session's compiled
builds run in one worker under ``pytest -n`` (pytest-xdist, ``--dist loadgroup``)."""

import pytest
import torch


# Session fixtures that hold a build cache or a live sandbox: the tests using one share its compiles only when
# they run in the same worker; every other test runs in the worker of its module.
SHARED_BUILDS = {"cache_dir": "sandbox", "full_sandbox": "sandbox", "inventory_sandbox": "sandbox",
                 "dynamic_sandbox": "sandbox", "warm_builds": "sandbox", "cpu_sandbox": "core_sandbox",
                 "real_rollout": "core_sandbox"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        groups = sorted({SHARED_BUILDS[f] for f in getattr(item, "fixturenames", ()) if f in SHARED_BUILDS})
        # otherwise its module: a module-scoped fixture runs once
        item.add_marker(pytest.mark.xdist_group(groups[0] if groups else item.nodeid.split("::")[0]))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (CUDA not available)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
