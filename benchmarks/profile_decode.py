"""Where the time of one `TransformersPolicy` call goes on a GPU: a torch.profiler trace, summarised.

Builds a random Qwen2.5-shaped model (``benchmarks/generation.py``'s shapes), warms the policy up (compiles),
then profiles one call of ``--prompts`` x ``--prompt-len`` with ``--new-tokens`` new tokens. The cache length is
rounded up to the policy's bucket, so a short run uses the same compiled graphs and cache as a full one.

Writes OUT/profile.json: per phase (prefill = up to the first sampled token's kernels; decode = after), the
wall seconds, GPU-busy seconds (union of kernel intervals), and the kernels grouped by name with their total
time; and OUT/profile.txt with the same as tables.

    python benchmarks/profile_decode.py --shape 7b --new-tokens 32 --out OUT
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.generation import DEFAULTS, _IdsOnlyTokenizer, build_model, random_prompts  # noqa: E402


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals (microseconds in, seconds out)."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="7b")
    ap.add_argument("--prompts", type=int)
    ap.add_argument("--prompt-len", type=int)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--decode-attention", default="triton")
    ap.add_argument("--mode", default="static")
    ap.add_argument("--device", default="cuda", help="cpu only to smoke-test this script")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    from kevin.core.policy import TransformersPolicy

    n, length, _ = DEFAULTS[args.shape]
    n, length = args.prompts or n, args.prompt_len or length
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    model = build_model(args.shape, args.device)
    prompts = random_prompts(n, length, model.config.vocab_size)
    policy = TransformersPolicy(model, _IdsOnlyTokenizer(), max_new_tokens=args.new_tokens, temperature=0.9,
                                stop_token_ids=(), mode=args.mode, decode_attention=args.decode_attention,
                                memory_fraction=None)  # one wave, as measured before the default budget
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    print(f"built in {time.monotonic() - t:.1f} s", flush=True)
    t = time.monotonic()
    policy.generate_from_ids(prompts)
    sync()
    print(f"warm-up call {time.monotonic() - t:.1f} s", flush=True)
    t = time.monotonic()
    policy.generate_from_ids(prompts)
    sync()
    plain_s = time.monotonic() - t
    print(f"timed call {plain_s:.2f} s", flush=True)

    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])) as prof:
        policy.generate_from_ids(prompts)
        sync()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels.sort(key=lambda e: e.time_range.start)
    # the prefill ends at the first softmax-like sampling kernel after the longest gap-free GEMM stretch: use
    # the first kernel of the first CUDA-graph replay instead, i.e. the first kernel whose name says triton
    # decode (split_kernel) -- it only runs in decoding steps
    first_decode = next((i for i, e in enumerate(kernels) if "split_kernel" in e.name), len(kernels))
    phases = {"prefill": kernels[:first_decode], "decode": kernels[first_decode:]}
    summary: dict = {"shape": args.shape, "prompts": n, "prompt_len": length, "new_tokens": args.new_tokens,
                     "unprofiled_call_seconds": round(plain_s, 3), "phases": {}}
    lines = []
    for name, ks in phases.items():
        if not ks:
            continue
        wall = (ks[-1].time_range.end - ks[0].time_range.start) / 1e6
        busy = busy_seconds([(e.time_range.start, e.time_range.end) for e in ks])
        groups: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        for e in ks:
            g = groups[e.name[:90]]
            g[0] += (e.time_range.end - e.time_range.start) / 1e3
            g[1] += 1
        top = sorted(groups.items(), key=lambda kv: -kv[1][0])[:40]
        summary["phases"][name] = {
            "wall_s": round(wall, 4), "gpu_busy_s": round(busy, 4), "kernels": len(ks),
            "top": [{"name": k, "ms": round(v[0], 3), "count": v[1]} for k, v in top],
        }
        lines.append(f"== {name}: wall {wall:.4f} s, GPU busy {busy:.4f} s ({100 * busy / max(wall, 1e-9):.1f} %), "
                     f"{len(ks)} kernels")
        for k, v in top:
            lines.append(f"{v[0]:10.3f} ms {v[1]:7d}  {k}")
    (out / "profile.json").write_text(json.dumps(summary, indent=1))
    (out / "profile.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
