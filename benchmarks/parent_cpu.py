"""The CPU time a `Sandbox`'s own process (its threads, not the candidates' processes) spends per judged kernel.

The policy decodes in that process in the pipelined loop, so the sandbox's Python there competes with it for the GIL.
A CPU sandbox judges the honest ReLU candidate once (build, golden), then batches of 8 and 16 copies that differ only
in a trailing comment (each judged afresh, its build from the cache); per batch: the wall time and the process's own
user + system seconds (``os.times``; children excluded).

    python benchmarks/parent_cpu.py [CACHE_DIR]
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "sandbox")]

from sandbox_cases import RELU_TASK, load_candidate  # noqa: E402

from kevin.sandbox import Sandbox, SandboxConfig  # noqa: E402


def main() -> None:
    cache = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="kevin-parent-cpu-")
    sandbox = Sandbox("cpu", SandboxConfig(workers=2, cache_dir=cache))
    src = load_candidate("honest_relu_cpu")
    start = time.perf_counter()
    first = sandbox.evaluate_many([(RELU_TASK, src)])[0]
    print(f"first: {first.status} in {time.perf_counter() - start:.1f}s (build and golden)", flush=True)
    for n in (8, 16):
        sandbox.forget_verdicts()
        jobs = [(RELU_TASK, f"{src}\n# copy {n}-{i}\n") for i in range(n)]
        before, start = os.times(), time.perf_counter()
        results = sandbox.evaluate_many(jobs)
        after, wall = os.times(), time.perf_counter() - start
        cpu = (after.user - before.user) + (after.system - before.system)
        print(f"{n} kernels: {dict(collections.Counter(r.status for r in results))} in {wall:.1f}s; the process's own "
              f"CPU {cpu:.2f}s ({cpu / n:.3f}s a kernel, {cpu / wall:.2f} cores)", flush=True)


if __name__ == "__main__":
    main()
