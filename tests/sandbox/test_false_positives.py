"""Honest CPU kernels are judged correct while busy processes hold every core (no false positives from the
wall-clock cross-check on a loaded host). benchmarks/sandbox_false_positives.py measures the same with the whole
corpus, compile load and timing attacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import honest

# few and small (each build takes tens of seconds here); the fast kernels are the ones a per-call slack hurts
FILES = ("cpu_relu", "cpu_layernorm_two_calls")
BUSY_BATCHES = 2


@pytest.fixture(scope="module")
def honest_cpu_jobs():
    return honest.jobs("cpu", FILES)


@pytest.fixture(scope="module")
def idle_batch(full_sandbox, honest_cpu_jobs):
    """The kernels built (into the suite's shared cache) and judged once before the cores are taken."""
    return full_sandbox.evaluate_many([(task, src) for _, task, src in honest_cpu_jobs])


@pytest.fixture
def busy_cores():
    """One busy-looping process per core, always stopped."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        time.sleep(0.5)
        yield len(procs)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def _describe(label: str, r) -> str:
    wall = r.details.get("wall_check")
    return f"{label}: {r.status}: {r.feedback.splitlines()[0] if r.feedback else ''} wall_check={json.dumps(wall, default=str)}"


@pytest.mark.slow
def test_honest_cpu_kernels_are_correct_while_every_core_is_busy(full_sandbox, honest_cpu_jobs, idle_batch, busy_cores):
    assert busy_cores >= 1
    results = [("idle", label, r) for (label, _, _), r in zip(honest_cpu_jobs, idle_batch)]
    for batch in range(BUSY_BATCHES):
        rs = full_sandbox.evaluate_many([(task, src) for _, task, src in honest_cpu_jobs])
        results += [(f"busy batch {batch}", label, r) for (label, _, _), r in zip(honest_cpu_jobs, rs)]
    rejected = [f"[{when}] " + _describe(label, r) for when, label, r in results if r.status != "correct"]
    assert not rejected, f"{len(rejected)} of {len(results)} honest evaluations rejected:\n" + "\n".join(rejected)
