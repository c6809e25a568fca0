"""How much slower is one CUDA unit's compile when 16 run at once? The host's ceiling on `evaluate_many`'s ratio.

Usage (on the machine to measure, after the sandbox has built a CUDA candidate into the cache, for example
``sandbox_gpu.py --phases warm``):

    python benchmarks/compile_scaling.py --cache-dir /tmp/kc --out OUT_DIR [--parallel 16] [--lone 3]

No sandbox, no GPU, no Python around the compiler: it copies the ninja file of one built extension (the newest
build directory under ``<cache>/ext`` whose ``build.ninja`` has a ``cuda.cuda.o`` edge; ``--prefer`` picks among
them by a word of the source) into fresh directories and runs ``ninja cuda.cuda.o`` there, the very command the
sandbox's build ran, with its flags and its prelude. First ``--lone`` compiles one after another, then
``--parallel`` compiles started together. A CPU-bound control does the same with a pure-Python loop, so a
slow-down of the compiles can be told apart from the host's clock.

Why it bounds the ratio: a worker must compile its candidate before its verdict, so ``--parallel`` workers on as
many new candidates take at least the longest of ``--parallel`` compiles at once, and one worker at most one lone
compile per candidate (its judging hides behind the next compile). The ratio of the two throughputs is then at
most ``parallel x lone_median / parallel_max`` with the judging free, for one batch of ``--parallel`` candidates
(``ratio_ceiling``), as ``evaluate_many`` is benchmarked. A long queue loses the lockstep, and its ceiling is
``parallel x lone_median / parallel_mean`` (``ratio_ceiling_queue``). Only the CUDA unit is timed: the link and
a ``main.o`` the object cache does not hold come on top, for one worker and for many.
Writes ``OUT_DIR/compile_scaling.json``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = "cuda.cuda.o"
SPIN = "import time\nt = time.perf_counter()\nx = 0\nfor i in range(15_000_000):\n    x += i * i\nprint(time.perf_counter() - t)"


def pick_build(cache_dir: str, prefer: str | None) -> Path:
    """The newest ``<cache>/ext/*`` directory whose ``build.ninja`` built ``cuda.cuda.o`` (from ``cuda.cu``)."""
    dirs = [Path(p).parent for p in glob.glob(os.path.join(cache_dir, "ext", "*", "build.ninja"))]
    dirs = [d for d in dirs if f"build {TARGET}:" in (d / "build.ninja").read_text() and (d / "cuda.cu").exists()
            and (d / TARGET).exists()]  # a build that compiled (not a failed light attempt or a compile error)
    if prefer:
        dirs = [d for d in dirs if prefer in (d / "cuda.cu").read_text()] or dirs
    if not dirs:
        raise SystemExit(f"no built CUDA extension under {cache_dir}/ext: run the sandbox on a CUDA candidate first")
    return max(dirs, key=lambda d: (d / "build.ninja").stat().st_mtime)


def fresh_copy(build: Path, root: Path, k: int) -> Path:
    """A new directory holding only the ninja file (its sources are absolute paths into ``build``)."""
    d = root / f"copy{k}"
    d.mkdir()
    shutil.copy(build / "build.ninja", d / "build.ninja")
    return d


def run_together(commands: list[list[str]], cwds: list[Path]) -> list[float]:
    """Start every command at once; the wall seconds of each, from the common start to its own exit. Each one's
    output goes to ``log.txt`` in its directory (a pipe nobody reads would stall a chatty compiler)."""
    t0 = time.perf_counter()
    logs = [open(w / f"log{k}.txt", "wb") for k, w in enumerate(cwds)]
    procs = [subprocess.Popen(c, cwd=w, stdout=f, stderr=subprocess.STDOUT) for c, w, f in zip(commands, cwds, logs)]
    ends = [0.0] * len(procs)
    pending = set(range(len(procs)))
    try:
        while pending:
            for i in list(pending):
                if procs[i].poll() is not None:
                    ends[i] = time.perf_counter() - t0
                    pending.discard(i)
            time.sleep(0.01)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for f in logs:
            f.close()
    for k, p in enumerate(procs):
        if p.returncode != 0:
            tail = (cwds[k] / f"log{k}.txt").read_text(errors="replace")[-2000:]
            raise SystemExit(f"{p.args} failed ({p.returncode}):\n{tail}")
    return ends


def summary(lone: list[float], together: list[float], parallel: int) -> dict:
    med = statistics.median(lone)
    return {"lone_s": [round(x, 3) for x in lone], "together_s": [round(x, 3) for x in sorted(together)],
            "lone_median_s": round(med, 3), "together_median_s": round(statistics.median(together), 3),
            "together_max_s": round(max(together), 3), "slowdown_median": round(statistics.median(together) / med, 3),
            "slowdown_max": round(max(together) / med, 3), "ratio_ceiling": round(parallel * med / max(together), 2),
            "ratio_ceiling_queue": round(parallel * med / statistics.mean(together), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--parallel", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--lone", type=int, default=3)
    ap.add_argument("--prefer", default="matmul", help="a word of the CUDA source to prefer among built extensions")
    args = ap.parse_args()
    if args.parallel < 1 or args.lone < 1:
        raise SystemExit("--parallel and --lone must be at least 1")
    ninja = shutil.which("ninja")
    if ninja is None:
        raise SystemExit("ninja is not on PATH (torch's extension builds need it too)")
    build = pick_build(args.cache_dir, args.prefer)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"build": str(build), "cpus": len(os.sched_getaffinity(0)), "parallel": args.parallel}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cmd = [ninja, TARGET]
        lone = []
        for k in range(args.lone):
            lone += run_together([cmd], [fresh_copy(build, root, k)])
            print(f"lone compile {k + 1}/{args.lone}: {lone[-1]:.2f} s", flush=True)
        dirs = [fresh_copy(build, root, args.lone + k) for k in range(args.parallel)]
        together = run_together([cmd] * args.parallel, dirs)
        print(f"{args.parallel} compiles at once: {min(together):.2f}-{max(together):.2f} s", flush=True)
        result["compile"] = summary(lone, together, args.parallel)
        spin = [sys.executable, "-c", SPIN]
        lone_spin = [run_together([spin], [root])[0] for _ in range(args.lone)]
        together_spin = run_together([spin] * args.parallel, [root] * args.parallel)
        result["python_loop"] = summary(lone_spin, together_spin, args.parallel)
    (out / "compile_scaling.json").write_text(json.dumps(result, indent=1))
    for k in ("compile", "python_loop"):
        s = result[k]
        print(f"{k}: lone median {s['lone_median_s']} s, {args.parallel} at once median {s['together_median_s']} s "
              f"max {s['together_max_s']} s; slow-down {s['slowdown_median']}x (median) {s['slowdown_max']}x (max); "
              f"ratio ceiling {s['ratio_ceiling']}x (one batch), {s['ratio_ceiling_queue']}x (a long queue)")


if __name__ == "__main__":
    main()
