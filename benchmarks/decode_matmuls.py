"""The weight matmuls of one decoding step: cuBLAS (what the compiled step runs) against Inductor's autotuned ones.

Shapes of a Qwen2.5-7B decoding step of the generation benchmark: M = 128 rows (one token per sequence),
hidden 3584, 4 KV heads of 128, MLP 18944, vocabulary 152064, bf16; q, k and v carry a bias. Also timed: q, k
and v as one matmul, and gate and up as one, to see what fusing them would be worth. Each variant is captured
in a CUDA graph and replayed; ms is the median over ``--reps`` replays; GB/s counts the weight bytes read.

    python benchmarks/decode_matmuls.py --out OUT      # writes OUT/decode_matmuls.json
    python benchmarks/decode_matmuls.py --layouts --out OUT   # also the transposed weight and cuBLASLt
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/_graph_timing.py

from _graph_timing import time_graph  # noqa: E402


def main() -> None:
    import torch
    import torch.nn.functional as F

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=128)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--autotune", action="store_true", help="also time torch.compile(mode='max-autotune-no-cudagraphs')")
    p.add_argument("--layouts", action="store_true",
                   help="also time the weight stored transposed ([in, out] contiguous: x @ wt, 'NN' for cuBLAS) and "
                        "F.linear with torch's BLAS preference set to cuBLASLt")
    p.add_argument("--out", default="/tmp/decode_matmuls")
    a = p.parse_args()

    hidden, kv, mlp, vocab = 3584, 512, 18944, 152064
    shapes = {  # name: (out features, in features, bias)
        "q": (hidden, hidden, True), "k": (kv, hidden, True), "v": (kv, hidden, True), "o": (hidden, hidden, False),
        "gate": (mlp, hidden, False), "up": (mlp, hidden, False), "down": (hidden, mlp, False),
        "lm_head": (vocab, hidden, False),
        "qkv_fused": (hidden + 2 * kv, hidden, True), "gate_up_fused": (2 * mlp, hidden, False),
    }
    torch.manual_seed(0)
    rows = {}
    for name, (n, k, bias) in shapes.items():
        x = torch.randn(a.rows, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16) if bias else None
        gb = n * k * 2 / 1e9
        row = {"weight_GB": round(gb, 4)}
        ms = time_graph(lambda: F.linear(x, w, b), a.reps, calls=10)
        row["cublas_ms"], row["cublas_GB_per_s"] = round(ms, 4), round(gb / ms * 1e3, 1)
        if a.layouts:
            wt = w.t().contiguous()  # [in, out]
            ms = time_graph(lambda: torch.addmm(b, x, wt) if b is not None else x @ wt, a.reps, calls=10)
            row["transposed_ms"], row["transposed_GB_per_s"] = round(ms, 4), round(gb / ms * 1e3, 1)
            del wt
            saved = torch.backends.cuda.preferred_blas_library()
            try:
                torch.backends.cuda.preferred_blas_library("cublaslt")
                ms = time_graph(lambda: F.linear(x, w, b), a.reps, calls=10)
                row["cublaslt_ms"], row["cublaslt_GB_per_s"] = round(ms, 4), round(gb / ms * 1e3, 1)
            except Exception as e:  # noqa: BLE001 - report and go on
                row["cublaslt_error"] = repr(e)[:400]
            finally:
                torch.backends.cuda.preferred_blas_library(saved)
        if a.autotune:
            try:
                torch._dynamo.reset()
                fn = torch.compile(lambda x, w, b: F.linear(x, w, b), mode="max-autotune-no-cudagraphs", dynamic=False)
                ref = F.linear(x, w, b)
                err = (fn(x, w, b) - ref).abs().max().item()
                ms = time_graph(lambda: fn(x, w, b), a.reps, calls=10)
                row["autotune_ms"], row["autotune_GB_per_s"], row["autotune_max_abs"] = (
                    round(ms, 4), round(gb / ms * 1e3, 1), err)
            except Exception as e:  # noqa: BLE001 - report and go on
                row["autotune_error"] = repr(e)[:400]
        rows[name] = row
        print(name, row, flush=True)
    layer = ("q", "k", "v", "o", "gate", "up", "down")
    per_layer = {v: round(sum(rows[s][f"{v}_ms"] for s in layer), 4)  # None when a shape has no time for v
                 if all(f"{v}_ms" in rows[s] for s in layer) else None
                 for v in ("cublas", "autotune", "transposed", "cublaslt")}
    step = ("qkv_fused", "o", "gate_up_fused", "down")  # what the fused decoding step runs per layer
    fused = {v: round(sum(min(rows[s].get(f"{v}_ms", math.inf), rows[s]["cublas_ms"]) for s in step), 4)
             for v in ("cublas", "transposed", "cublaslt")}  # each shape at the faster of cuBLAS and v
    summary = {"per_layer_ms": per_layer, "per_layer_fused_ms_best_of_cublas_and": fused}
    print(summary, flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res = {"args": vars(a), "device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": rows,
           "summary": summary}
    (out / "decode_matmuls.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
