"""One decoding step's attention, every implementation of ``kevin.core.policy.engine.attention`` against transformers' sdpa.

Shape of a Qwen2.5-7B decoding step of the generation benchmark: B = 128 sequences, H = 28 query heads,
Hkv = 4 KV heads, D = 128, a static cache of S = 3072 slots of which the first ``--valid`` are written (the
rest masked, as a static cache is until the end). Each implementation is captured in a CUDA graph (as the
compiled decoding forward is) and replayed; ms per call is the median over ``--reps`` replays of one layer.
GB/s counts the K and V bytes a layer must read (written slots only) per call.

    python benchmarks/decode_attention.py --out OUT      # writes OUT/decode_attention_VALID.json

``triton_live`` is the Triton kernel told how many slots are written (``kevin_live_slots``, as the decoding
loop does), so that its splits divide those slots only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/_graph_timing.py

from _graph_timing import time_graph  # noqa: E402


def main() -> None:
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from kevin.core.policy.engine import attention

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--heads", type=int, default=28)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--slots", type=int, default=3072)
    p.add_argument("--valid", type=int, default=2560)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--sweep", action="store_true", help="also time the Triton kernel over launch configurations")
    p.add_argument("--programs", type=lambda v: [int(x) for x in v.split(",")], default=[1024, 2048, 4096],
                   help="target program counts of the --sweep-live (comma-separated)")
    p.add_argument("--sweep-live", action="store_true",
                   help="also time the Triton kernel told the written slots (--valid) over launch configurations")
    p.add_argument("--out", default="/tmp/decode_attention")
    a = p.parse_args()

    torch.manual_seed(0)
    b, h, hkv, d, s = a.batch, a.heads, a.kv_heads, a.head_dim, a.slots
    dt = torch.bfloat16
    q = torch.randn(b, h, 1, d, device="cuda", dtype=dt)
    k = torch.randn(b, hkv, s, d, device="cuda", dtype=dt)
    v = torch.randn(b, hkv, s, d, device="cuda", dtype=dt)
    keep = torch.zeros(b, 1, 1, s, dtype=torch.bool, device="cuda")
    keep[..., : a.valid] = True
    live = torch.tensor([a.valid], dtype=torch.int32, device="cuda")  # the written slots, as the decoding loop passes
    module = type("M", (), {"num_key_value_groups": h // hkv, "is_causal": True})()
    attention.load_triton_kernels()
    impls = {
        "transformers_sdpa": lambda: sdpa_attention_forward(module, q, k, v, keep, scaling=d**-0.5)[0],
        "grouped": lambda: attention.grouped_attention(module, q, k, v, keep, scaling=d**-0.5)[0],
        "grouped_sdpa": lambda: attention.grouped_sdpa_attention(module, q, k, v, keep, scaling=d**-0.5)[0],
        "triton": lambda: attention.triton_attention(module, q, k, v, keep, scaling=d**-0.5)[0],
        "triton_live": lambda: attention.triton_attention(module, q, k, v, keep, scaling=d**-0.5, **{
            attention.LIVE_SLOTS: live})[0],
    }
    if a.sweep_live:
        qg = q.reshape(b, hkv, h // hkv, d).contiguous()
        keep2 = keep[:, 0, 0, :]
        for block_n in (64, 128):
            for warps in (4, 8):
                for stages in (2, 3, 4):
                    for programs in a.programs:
                        impls[f"triton_live_n{block_n}_w{warps}_s{stages}_p{programs}"] = (
                            lambda bn=block_n, w=warps, st=stages, tp=programs: attention.triton_decode(
                                qg, k, v, keep2, d**-0.5, live=live, block_n=bn, num_warps=w, num_stages=st,
                                target_programs=tp, skip=False).reshape(b, h, 1, d).transpose(1, 2))
    if a.sweep:
        qg = q.reshape(b, hkv, h // hkv, d).contiguous()
        keep2 = keep[:, 0, 0, :]
        for block_n in (32, 64, 128):
            for warps in (4, 8):
                for stages in (1, 2, 3, 4):
                    for skip in (True, False):
                        impls[f"triton_n{block_n}_w{warps}_s{stages}_{'skip' if skip else 'noskip'}"] = (
                            lambda bn=block_n, w=warps, st=stages, sk=skip: attention.triton_decode(
                                qg, k, v, keep2, d**-0.5, block_n=bn, num_warps=w, num_stages=st, skip=sk
                            ).reshape(b, h, 1, d).transpose(1, 2))
    ref = impls["grouped"]().float()
    bytes_read = 2 * b * hkv * a.valid * d * 2
    rows = {}
    for name, fn in impls.items():
        try:
            err = (fn().float() - ref).abs().max().item()
            ms = time_graph(fn, a.reps)
            rows[name] = {"ms": round(ms, 4), "GB_per_s": round(bytes_read / ms / 1e6, 1), "max_abs_vs_grouped": err,
                          "x28_layers_ms": round(28 * ms, 2)}
        except Exception as e:  # noqa: BLE001 - report and go on
            rows[name] = {"error": repr(e)[:500]}
        print(name, rows[name], flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res = {"shape": vars(a), "device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": rows}
    (out / f"decode_attention_{a.valid}.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
