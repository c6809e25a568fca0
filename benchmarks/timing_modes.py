"""Why does one evaluation time the benchmark's matmul at ~1.90 ms and another at ~2.00 ms? (stop 16)

Usage (on a CUDA machine, from the repository root, after ``sandbox_gpu.py`` has built the honest matmul
into the cache, or with a cold cache: the parent builds it first):

    TORCH_CUDA_ARCH_LIST=9.0 python benchmarks/timing_modes.py --out OUT_DIR [--children 8]

Each child is a fresh interpreter (``subprocess``, not a fork) that loads the same built library and times
the honest tiled matmul and ``torch.matmul`` on 2048 x 2048 fp32 inputs under protocols that add one
ingredient of ``kevin.sandbox.timing.time_calls`` at a time:

- ``do_bench``: ``triton.testing.do_bench`` median (fixed inputs, its own 256 MB flush, no synchronize);
- ``fixed_nosync``: flush; start; call; end (fixed inputs);
- ``fixed``: flush; start; call; synchronize; end (fixed inputs): stop 15's window, no fresh inputs;
- ``fresh1``: ``time_calls`` on a pool of one set (the task's distribution), with no launch cover (in run 24,
  stop 15's ``time_calls``: synchronize, then the end event, its latency subtracted; the ``fresh*`` rows of a
  later run use the ``time_calls`` of their day);
- ``fresh1_recycle``: the same with ``keep_alive_bytes=0`` (the allocator reuses the same few buffers);
- ``fresh4``: ``time_calls`` on the four variant sets (task, signed, scaled, heavy), as a candidate's timing
  does; every call's set and whether it reused the previous call's buffers are recorded.

``fresh4`` runs first and last, so a mode that holds for a whole process shows twice. Children get seeds
0..3, then 0..3 again (a mode tied to the input content repeats with the seed). Writes
``OUT_DIR/timing_modes_ladder.json`` (and ``.txt``; run 24 wrote them as ``timing_modes.json``/``.txt``).

``--mode interleave`` (``torch.matmul`` only, nothing to build): one loop of 600 calls per child that cycles
through window variants call by call, so a mode that comes and goes in time hits every variant alike:

- ``ours``: persisting-L2 reset; flush; start; call; synchronize; end (stop 15's window, fixed inputs);
- ``noreset``: the same without the persisting-L2 reset;
- ``sleep``: flush; a GPU-side spin of ``--sleep-us`` (``torch.cuda._sleep``); start; call; synchronize; end;
- ``nosync``: flush; start; call; end.

Per call it records the host's time from just before the start event's record to the return of the call (the
launch path the flush is meant to hide) and the CPU it ran on. Run 25's sleep was calibrated on the host's clock
(first spin included), so its ``sleep`` rows waited about 11 us in the first child and about 140 us in the others
(at 1980 cycles per us); the spin is now calibrated with ``kevin.sandbox.timing.sleep_cycles_per_ms``.

``--mode setup`` (this process, ``torch.matmul``, nothing to build; written in stop 16, not yet run): why is the
host side of a candidate's process slow (launch 0.07-0.22 ms at the 90th percentile, against 0.02-0.05 ms here)?
Applies the candidate process's setup one step at a time (the dispatch-mode warm-up and its torch._dynamo
import, one profiler session as around a recheck, the deterministic mode on and off, four more profiler
sessions) and after each runs ``time_calls`` with the default cover: launch p90, ``n_waited``, ``n_late``, median.

``--mode sweep`` (this process, nothing to build): ``time_calls`` with no cover and with ``--sleep-us`` of cover,
against ``do_bench``, for PyTorch operations from a few microseconds to milliseconds (ReLU of 64K to 64M
elements, square matmuls of 1024 to 4096, and a four-operation Python forward), each protocol run twice in turn.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def sm_clock_mhz() -> int | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        return int(out.split()[0])
    except Exception:
        return None


def load_extension(cache_dir: str):
    from sandbox_gpu import load_candidate

    from kevin.sandbox import _extension

    _extension.install(os.path.join(cache_dir, "ext"), "cuda")
    namespace: dict = {"__name__": "bench_candidate"}
    exec(compile(load_candidate("honest_matmul_cuda"), "<candidate>", "exec"), namespace)
    return namespace["cuda_honest_extension"]


class RecordingPool(list):
    """A pool that records which set each call took (FreshInputs indexes it once per ordinary call)."""

    def __init__(self, sets):
        super().__init__(sets)
        self.taken: list[int] = []

    def __getitem__(self, i):
        if isinstance(i, int):
            self.taken.append(i)
        return super().__getitem__(i)


def child(seed: int, cache_dir: str) -> dict:
    import torch
    import triton.testing

    from kevin.sandbox import timing
    from kevin.sandbox._inputs import VARIANTS, apply_variant

    dev = torch.device("cuda")
    ext = load_extension(cache_dir)
    torch.manual_seed(seed)
    base = [torch.randn(2048, 2048), torch.randn(2048, 2048)]
    gen = torch.Generator().manual_seed(seed + 1)
    sets = [[t.to(dev) for t in apply_variant(base, v, gen)] for v in VARIANTS]
    a, b = sets[0]
    flush = torch.empty(256 << 18, dtype=torch.int32, device=dev)  # 256 MB
    res: dict = {"seed": seed, "pid": os.getpid(), "clock_before": sm_clock_mhz(),
                 "affinity": sorted(os.sched_getaffinity(0))[:4], "flush_ptr": flush.data_ptr()}

    def window(fn, sync: bool, n: int = 100) -> list[float]:
        out = []
        for i in range(n + 10):
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            if sync:
                torch.cuda.synchronize()
            e.record()
            e.synchronize()
            if i >= 10:
                out.append(s.elapsed_time(e))
        return out

    kernels = {"honest": lambda x, y: ext.matmul_forward(x, y), "torch": torch.matmul}
    for name, fn in kernels.items():
        r: dict = {}
        ptrs: list[int] = []

        def call(args, fn=fn):
            ptrs.append(args[0].data_ptr())
            return fn(*args)

        def fresh(pool, keep=None, tag=""):
            ptrs.clear()
            rp = RecordingPool(pool)
            run = timing.time_calls(call, rp, device=dev, n_warmup=5, n_trials=100, budget_s=30.0,
                                    rng=random.Random(seed * 7 + len(r)), keep_alive_bytes=keep)
            taken = rp.taken[5:]  # after the warm-up calls
            reused = [ptrs[5 + i] == ptrs[4 + i] for i in range(len(run.samples_ms))]
            return {"median": statistics.median(run.samples_ms), "overhead_ms": run.overhead_ms,
                    "samples": [round(x, 4) for x in run.samples_ms], "sets": taken, "in_place": reused}

        r["fresh4_first"] = fresh(sets)
        r["do_bench"] = triton.testing.do_bench(lambda: fn(a, b), warmup=50, rep=300, return_mode="median")
        for sync in (False, True):
            s = window(lambda: fn(a, b), sync)
            r["fixed" if sync else "fixed_nosync"] = {"median": statistics.median(s), "p10": sorted(s)[10], "p90": sorted(s)[90]}
        r["fresh1"] = fresh([sets[0]])
        r["fresh1_recycle"] = fresh([sets[0]], keep=0)
        r["fresh4_last"] = fresh(sets)
        res[name] = r
    res["clock_after"] = sm_clock_mhz()
    return res


def child_interleave(seed: int, sleep_us: float, n: int = 600) -> dict:
    import ctypes

    import torch

    from kevin.sandbox import timing

    dev = torch.device("cuda")
    libc = ctypes.CDLL(None)
    torch.manual_seed(seed)
    a, b = torch.randn(2048, 2048, device=dev), torch.randn(2048, 2048, device=dev)
    flush = torch.empty(256 << 18, dtype=torch.int32, device=dev)  # 256 MB
    cycles_per_us = timing.sleep_cycles_per_ms(dev) / 1e3
    variants = ("ours", "noreset", "sleep", "nosync")
    rows = []
    for i in range(n + 20):
        v = variants[i % len(variants)]
        if v == "ours":
            timing.reset_persisting_l2()
        flush.zero_()
        if v == "sleep":
            torch.cuda._sleep(int(sleep_us * cycles_per_us))
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        h0 = time.perf_counter()
        s.record()
        out = torch.matmul(a, b)
        h1 = time.perf_counter()
        if v != "nosync":
            torch.cuda.synchronize()
        e.record()
        e.synchronize()
        del out
        if i >= 20:
            rows.append((v, round(s.elapsed_time(e), 4), round((h1 - h0) * 1e3, 4), libc.sched_getcpu()))
    return {"seed": seed, "sleep_us": sleep_us, "cycles_per_us": round(cycles_per_us, 1), "rows": rows}


def summarize_interleave(results: list[dict]) -> list[str]:
    lines = ["per child, per variant: median ms in blocks of 100 calls (time order); host launch ms median/p90; CPUs"]
    for res in results:
        if "rows" not in res:
            lines.append(f"error {res.get('error', '')[:300]}")
            continue
        rows = res["rows"]
        lines.append(f"child seed {res['seed']} (sleep {res['sleep_us']} us, {res['cycles_per_us']} cycles/us)")
        for v in ("ours", "noreset", "sleep", "nosync"):
            vr = [r for r in rows if r[0] == v]
            blocks = [vr[k:k + 25] for k in range(0, len(vr), 25)]
            med = " ".join(f"{statistics.median(x[1] for x in blk):.4f}" for blk in blocks)
            host = sorted(r[2] for r in vr)
            cpus = sorted({r[3] for r in vr})
            lines.append(f"  {v:8} {med}   host {statistics.median(host):.4f}/{host[int(0.9 * (len(host) - 1))]:.4f}  cpus {cpus}")
    return lines


def sweep(sleep_us: float) -> list[str]:
    import torch
    import triton.testing

    from kevin.sandbox import timing

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device=dev, generator=g)

    cases = [
        ("relu 64K", lambda x: torch.relu(x), [rand(1 << 16)]),
        ("relu 4M", lambda x: torch.relu(x), [rand(1 << 22)]),
        ("relu 64M", lambda x: torch.relu(x), [rand(1 << 26)]),
        ("matmul 1024", torch.matmul, [rand(1024, 1024), rand(1024, 1024)]),
        ("matmul 2048", torch.matmul, [rand(2048, 2048), rand(2048, 2048)]),
        ("matmul 4096", torch.matmul, [rand(4096, 4096), rand(4096, 4096)]),
        ("4 ops on 4M", lambda x: x.mul(2).add(1).relu().sum(dim=1), [rand(2048, 2048)]),
    ]
    lines = [f"{'case':14} {'do_bench':>9} {'cover 0':>9} {'cover ' + format(sleep_us, 'g'):>10}   ratios to do_bench (two rounds each)"]
    for name, fn, args in cases:
        rows = {"do_bench": [], "0": [], "cover": []}
        for r in range(2):
            rows["do_bench"].append(triton.testing.do_bench(lambda: fn(*args), warmup=25, rep=200, return_mode="median"))
            for key, cover in (("0", 0.0), ("cover", sleep_us)):
                run = timing.time_calls(lambda a: fn(*a), [args], device=dev, n_warmup=5, n_trials=100, budget_s=10.0,
                                        rng=random.Random(r), launch_cover_us=cover)
                rows[key].append(run.median_ms)
        db = statistics.median(rows["do_bench"])
        z, c = statistics.median(rows["0"]), statistics.median(rows["cover"])
        lines.append(f"{name:14} {db:9.4f} {z:9.4f} {c:10.4f}   " + " ".join(
            f"{k}: " + ",".join(f"{x / db:.3f}" for x in rows[k]) for k in ("0", "cover")))
    return lines


def setup_steps(sleep_us: float) -> list[str]:
    import torch

    from kevin.sandbox import _candidate, _inventory, timing

    dev = torch.device("cuda")
    a, b = torch.randn(2048, 2048, device=dev), torch.randn(2048, 2048, device=dev)

    def profiled_once():
        with _inventory.ProfiledOps():
            torch.matmul(a, b)

    def deterministic_on_off():
        _candidate.set_deterministic(True)
        torch.matmul(a, b)
        _candidate.set_deterministic(False)

    steps = [("bare", lambda: None), ("dispatch-mode warm-up", _candidate.warm_up_dispatch_mode),
             ("one profiler session", profiled_once), ("deterministic on, off", deterministic_on_off),
             ("four more profiler sessions", lambda: [profiled_once() for _ in range(4)])]
    lines = [f"{'after':28} {'launch p90':>10} {'n_waited':>8} {'n_late':>6} {'median ms':>10}"]
    for name, step in steps:
        step()
        run = timing.time_calls(lambda x: torch.matmul(*x), [[a, b]], device=dev, n_warmup=5, n_trials=100,
                                budget_s=10.0, rng=random.Random(0), launch_cover_us=sleep_us)
        r = run.summary()
        lines.append(f"{name:28} {r['launch_p90_ms']:10.4f} {r['n_waited']:8d} {r['n_late']:6d} {r['median_ms']:10.4f}")
    return lines


def summarize(results: list[dict]) -> list[str]:
    lines = []
    for name in ("honest", "torch"):
        lines.append(f"== {name}: medians per child (ms)")
        keys = ["do_bench", "fixed_nosync", "fixed", "fresh1", "fresh1_recycle", "fresh4_first", "fresh4_last"]
        lines.append("seed " + " ".join(f"{k:>14}" for k in keys) + "   fresh4 by set (first | last)  in-place/new")
        for res in results:
            if name not in res:
                lines.append(f"{res.get('seed')} error {res.get('error', '')[:200]}")
                continue
            r = res[name]
            vals = [r[k] if isinstance(r[k], float) else r[k]["median"] for k in keys]
            by = []
            for k in ("fresh4_first", "fresh4_last"):
                f = r[k]
                groups = {}
                for s, x in zip(f["sets"], f["samples"]):
                    groups.setdefault(s, []).append(x)
                by.append(",".join(f"{statistics.median(groups[s]):.3f}" for s in sorted(groups)))
            f = r["fresh4_last"]
            ip = [x for x, p in zip(f["samples"], f["in_place"]) if p]
            nw = [x for x, p in zip(f["samples"], f["in_place"]) if not p]
            ipnw = f"{statistics.median(ip):.3f}/{statistics.median(nw):.3f}" if ip and nw else "-"
            lines.append(f"{res['seed']:>4} " + " ".join(f"{v:14.4f}" for v in vals) + f"   {by[0]} | {by[1]}  {ipnw}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--children", type=int, default=8)
    ap.add_argument("--child-seed", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--mode", choices=("ladder", "interleave", "sweep", "setup"), default="ladder")
    ap.add_argument("--sleep-us", type=float, default=200.0)
    args = ap.parse_args()
    from kevin.sandbox import SandboxConfig

    cache_dir = args.cache_dir or SandboxConfig().resolved_cache_dir()
    interleave = args.mode == "interleave"
    if args.mode in ("sweep", "setup"):
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        lines = sweep(args.sleep_us) if args.mode == "sweep" else setup_steps(args.sleep_us)
        (out / f"timing_modes_{args.mode}.txt").write_text(" ".join(sys.argv) + "\n" + "\n".join(lines) + "\n")
        print("\n".join(lines))
        return
    if args.child_seed is not None:
        res = child_interleave(args.child_seed, args.sleep_us) if interleave else child(args.child_seed, cache_dir)
        print(json.dumps(res))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    if not interleave:
        load_extension(cache_dir)  # build it once here if the cache is cold
        print("extension ready", round(time.monotonic() - t, 1), "s", flush=True)
    results = []
    for k in range(args.children):
        seed = k % 4
        p = subprocess.run([sys.executable, __file__, "--out", str(out), "--child-seed", str(seed), "--cache-dir", cache_dir,
                            "--mode", args.mode, "--sleep-us", str(args.sleep_us)],
                           capture_output=True, text=True, timeout=300)
        try:
            results.append(json.loads(p.stdout.strip().splitlines()[-1]))
        except Exception:
            results.append({"seed": seed, "error": (p.stderr or p.stdout)[-2000:]})
        print("child", k, "done", round(time.monotonic() - t, 1), "s", flush=True)
        (out / f"timing_modes_{args.mode}.json").write_text(json.dumps({"command": " ".join(sys.argv), "children": results}, indent=1))
    lines = summarize_interleave(results) if interleave else summarize(results)
    (out / f"timing_modes_{args.mode}.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
