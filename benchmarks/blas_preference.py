"""The linear layers of a Qwen2.5-7B prefill and decoding step under torch's two BLAS preferences, cuBLAS and cuBLASLt.

``torch.backends.cuda.preferred_blas_library`` picks the library of ``F.linear`` (``addmm`` with the bias of q, k
and v). Shapes of the generation benchmark: the prefill runs its 128 prompts of 2048 tokens as one batch
(M = 262144 rows; q, k, v, gate and up are separate linears there), a decoding step M = 128 rows with the fused
projections of ``kevin.core.policy.engine.fused`` (q/k/v as one [4608, 3584] linear, gate/up as one [37888, 3584]). Each shape is
timed between CUDA events over ``--reps`` calls after a warm-up, once per preference, alternating twice
(cublas, cublaslt, cublas, cublaslt) so that a drift of the clock shows; ms is the lower of a preference's two
means. ``per_pass_ms`` sums one prefill layer's (or one decoding step's) linears times 28 layers.

    python benchmarks/blas_preference.py --out OUT      # writes OUT/blas_preference.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HIDDEN, KV, MLP, LAYERS = 3584, 512, 18944, 28
PREFILL = {  # name: (out features, in features, bias, count per layer)
    "q": (HIDDEN, HIDDEN, True, 1), "k/v": (KV, HIDDEN, True, 2), "o": (HIDDEN, HIDDEN, False, 1),
    "gate/up": (MLP, HIDDEN, False, 2), "down": (HIDDEN, MLP, False, 1),
}
DECODE = {
    "qkv": (HIDDEN + 2 * KV, HIDDEN, True, 1), "o": (HIDDEN, HIDDEN, False, 1),
    "gate_up": (2 * MLP, HIDDEN, False, 1), "down": (HIDDEN, MLP, False, 1),
}


def time_linear(x, w, b, reps: int) -> float:
    import torch
    import torch.nn.functional as F

    for _ in range(3):
        F.linear(x, w, b)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        F.linear(x, w, b)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def main() -> None:
    import torch

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prefill-rows", type=int, default=128 * 2048)
    p.add_argument("--decode-rows", type=int, default=128)
    p.add_argument("--out", default="/tmp/blas_preference")
    a = p.parse_args()
    saved = torch.backends.cuda.preferred_blas_library()
    results: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "default": str(saved)}
    try:
        for phase, rows, shapes, reps in (("prefill", a.prefill_rows, PREFILL, 3), ("decode", a.decode_rows, DECODE, 200)):
            table = {}
            for name, (out_f, in_f, bias, count) in shapes.items():
                x = torch.randn(rows, in_f, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(out_f, in_f, device="cuda", dtype=torch.bfloat16) / in_f ** 0.5
                b = torch.randn(out_f, device="cuda", dtype=torch.bfloat16) if bias else None
                seen: dict = {"cublas": [], "cublaslt": []}
                for lib in ("cublas", "cublaslt", "cublas", "cublaslt"):
                    torch.backends.cuda.preferred_blas_library(lib)
                    seen[lib].append(round(time_linear(x, w, b, reps), 4))
                table[name] = {"count_per_layer": count, **{k: min(v) for k, v in seen.items()}, "runs": seen}
                del x, w, b
                torch.cuda.empty_cache()
                print(phase, name, table[name], flush=True)
            per_pass = {lib: round(LAYERS * sum(r[lib] * r["count_per_layer"] for r in table.values()), 2)
                        for lib in ("cublas", "cublaslt")}
            results[phase] = {"rows": rows, "shapes": table, "per_pass_ms": per_pass}
            print(phase, "per pass (28 layers)", per_pass, flush=True)
    finally:
        torch.backends.cuda.preferred_blas_library(saved)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "blas_preference.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
