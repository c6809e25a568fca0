"""Triton matmuls for the 7B decoding step's linears against cuBLAS / cuBLASLt, at the step's own memory traffic.

A decoding step at 128 rows reads every weight once, and the profile of the compiled step
(``benchmarks/results/generation_h200.md``, 2026-12-01) has its matmuls about 1 ms per step above the weights' read floor:
per layer q/k/v 13.6 us (floor 7.7 at 4.3 TB/s), o 11.4 (6.0), gate/up 73.9 (63.2), down 46.1 (31.6, with its
split-K reduction). This times, per layer, the candidates that could close that gap:

- ``mm``: out = x @ W^T (+ bias), one program per (BN output columns, split of K); with a split of K the fp32
  partial sums [S, M, N] are added by a second kernel (deterministic: no atomics).
- ``gated``: out = silu(x @ Wg^T) * (x @ Wu^T) from the fused gate/up weight [2I, K] (gate rows first): each
  program holds one accumulator for BN gate columns and one for the same BN up columns, so the MLP's activation
  kernel and its [M, 2I] intermediate go away.

Unlike ``benchmarks/decode_matmuls.py``, each timed call reads a different one of 28 weight copies (one per layer),
as the step does, so no weight is served from the 50 MB L2. Each candidate is captured in one CUDA graph of 28
calls and replayed; ms per call is the median replay over 28. A sweep of launch settings is compiled first in
parallel worker processes (Triton's disk cache), then timed in this one.

    python benchmarks/decode_gemm.py --out OUT          # writes OUT/decode_gemm.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/_graph_timing.py

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

HIDDEN, KV, MLP, LAYERS = 3584, 512, 18944, 28
SHAPES = {  # name: (N, K, bias, gated)
    "qkv": (HIDDEN + 2 * KV, HIDDEN, True, False),
    "o": (HIDDEN, HIDDEN, False, False),
    "gate_up": (2 * MLP, HIDDEN, False, True),
    "down": (HIDDEN, MLP, False, False),
}


@triton.jit
def mm_kernel(X, W, B, P, O, M, N, K, k_split, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr):
    pid_n, pid_s = tl.program_id(0), tl.program_id(1)
    rm = tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    k_lo = pid_s * k_split
    for k0 in range(k_lo, k_lo + k_split, BK):
        x = tl.load(X + rm[:, None] * K + (k0 + rk)[None, :], mask=rm[:, None] < M, other=0.0)
        w = tl.load(W + rn[:, None] * K + (k0 + rk)[None, :], mask=rn[:, None] < N, other=0.0)
        acc = tl.dot(x, tl.trans(w), acc)
    out_mask = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT == 1:
        if HAS_BIAS:
            acc += tl.load(B + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        tl.store(O + rm[:, None] * N + rn[None, :], acc.to(O.dtype.element_ty), mask=out_mask)
    else:
        tl.store(P + (pid_s * M + rm[:, None]) * N + rn[None, :], acc, mask=out_mask)


@triton.jit
def reduce_kernel(P, B, O, M, N, SPLIT: tl.constexpr, BLOCK: tl.constexpr, HAS_BIAS: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < M * N
    acc = tl.zeros((BLOCK,), tl.float32)
    for s in tl.static_range(SPLIT):
        acc += tl.load(P + s * M * N + offs, mask=live, other=0.0)
    if HAS_BIAS:
        acc += tl.load(B + offs % N, mask=live, other=0.0).to(tl.float32)
    tl.store(O + offs, acc.to(O.dtype.element_ty), mask=live)


@triton.jit
def gated_kernel(X, W, O, M, I, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_n = tl.program_id(0)
    rm = tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    gate = tl.zeros((BM, BN), tl.float32)
    up = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        x = tl.load(X + rm[:, None] * K + (k0 + rk)[None, :], mask=rm[:, None] < M, other=0.0)
        wg = tl.load(W + rn[:, None] * K + (k0 + rk)[None, :], mask=rn[:, None] < I, other=0.0)
        wu = tl.load(W + (I + rn[:, None]) * K + (k0 + rk)[None, :], mask=rn[:, None] < I, other=0.0)
        gate = tl.dot(x, tl.trans(wg), gate)
        up = tl.dot(x, tl.trans(wu), up)
    # as the model rounds them: gate and up to bf16, silu(gate) to bf16, the product to bf16
    g = gate.to(O.dtype.element_ty).to(tl.float32)
    u = up.to(O.dtype.element_ty).to(tl.float32)
    act = (g * tl.sigmoid(g)).to(O.dtype.element_ty).to(tl.float32)
    out_mask = (rm[:, None] < M) & (rn[None, :] < I)
    tl.store(O + rm[:, None] * I + rn[None, :], (act * u).to(O.dtype.element_ty), mask=out_mask)


def run_mm(x, w, b, cfg, part=None, out=None):
    m, k = x.shape
    n = w.shape[0]
    split = cfg["split"]
    k_split = k // split
    out = torch.empty(m, n, device=x.device, dtype=x.dtype) if out is None else out
    if split > 1 and part is None:
        part = torch.empty(split, m, n, device=x.device, dtype=torch.float32)
    mm_kernel[(triton.cdiv(n, cfg["bn"]), split)](
        x, w, b if b is not None else w, part if part is not None else out, out, m, n, k, k_split,
        BM=cfg["bm"], BN=cfg["bn"], BK=cfg["bk"], SPLIT=split, HAS_BIAS=b is not None,
        num_warps=cfg["warps"], num_stages=cfg["stages"])
    if split > 1:
        block = 1024
        reduce_kernel[(triton.cdiv(m * n, block),)](part, b if b is not None else w, out, m, n, SPLIT=split,
                                                   BLOCK=block, HAS_BIAS=b is not None, num_warps=4)
    return out


def run_gated(x, w, cfg, out=None):
    m, k = x.shape
    i = w.shape[0] // 2
    out = torch.empty(m, i, device=x.device, dtype=x.dtype) if out is None else out
    gated_kernel[(triton.cdiv(i, cfg["bn"]),)](x, w, out, m, i, k, BM=cfg["bm"], BN=cfg["bn"], BK=cfg["bk"],
                                               num_warps=cfg["warps"], num_stages=cfg["stages"])
    return out


def configs(name: str, rows: int) -> list[dict]:
    n, k, _, gated = SHAPES[name]
    bm = max(64, triton.next_power_of_2(rows))
    out = []
    bns = (32, 64, 128) if gated else (32, 64, 128, 256)
    splits = (1,) if gated else (1, 2, 4, 8)
    for bn, bk, split, warps, stages in itertools.product(bns, (64, 128), splits, (4, 8), (3, 4, 5)):
        if k % (split * bk):
            continue
        if gated and bn == 128 and warps == 4:
            continue
        smem = stages * (bm * bk + (2 if gated else 1) * bn * bk) * 2
        if smem > 220_000:
            continue
        out.append({"bm": bm, "bn": bn, "bk": bk, "split": split, "warps": warps, "stages": stages})
    return out


def _compile_one(args) -> tuple[str, dict, str | None]:
    """Run one (shape, config) once on small data in a worker: Triton compiles it into its disk cache."""
    name, rows, cfg = args
    n, k, bias, gated = SHAPES[name]
    try:
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        if gated:
            run_gated(x, w, cfg)
        else:
            run_mm(x, w, torch.randn(n, device="cuda", dtype=torch.bfloat16) if bias else None, cfg)
        torch.cuda.synchronize()
        return name, cfg, None
    except Exception as e:  # noqa: BLE001 - a config that does not compile is reported and skipped
        return name, cfg, repr(e)[:300]


def time_calls(fn, reps: int) -> float:
    """Median ms per call of a CUDA graph holding ``fn(0) .. fn(LAYERS - 1)`` (each call on its own weight)."""
    from _graph_timing import time_graph

    calls = iter(range(10**9))
    return time_graph(lambda: fn(next(calls) % LAYERS), reps, calls=LAYERS)


def main() -> None:
    import torch.nn.functional as F

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=128)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--workers", type=int, default=min(14, os.cpu_count() or 1))
    p.add_argument("--out", default="/tmp/decode_gemm")
    a = p.parse_args()
    names = a.shapes.split(",")

    t0 = time.time()
    jobs = [(name, a.rows, cfg) for name in names for cfg in configs(name, a.rows)]
    failed = {}
    ctx = torch.multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(a.workers, mp_context=ctx) as pool:
        for name, cfg, err in pool.map(_compile_one, jobs):
            if err:
                failed.setdefault(name, []).append((cfg, err))
    print(f"compiled {len(jobs)} configs in {time.time() - t0:.0f} s; failed: "
          f"{ {k: len(v) for k, v in failed.items()} }", flush=True)

    torch.manual_seed(0)
    results = {}
    for name in names:
        n, k, bias, gated = SHAPES[name]
        x = torch.randn(a.rows, k, device="cuda", dtype=torch.bfloat16)
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(LAYERS)]
        bs = [torch.randn(n, device="cuda", dtype=torch.bfloat16) if bias else None for _ in range(LAYERS)]
        gb = n * k * 2 / 1e9
        row = {"weight_GB": round(gb, 4), "floor_ms_at_4.3TBps": round(gb / 4.3, 4)}

        def act(h):
            g, u = h.chunk(2, dim=-1)
            return F.silu(g) * u

        act_c = torch.compile(act, dynamic=False)
        ref_fn = (lambda i: act_c(F.linear(x, ws[i]))) if gated else (lambda i: F.linear(x, ws[i], bs[i]))
        row["cublas_ms"] = round(time_calls(ref_fn, a.reps), 4)
        saved = torch.backends.cuda.preferred_blas_library()
        torch.backends.cuda.preferred_blas_library("cublaslt")
        row["cublaslt_ms"] = round(time_calls(ref_fn, a.reps), 4)
        torch.backends.cuda.preferred_blas_library(saved)
        if gated:  # the matmul alone, without the activation kernel
            torch.backends.cuda.preferred_blas_library("cublaslt")
            row["cublaslt_matmul_only_ms"] = round(time_calls(lambda i: F.linear(x, ws[i]), a.reps), 4)
            torch.backends.cuda.preferred_blas_library(saved)
        ref = (act(F.linear(x.float(), ws[0].float())) if gated
               else F.linear(x.float(), ws[0].float(), bs[0].float() if bias else None))
        scale = ref.abs().max().item()
        timed = []
        for cfg in configs(name, a.rows):
            if any(cfg == c for c, _ in failed.get(name, [])):
                continue
            try:
                if gated:
                    o = torch.empty(a.rows, n // 2, device="cuda", dtype=torch.bfloat16)
                    err = (run_gated(x, ws[0], cfg, out=o).float() - ref).abs().max().item() / scale
                    ms = time_calls(lambda i: run_gated(x, ws[i], cfg, out=o), a.reps)
                else:
                    o = torch.empty(a.rows, n, device="cuda", dtype=torch.bfloat16)
                    part = (torch.empty(cfg["split"], a.rows, n, device="cuda", dtype=torch.float32)
                            if cfg["split"] > 1 else None)
                    err = (run_mm(x, ws[0], bs[0], cfg, part, o).float() - ref).abs().max().item() / scale
                    ms = time_calls(lambda i: run_mm(x, ws[i], bs[i], cfg, part, o), a.reps)
                timed.append({**cfg, "ms": round(ms, 4), "rel_err": err})
            except Exception as e:  # noqa: BLE001
                failed.setdefault(name, []).append((cfg, repr(e)[:300]))
        timed.sort(key=lambda r: r["ms"])
        row["triton_best"] = timed[:5]
        row["n_timed"] = len(timed)
        best = timed[0]["ms"] if timed else None
        row["triton_best_ms"] = best
        row["best_vs_cublaslt"] = round(best / row["cublaslt_ms"], 3) if best else None
        results[name] = row
        print(name, json.dumps(row), flush=True)
        ws = bs = None  # this shape's 28 weight copies freed before the next
        torch.cuda.empty_cache()

    per_layer = {v: round(sum(results[s][v] for s in results if results[s].get(v)), 4)
                 for v in ("cublas_ms", "cublaslt_ms", "triton_best_ms", "floor_ms_at_4.3TBps")}
    print("per layer", per_layer, "per step (x28)", {k: round(v * LAYERS, 3) for k, v in per_layer.items()},
          flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "decode_gemm.json").write_text(json.dumps({
        "args": vars(a), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": triton.__version__, "results": results, "per_layer": per_layer,
        "failed": {k: v[:5] for k, v in failed.items()}}, indent=1))


if __name__ == "__main__":
    main()
