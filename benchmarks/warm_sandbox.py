"""Fill a sandbox's disk caches before an RL run: the precompiled header and the builds of the corpus's kernels.

A run's first step otherwise pays for every cold build at once (the PCH, then each first compile). The warm start
trains on the GPU while the CPU cores sit idle; this script uses them: it judges every first-turn answer of the
corpus for the given tasks (slow, fast and flawed) with speed not measured, so their builds land in the cache
that the RL run's sandbox reads (``KEVIN_CACHE_DIR``). Goldens live in a sandbox's memory and are not kept.

    python benchmarks/warm_sandbox.py --tasks "builtin:GELU,Conv3d" --backend cuda
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from kevin.data.builtin import tasks_from_spec  # noqa: E402
from kevin.data.corpus import kernel_answers  # noqa: E402
from kevin.sandbox import Sandbox, SandboxConfig  # noqa: E402
from kevin.sandbox.build import extension, pch  # noqa: E402


def light_coverage(cache_dir: str) -> tuple[int, int]:
    """(CUDA units tried with the light prelude, those of them that failed it and were built as written): every unit in
    the cache's ``ext`` directory, earlier runs' included when the cache is reused."""
    units = [p for p in Path(cache_dir, "ext").glob("*/cuda.cu")
             if p.read_text(errors="replace").startswith(extension.LIGHT_MARK)]
    return len(units), sum((p.parent / extension.LIGHT_FAILED).exists() for p in units)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="builtin", help='"builtin", "builtin:<name>,...", or a task file')
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--workers", type=int, default=None, help="compile workers (default: all cores)")
    parser.add_argument("--deadline_s", type=float, default=None,
                        help="stop the kernels not judged by then, their compiles included (default: none); the "
                             "precompiled header's build is waited for in any case")
    args = parser.parse_args()

    tasks = tasks_from_spec(args.tasks)
    jobs = [(task, answer.code) for task in tasks for answer in kernel_answers(task, args.backend) if answer.code]
    # with the precompiled headers, as the training recipes' sandboxes (the CPU's default is without)
    config = SandboxConfig(measure_speed=False, precompiled_header=True,
                           **({"workers": args.workers} if args.workers else {}))
    sandbox = Sandbox("cuda" if args.backend == "cuda" else "cpu", config)
    start = time.monotonic()
    print(f"judging {len(jobs)} corpus kernels of {len(tasks)} tasks", flush=True)
    results = sandbox.evaluate_many(jobs, deadline_s=args.deadline_s)
    counts = collections.Counter(r.status for r in results)
    print(f"judged in {time.monotonic() - start:.1f} s: {dict(counts)}", flush=True)
    # the sandbox builds the precompiled header in a background thread: `ensure`, the same call, returns once that
    # build is in the cache (it waits on the build's lock), whatever the deadline. An exit mid-build would leave its
    # compiler running on its own, and the next sandbox would build it again beside it.
    pch.ensure(sandbox.cache_dir, sandbox.backend)
    print(f"done in {time.monotonic() - start:.1f} s (the precompiled headers built)", flush=True)
    compiles = sorted(float((r.details.get("phase_seconds") or {}).get("compile", 0.0)) for r in results
                      if (r.details.get("phase_seconds") or {}).get("compile"))
    if compiles:
        print(f"compile seconds of {len(compiles)} kernels: median {compiles[len(compiles) // 2]:.1f}, "
              f"max {compiles[-1]:.1f}", flush=True)
    if sandbox.backend == "cuda":
        tried, failed = light_coverage(sandbox.cache_dir)
        print(f"light prelude: {tried} CUDA units tried, {failed} of them built as written instead", flush=True)


if __name__ == "__main__":
    main()
