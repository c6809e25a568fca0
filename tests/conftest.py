"""Shared test configuration: the `gpu` marker skips where CUDA is absent; tests that share a session's compiled
builds run in one worker under ``pytest -n`` (pytest-xdist, ``--dist loadgroup``)."""

import os
from pathlib import Path

import pytest
import torch


# Session fixtures that hold a build cache or a live sandbox: the tests using one share its compiles only when
# they run in the same worker; every other test runs in the worker of its module.
SHARED_BUILDS = {"cache_dir": "sandbox", "full_sandbox": "sandbox", "inventory_sandbox": "sandbox",
                 "dynamic_sandbox": "sandbox", "warm_builds": "sandbox", "cpu_sandbox": "core_sandbox",
                 "real_rollout": "core_sandbox"}


# Groups that take minutes (``--durations``), handed out first, so that neither worker ends the run alone with one
# of them; xdist would otherwise hand out the groups with the most tests first, and these have few.
LONG_GROUPS = ("tests/recipes/test_learning.py", "tests/core/policy/engine/test_decoding.py", "sandbox")


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order the hook below gives
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    group_of = {}
    for item in items:
        groups = sorted({SHARED_BUILDS[f] for f in getattr(item, "fixturenames", ()) if f in SHARED_BUILDS})
        # otherwise its module: a module-scoped fixture runs once
        group_of[item] = groups[0] if groups else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group_of[item]))
    if hasattr(config, "workerinput"):  # an xdist worker: its collection order is the order groups are handed out
        rank = {g: i for i, g in enumerate(LONG_GROUPS)}
        items.sort(key=lambda item: rank.get(group_of[item], len(LONG_GROUPS)))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (CUDA not available)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def with_shared_compiles(tmp_path_factory):
    """A function that makes a build cache directory sharing the run's one precompiled ``<torch/extension.h>`` (CPU,
    ``-O3``, the test extensions' flags) and, unless ``objects=False``, the run's one object cache: both built once
    for both xdist workers (a ``flock`` lets one build while the other waits) and linked into every cache that asks.
    The suite's C++ builds then skip parsing torch's headers (about half of each compile; `kevin.sandbox.build.pch`),
    and a ``main.cpp`` compiled by one test is served to the others (`kevin.sandbox.build.objcache`, which keys each
    object by everything it depends on, as it does for the sandboxes of one training run). The sandbox finds them
    at ``<cache>/pch`` and ``<cache>/obj``; builds are byte-identical with and without either. A test that counts
    what the object cache stores or compiles asks for its own (``objects=False``)."""
    from kevin.sandbox.build import pch

    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "kevin-shared-compiles"
    shared.mkdir(exist_ok=True)
    pch.ensure(str(shared), "cpu", variants=(("-O3",),))
    (shared / "obj").mkdir(exist_ok=True)

    def make(cache: str | os.PathLike, objects: bool = True) -> str:
        Path(cache).mkdir(parents=True, exist_ok=True)
        links = {"pch": Path(pch.root(str(shared)))} | ({"obj": shared / "obj"} if objects else {})
        for name, target in links.items():
            if not (Path(cache) / name).exists():
                (Path(cache) / name).symlink_to(target, target_is_directory=True)
        return str(cache)
    return make
