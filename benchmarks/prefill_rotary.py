"""One layer's rotary embedding in a compiled 7B prefill: cos and sin computed inside the kernel that rotates q,
against read from tensors computed once (what `kevin.core.policy.engine.attention.rotary_cos_sin` gives every layer).

In a profile of the compiled 7B prefill on an H200 (``benchmarks/profile_decode.py``; ``benchmarks/LOG.md``) the
kernel that rotates q took 5.2 ms per layer, where reading and writing q takes about 0.9 ms at 4.3 TB/s. Its
name lists ``cos`` and ``sin``: Inductor inlines the rotary's cos and sin (pointwise in the positions) into every
consumer, so each of q's 940 M elements recomputes one cos and one sin. This times that kernel alone, with
transformers' own ``Qwen2RotaryEmbedding`` and ``apply_rotary_pos_emb``:

- ``inline``: ``rotary(x, positions)`` and ``apply_rotary_pos_emb(q, k, cos, sin)`` in one compiled function;
- ``precomputed``: cos and sin computed before, passed in; the compiled function only applies them;
- ``copy``: q and k read and written once (``q * 1``), the floor of the kernel's memory traffic.

q [128, 28, 2048, 128] and k [128, 4, 2048, 128] bf16 as transposed views of the projections' outputs, as the
attention module makes them; positions 0..2047. ms: ``triton.testing.do_bench`` median.

    python benchmarks/prefill_rotary.py --out OUT     # writes OUT/prefill_rotary.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, kevin not installed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rows", type=int, default=128)
    p.add_argument("--length", type=int, default=2048)
    args = p.parse_args()

    import torch
    import triton
    from transformers import Qwen2Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding, apply_rotary_pos_emb

    b, q_len, h, hkv, d = args.rows, args.length, 28, 4, 128
    config = Qwen2Config(hidden_size=h * d, num_attention_heads=h, num_key_value_heads=hkv, max_position_embeddings=32768,
                         rope_theta=1e6)
    rotary = Qwen2RotaryEmbedding(config).cuda()
    dev = "cuda"
    q_lin = torch.randn(b, q_len, h * d, device=dev, dtype=torch.bfloat16)
    k_lin = torch.randn(b, q_len, hkv * d, device=dev, dtype=torch.bfloat16)
    positions = torch.arange(q_len, device=dev)[None].expand(b, q_len)

    def views(q_lin, k_lin):
        return (q_lin.view(b, q_len, h, d).transpose(1, 2), k_lin.view(b, q_len, hkv, d).transpose(1, 2))

    def inline(q_lin, k_lin, positions):
        q, k = views(q_lin, k_lin)
        cos, sin = rotary(q_lin, positions)
        return apply_rotary_pos_emb(q, k, cos, sin)

    def precomputed(q_lin, k_lin, cos, sin):
        q, k = views(q_lin, k_lin)
        return apply_rotary_pos_emb(q, k, cos, sin)

    def copy(q_lin, k_lin):
        q, k = views(q_lin, k_lin)
        return q * 1, k * 1

    cos, sin = rotary(q_lin, positions)
    reference = inline(q_lin, k_lin, positions)
    results: dict = {"rows": b, "length": q_len, "device": torch.cuda.get_device_name(), "torch": torch.__version__}
    from kevin.core.policy.engine.attention import _same_cos_sin  # the check `install_prefill_rotary` makes, on this GPU

    results["operator_matches_the_module_bf16"] = _same_cos_sin(rotary, torch.bfloat16)
    results["operator_matches_the_module_fp32"] = _same_cos_sin(rotary, torch.float32)
    cases = {"inline": (inline, (q_lin, k_lin, positions)), "precomputed": (precomputed, (q_lin, k_lin, cos, sin)),
             "copy": (copy, (q_lin, k_lin))}
    for name, (fn, inputs) in cases.items():
        compiled = torch.compile(fn, dynamic=False)
        out = compiled(*inputs)
        if name != "copy":
            results[f"{name}_max_abs_vs_eager"] = max(float((a.float() - r.float()).abs().max()) for a, r in zip(out, reference))
        results[f"{name}_ms"] = round(triton.testing.do_bench(lambda: compiled(*inputs), return_mode="median"), 4)
        print(name, results[f"{name}_ms"], flush=True)
    moved = 2 * (q_lin.numel() + k_lin.numel()) * 2  # bytes read and written
    results["copy_tb_per_s"] = round(moved / results["copy_ms"] / 1e9, 2)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "prefill_rotary.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
