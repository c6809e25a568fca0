"""The sandbox on a GPU: compile time, per-candidate overhead, throughput, timing noise, vs do_bench.

Usage (on a CUDA machine, from the repository root):

    TORCH_CUDA_ARCH_LIST=9.0 python benchmarks/sandbox_gpu.py --out OUT_DIR

Writes ``OUT_DIR/sandbox_gpu.json`` and ``OUT_DIR/sandbox_gpu.md`` after every phase (so a run cut short
still leaves what it measured). Phases (``--phases``), on the honest tiled fp32 matmul of tests/sandbox
(N = 2048):

0. ``cold``: a never-built variant of it with a 1-worker sandbox: compile + evaluation wall time (the
   later phases then use that same source, so nothing else is compiled);
1. ``warm``: one evaluation with a warm build cache, then a second one: per-candidate seconds outside nvcc, split
   into process start + load, the run (correctness + timing) and the kernel work itself;
2. ``noise``: timing noise: the reported runtime of 5 separate evaluations (fresh processes), coefficient of variation;
3. ``dobench``: the same kernel under ``triton.testing.do_bench`` (median) in this process, against our median;
4. ``many`` / ``one``: ``evaluate_many`` on ``--n-many`` distinct sources (one comment differs, so each is a new build) with
   ``--workers`` compile workers, then on ``--n-single`` other distinct sources with 1 worker:
   throughput (candidates per second) and compile seconds per kernel. With ``--steady``, each Sandbox first
   evaluates one already-built source, so the timed batch excludes the zygote's start and the golden data (a
   Sandbox kept across rollout turns pays those once); compare 1 and N workers on several candidates each.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CANDIDATES = ROOT / "tests" / "sandbox" / "candidates"

from kevin.data.task import Task  # noqa: E402
from kevin.sandbox import Sandbox, SandboxConfig  # noqa: E402

MATMUL_SOURCE = """\
import torch
import torch.nn as nn

N = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
"""
TASK = Task("bench_matmul_2048", MATMUL_SOURCE, level=1, name="Square matmul 2048 (fp32)")


def load_candidate(name: str) -> str:
    text = (CANDIDATES / f"{name}.py").read_text()
    return re.sub(r"^# include: (\S+)\s*$", lambda m: (CANDIDATES / m.group(1)).read_text(), text, flags=re.MULTILINE)


def variant(src: str, tag: str, bindings: str = "shared") -> str:
    """The same kernel with a different comment in its CUDA source: a distinct build. ``bindings="distinct"`` also
    gives the extension its own name, so its ``main.cpp`` differs too (``-DTORCH_EXTENSION_NAME``) and the object
    cache (kevin/sandbox/build/objcache.py) cannot share it: the worst case, trajectories that name their modules apart."""
    out = src.replace('cuda_honest_source = r"""\n', f'cuda_honest_source = r"""\n// variant {tag}\n', 1)
    if bindings == "distinct":
        suffix = re.sub(r"\W", "_", tag)
        out = out.replace('name="kevin_test_honest_cuda"', f'name="kevin_test_honest_cuda_{suffix}"', 1)
    return out


def summarize(r) -> dict:
    d = r.details
    return {
        "status": r.status, "runtime_ms": r.runtime_ms, "baseline_ms": r.baseline_ms, "speedup": r.speedup,
        "compile_seconds": d.get("compile_seconds"), "run_seconds": d.get("run_seconds"),
        "seconds_to_outputs": d.get("seconds_to_outputs"), "total_seconds": d.get("total_seconds"),
        "phase_seconds": d.get("phase_seconds"),
        "n_trials": (d.get("timing") or {}).get("n_trials"), "feedback": r.feedback[:2000],
    }


def unit_seconds(cache_dir: str, since: float) -> dict:
    """Seconds per translation unit of the builds ninja finished after ``since`` (epoch seconds), from each build
    directory's ``.ninja_log`` (start and end ms of every output): {output name: [seconds, ...]}."""
    units: dict = {}
    for log in Path(cache_dir, "ext").glob("*/.ninja_log"):
        if log.stat().st_mtime < since:
            continue
        for line in log.read_text().splitlines()[1:]:  # "# ninja log v5", then start, end, mtime, output, hash
            fields = line.split("\t")
            if len(fields) >= 4:
                units.setdefault(fields[3], []).append(round((int(fields[1]) - int(fields[0])) / 1e3, 2))
    return {name: sorted(v) for name, v in units.items()}


def sm_clock_mhz() -> int | None:
    """The GPU's current SM clock from nvidia-smi (None when it cannot be read)."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=10).stdout
        return int(out.strip().splitlines()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def preludes(cache_dir: str, since: float) -> dict:
    """How the CUDA units built after ``since`` began: {"light": n, "full": n, "light_failed": n}."""
    from kevin.sandbox.build.extension import LIGHT_FAILED, LIGHT_MARK

    counts = {"light": 0, "full": 0, "light_failed": 0}
    for cu in Path(cache_dir, "ext").glob("*/cuda.cu"):
        if cu.stat().st_mtime >= since:
            counts["light" if cu.read_text().startswith(LIGHT_MARK) else "full"] += 1
            counts["light_failed"] += (cu.parent / LIGHT_FAILED).exists()
    return counts


def write(out: Path, results: dict) -> None:
    (out / "sandbox_gpu.json").write_text(json.dumps(results, indent=2))
    lines = ["# Sandbox on the GPU", "", f"device: {results.get('device')}", ""]
    for key, value in results.items():
        if key in ("device",):
            continue
        lines.append(f"## {key}")
        lines.append("```")
        lines.append(json.dumps(value, indent=2))
        lines.append("```")
        lines.append("")
    (out / "sandbox_gpu.md").write_text("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--n-many", type=int, default=16)
    ap.add_argument("--n-single", type=int, default=2)
    ap.add_argument("--cv-runs", type=int, default=5)
    ap.add_argument("--phases", default="warm,noise,dobench,many,one",
                    help="comma list of cold, warm, noise, dobench, many, one")
    ap.add_argument("--prefork", choices=("auto", "on", "off"), default="auto",
                    help="candidate processes forked from a zygote (auto: the config default)")
    ap.add_argument("--steady", action="store_true",
                    help="many/one: before the timed batch, one evaluate_many of an already-built source on the same "
                         "Sandbox (zygote started, golden data cached), so throughput is the steady state of a "
                         "Sandbox kept across rollout turns, not the first call's start-up")
    ap.add_argument("--bindings", choices=("shared", "distinct"), default="shared",
                    help="many/one: the candidates declare the same functions under one extension name (shared: their "
                         "main.cpp is one unit, compiled once by the object cache) or each its own name (distinct)")
    ap.add_argument("--parallel-checks", choices=("on", "off"), default="on",
                    help="SandboxConfig.parallel_checks for the many/one phases")
    ap.add_argument("--light-prelude", choices=("on", "off"), default="on",
                    help="SandboxConfig.light_prelude for the many/one phases (the CUDA unit's lighter prelude)")
    ap.add_argument("--launch-cover-us", type=float, default=None,
                    help="SandboxConfig.launch_cover_us (the GPU-side wait after the flush; default: the config's)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch

    phases = set(args.phases.split(","))
    prefork = {"auto": SandboxConfig().prefork, "on": True, "off": False}[args.prefork]
    cover = {} if args.launch_cover_us is None else {"launch_cover_us": args.launch_cover_us}
    config = SandboxConfig(workers=args.workers, n_warmup=5, n_trials=100, timing_budget_s=10.0, prefork=prefork,
                           reuse_verdicts=False, **cover)
    results: dict = {"device": torch.cuda.get_device_name(0), "command": " ".join(sys.argv),
                     "config": {"n_warmup": 5, "n_trials": 100, "workers": args.workers,
                                "cache_dir": config.resolved_cache_dir(), "prefork": config.prefork,
                                "launch_cover_us": config.launch_cover_us}}
    honest = load_candidate("honest_matmul_cuda")
    sandbox = Sandbox("cuda", config)

    # 0. one new source with one compile worker (all cores for its build): compile + evaluation wall time
    if "cold" in phases:
        honest = variant(honest, f"cold-{time.time_ns()}")
        t = time.monotonic()
        cold_config = SandboxConfig(workers=1, n_warmup=5, n_trials=100, timing_budget_s=10.0, prefork=prefork, **cover)
        cold = Sandbox("cuda", cold_config).evaluate(TASK, honest)
        wall = time.monotonic() - t
        results["cold_single_worker"] = dict(summarize(cold), wall_seconds=round(wall, 3), candidates_per_second=round(1 / wall, 4))
        print("cold", results["cold_single_worker"], flush=True)
        write(out, results)

    # 1. per-candidate overhead outside nvcc
    if "warm" in phases:
        t = time.monotonic()
        first = sandbox.evaluate(TASK, honest)
        results["first_evaluation"] = dict(summarize(first), wall_seconds=round(time.monotonic() - t, 3))
        t = time.monotonic()
        second = sandbox.evaluate(TASK, honest)
        wall = time.monotonic() - t
        n_calls = config.n_input_sets + config.n_warmup + ((second.details.get("timing") or {}).get("n_trials") or 0)
        work_s = n_calls * (second.runtime_ms or 0) / 1e3
        results["warm_evaluation"] = dict(summarize(second), wall_seconds=round(wall, 3), kernel_work_seconds=round(work_s, 3),
                                          overhead_beyond_work_seconds=round(wall - work_s, 3))
        print("warm evaluation", results["warm_evaluation"], flush=True)
        write(out, results)

    # 2. timing noise over separate evaluations
    valid: list = []
    if "noise" in phases:
        runtimes, walls, spreads, clocks, launches, tails, waited, late = [], [], [], [], [], [], [], []
        for _ in range(args.cv_runs):
            clocks.append(sm_clock_mhz())
            t = time.monotonic()
            r = sandbox.evaluate(TASK, honest)
            walls.append(round(time.monotonic() - t, 3))
            runtimes.append(r.runtime_ms)
            launches.append((r.details.get("timing") or {}).get("launch_p90_ms"))
            tails.append((r.details.get("timing") or {}).get("n_tail"))
            waited.append((r.details.get("timing") or {}).get("n_waited"))
            late.append((r.details.get("timing") or {}).get("n_late"))
            samples = sorted((r.details.get("timing") or {}).get("samples_ms") or [])
            if samples:  # within one evaluation: 10th, 50th and 90th percentile of its timed calls
                spreads.append([round(samples[int(q * (len(samples) - 1))], 4) for q in (0.1, 0.5, 0.9)])
        valid = [x for x in runtimes if x is not None]
        cv = statistics.pstdev(valid) / statistics.mean(valid) if len(valid) > 1 else None
        results["timing_noise"] = {"runtimes_ms": runtimes, "wall_seconds": walls, "p10_p50_p90_ms": spreads,
                                   "sm_clock_mhz_before": clocks, "launch_p90_ms": launches, "n_tail": tails,
                                   "n_waited": waited, "n_late": late, "mean_ms": statistics.mean(valid) if valid else None,
                                   "cv": cv, "cv_percent": None if cv is None else round(100 * cv, 3)}
        print("timing noise", results["timing_noise"], flush=True)
        write(out, results)

    # 3. against triton.testing.do_bench, same kernel, same build
    if "dobench" in phases:
        try:
            results["do_bench"] = do_bench_comparison(honest, config, valid)
        except Exception as exc:  # noqa: BLE001 - record, keep going
            results["do_bench"] = {"error": repr(exc)}
        print("do_bench", results["do_bench"], flush=True)
        write(out, results)

    # 4. evaluate_many throughput: many workers, then one
    for label, n, workers in (("many_workers", args.n_many, args.workers), ("one_worker", args.n_single, 1)):
        if label.split("_")[0] not in phases:
            continue
        sb = Sandbox("cuda", SandboxConfig(workers=workers, n_warmup=5, n_trials=100, timing_budget_s=10.0, prefork=prefork, **cover,
                                           reuse_verdicts=False,
                                           parallel_checks=args.parallel_checks == "on",
                                           light_prelude=args.light_prelude == "on"))
        stamp = f"{label}-{time.time_ns()}"
        warm_s = None
        if args.steady:  # the warm-up source is built here once (or found in the build cache)
            t = time.monotonic()
            sb.evaluate_many([(TASK, variant(honest, "steady-warm-up"))])
            warm_s = round(time.monotonic() - t, 2)
        jobs = [(TASK, variant(honest, f"{stamp}-{i}", args.bindings)) for i in range(n)]
        started = time.time()
        t = time.monotonic()
        rs = sb.evaluate_many(jobs)
        wall = time.monotonic() - t
        compile_s = [r.details.get("compile_seconds") for r in rs]
        results[f"evaluate_many_{label}"] = {
            "workers": workers, "candidates": n, "wall_seconds": round(wall, 2), "steady": args.steady,
            "bindings": args.bindings,
            "warm_up_seconds": warm_s,
            "candidates_per_second": round(n / wall, 4), "statuses": [r.status for r in rs],
            "compile_seconds": compile_s,
            "compile_seconds_median": statistics.median([c for c in compile_s if c is not None]) if any(compile_s) else None,
            "parallel_checks": args.parallel_checks == "on",
            "light_prelude": args.light_prelude == "on",
            "preludes": preludes(config.resolved_cache_dir(), started),
            # per candidate: seconds since its pipeline started (all start together) at each stage
            "timelines": [r.details.get("timeline") for r in rs],
            # ninja's own seconds per unit: main.o (the binding, precompiled header) and cuda.cuda.o (nvcc)
            "unit_seconds": unit_seconds(config.resolved_cache_dir(), started),
        }
        print(label, results[f"evaluate_many_{label}"], flush=True)
        write(out, results)
    many, one = results.get("evaluate_many_many_workers"), results.get("evaluate_many_one_worker")
    if many and one:
        results["throughput_ratio"] = {
            "ratio": round(many["candidates_per_second"] / one["candidates_per_second"], 2),
            "target": f">= {0.8 * args.workers:.1f} (0.8 x {args.workers} workers)",
        }
        write(out, results)
    print(json.dumps(results, indent=2))


def do_bench_comparison(honest_src: str, config: SandboxConfig, our_runtimes: list) -> dict:
    """Load the same cached build in this process and time it with triton.testing.do_bench (median)."""
    import torch
    import triton.testing

    from kevin.sandbox.build import extension as _extension

    _extension.install(os.path.join(config.resolved_cache_dir(), "ext"), "cuda")
    namespace: dict = {"__name__": "bench_candidate"}
    exec(compile(honest_src, "<candidate>", "exec"), namespace)
    ext = namespace["cuda_honest_extension"]
    a = torch.randn(2048, 2048, device="cuda")
    b = torch.randn(2048, 2048, device="cuda")
    ours = statistics.median(our_runtimes) if our_runtimes else None
    kernel = triton.testing.do_bench(lambda: ext.matmul_forward(a, b), warmup=100, rep=1000, return_mode="median")
    torch_ms = triton.testing.do_bench(lambda: torch.matmul(a, b), warmup=100, rep=1000, return_mode="median")
    return {"do_bench_median_ms": kernel, "ours_median_ms": ours,
            "ours_over_do_bench": None if ours is None else round(ours / kernel, 4),
            "do_bench_torch_matmul_ms": torch_ms}


if __name__ == "__main__":
    main()
