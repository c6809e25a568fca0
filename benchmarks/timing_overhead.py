"""Where a candidate's timing phase spends its exclusive GPU time, beyond the kernel itself.

A timing holds its GPU alone (`kevin.sandbox.sandbox.DeviceGate`), so with 16 candidates judged at once its
length is what queues them. On an H200, 16 timings of a 1.9 ms matmul took 7.6 s (``benchmarks/README.md``):
about 0.48 s each for 105 calls, so about 2.6 ms per call around a 1.9 ms kernel. This times
`kevin.sandbox.worker.timing.time_calls` on the benchmark's task (C = A @ B, fp32, N = 2048, four pool sets)
with ``torch.mm`` as the call, and the pieces of one call separately: the fresh inputs (a random permutation of
every tensor into a new buffer), the L2 flush, the persisting-L2 reset, the timer's synchronize, and
``torch.randperm`` alone, and the whole loop bare and with each of the harness's watches (the operator profiler,
the tripwire audit after every call, the null calls). Each piece is timed ``--reps`` times between ``torch.cuda.synchronize()`` calls on the
host clock; ms is the median.

    python benchmarks/timing_overhead.py --out OUT      # writes OUT/timing_overhead.json
    python benchmarks/timing_overhead.py --n 11586 --reps 10 --pieces-only --out OUT   # a 512 MiB input, no loops
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, kevin not installed


def host_ms(fn, reps: int) -> float:
    import torch

    from kevin.sandbox.worker.timing import median

    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) * 1e3)
    return round(median(samples), 4)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--pieces-only", action="store_true", help="time the pieces of one call, not the whole loops")
    p.add_argument("--out", default=None)
    a = p.parse_args()

    import torch

    from kevin.sandbox.build import harness
    from kevin.sandbox.worker import timing

    dev = torch.device("cuda")
    harness.check_launch(harness.build_permute(tempfile.mkdtemp(), harness.default_arch()), dev)  # binds it too
    g = torch.Generator(device=dev).manual_seed(0)
    pool = [[torch.randn(a.n, a.n, device=dev, generator=g) for _ in range(2)] for _ in range(4)]
    numel = a.n * a.n
    flush = torch.empty(max(2 * timing.l2_cache_bytes(dev), 256 << 20) // 4, dtype=torch.int32, device=dev)  # as timed
    fresh = timing.FreshInputs(pool, rng=random.Random(0), keep_alive_bytes=4 << 30)
    x = pool[0][0].reshape(-1)
    row: dict = {"n": a.n, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                 "l2_flush_bytes": flush.numel() * 4}
    row["kernel_mm_ms"] = host_ms(lambda: torch.mm(*pool[0]), a.reps)
    row["fresh_inputs_ms"] = host_ms(lambda: fresh(0), a.reps)
    row["randperm_ms"] = host_ms(lambda: torch.randperm(numel, device=dev, generator=g), a.reps)
    row["randperm_int32_ms"] = host_ms(lambda: torch.randperm(numel, device=dev, generator=g, dtype=torch.int32), a.reps)
    idx32 = torch.randperm(numel, device=dev, generator=g, dtype=torch.int32)
    row["gather_int32_ms"] = host_ms(lambda: x[idx32], a.reps)
    row["gather_ms"] = host_ms(lambda: x[torch.arange(numel, device=dev)], a.reps)
    row["empty_new_buffer_ms"] = host_ms(lambda: torch.empty(numel + 64, device=dev), a.reps)
    row["flush_ms"] = host_ms(flush.zero_, a.reps)
    row["reset_persisting_l2_ms"] = host_ms(timing.reset_persisting_l2, a.reps)

    def sync_pair() -> None:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.cuda.synchronize()
        e.record()
        e.synchronize()

    row["events_and_sync_ms"] = host_ms(sync_pair, a.reps)
    # a sort of 32-bit random keys (ties keep their order): what a cheaper permutation than randperm's would cost
    row["argsort_int32_keys_ms"] = host_ms(
        lambda: torch.argsort(torch.randint(-2**31, 2**31 - 1, (numel,), device=dev, dtype=torch.int32, generator=g),
                              stable=True), a.reps)
    if a.pieces_only:
        print(json.dumps(row, indent=1))
        if a.out:
            Path(a.out).mkdir(parents=True, exist_ok=True)
            (Path(a.out) / "timing_overhead.json").write_text(json.dumps(row, indent=1))
        return
    from kevin.sandbox.worker.guards import Tripwires, numerics_flags
    from kevin.sandbox.worker.inventory import ProfiledOps

    # as the candidate process calls it: 3 rechecks at secret positions, then each of the harness's watches alone and
    # all together (the operator profiler over the loop, the tripwire audit after every call, the null calls)
    wires, flags = Tripwires(), numerics_flags()
    watches = {"inventory": {"inventory": ProfiledOps},
               "audit": {"audit": lambda full: wires.changes(dispatcher=full, flags=flags)},
               "null_calls": {"null_call": lambda args: torch.empty_like(args[0]), "mark": lambda *a, **k: None}}
    variants = {"plain": {}, **watches, "all": {k: v for w in watches.values() for k, v in w.items()}}
    for label, kwargs in variants.items():
        for repeat in range(2):  # the first run also grows the caching allocator
            rechecks = [[t.clone() for t in pool[p % 4]] for p in range(3)]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            run = timing.time_calls(lambda args: torch.mm(*args), pool, device=dev, n_warmup=5, n_trials=100,
                                    budget_s=60.0, rng=random.Random(1), rechecks=rechecks, **kwargs)
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
        row[f"time_calls_{label}_wall_s"] = round(wall, 4)
        row[f"time_calls_{label}_per_call_ms"] = round(wall * 1e3 / 105, 4)
        row[f"time_calls_{label}_median_event_ms"] = round(run.median_ms, 4)
    print(json.dumps(row, indent=1))
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "timing_overhead.json").write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
