"""Generation throughput of the transformers policy backend against plain ``generate``.

A randomly initialised Qwen2.5-shaped model in bf16, built directly on the GPU, samples ``--new-tokens``
tokens for each of ``--prompts`` random prompts of ``--prompt-len`` tokens at temperature 0.9; no stop
token, so every sequence generates the full length. Throughput = generated tokens / wall seconds of the
whole call (prefill included), after any warm-up (compilation) call, which is timed separately.

Variants (each in its own subprocess with a time cap, so one slow or broken variant cannot stall the rest):

- ``hf_generate``: plain ``model.generate(do_sample=True, temperature=0.9)`` with sdpa and the default
  dynamic cache -- the baseline. Capped with ``max_time``: when the cap is hit the throughput is that of
  the tokens generated so far (the early, shorter-context part of the run, which flatters the baseline).
- ``policy:generate`` / ``policy:static`` / ``policy:continuous``: ``kevin.core.policy.TransformersPolicy``
  in that mode, with its sampling log-probs recorded (``policy:static`` is what ``mode="auto"`` picks on
  CUDA). ``logprob_check`` compares the recorded log-probs of a few rows with a teacher-forced forward pass.
  ``policy:static@IMPL`` decodes with ``decode_attention=IMPL`` (``kevin.core.policy.engine.attention.IMPLEMENTATIONS``);
  ``policy:static+unfused`` with ``fuse_projections=False`` (q, k, v, gate and up as separate matmuls);
  ``policy:static+cublas`` with the decoding loop's matmuls through torch's default BLAS instead of
  ``kevin.core.policy.engine.decoding.DECODE_BLAS`` (cuBLASLt); ``policy:static+inlinerotary`` with the prefill's rotary
  cos and sin traced through (``PREFILL_ROTARY = False``); ``policy:static+whole`` with the prefill's last layer run
  on every position; ``policy:static+budget40`` with a 40 GiB KV-cache budget (``cache_budget_bytes``: the rows are
  generated in waves that fit it), ``policy:static+mem0.5`` with half the free memory as each call's budget
  (``memory_fraction``; without ``+mem`` or ``+budget``, no bound). Suffixes combine (``policy:static+inlinerotary+whole``).
  ``prefill_s`` is one more call of the same batch with one new token (prefill + one sampling step), so
  ``decode_step_ms`` = (seconds - prefill_s) / (new tokens - 1).

Usage (results appended to OUT/results.jsonl and rendered to OUT/results.md after every variant)::

    python benchmarks/generation.py --shape 1.5b --variants hf_generate,policy:static --out OUT --budget-s 300
    python benchmarks/generation.py --shape tiny --device cpu --variants policy:generate --out /tmp/b  # smoke
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, kevin not installed

SHAPES = {
    # Qwen2.5-1.5B: hidden 1536, 28 layers, 12 heads, 2 kv heads, intermediate 8960, vocab 151936, tied
    "1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                 intermediate_size=8960, vocab_size=151936, tie_word_embeddings=True),
    # Qwen2.5-7B: hidden 3584, 28 layers, 28 heads, 4 kv heads, intermediate 18944, vocab 152064, untied
    "7b": dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
               intermediate_size=18944, vocab_size=152064, tie_word_embeddings=False),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=1000, tie_word_embeddings=True),
}
DEFAULTS = {"1.5b": (64, 1024, 512), "7b": (128, 2048, 1024), "tiny": (4, 32, 16)}  # prompts, prompt len, new


class _IdsOnlyTokenizer:
    """The policy needs a tokenizer only for stop ids, padding and decoding; random prompts have no text."""

    eos_token_id = None
    pad_token_id = 0

    def decode(self, ids, skip_special_tokens=True):
        return ""


def build_model(shape: str, device: str, attn: str = "sdpa"):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**SHAPES[shape], max_position_embeddings=32768, bos_token_id=None, eos_token_id=None,
                         pad_token_id=None)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):  # building a 1.5B model on the host takes ~75 s; on the GPU, seconds
        model = Qwen2ForCausalLM._from_config(config, attn_implementation=attn, dtype=dtype)
    return model.eval()


def random_prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab, (n, length), generator=g).tolist()


def logprob_check(model, gens, temperature: float, rows: int = 2, tokens: int = 32) -> float:
    """Max |recorded - teacher-forced| log-prob over the first ``tokens`` tokens of ``rows`` rows."""
    import torch

    worst = 0.0
    for g in gens[:rows]:
        ids = torch.tensor([list(g.prompt_ids) + list(g.token_ids[:tokens])], device=model.device)
        with torch.no_grad():
            logits = model(ids).logits[0, len(g.prompt_ids) - 1 : -1].float() / temperature
        ref = torch.log_softmax(logits, -1).gather(1, ids[0, len(g.prompt_ids):, None]).squeeze(1).cpu()
        worst = max(worst, (torch.tensor(g.logprobs[:tokens]) - ref).abs().max().item())
    return worst


def run_variant(variant: str, shape: str, device: str, n: int, plen: int, new: int, cap_s: float,
                warmup: int, batch_size: int | None) -> dict:
    import torch

    t0 = time.perf_counter()
    model = build_model(shape, device)
    build_s = time.perf_counter() - t0
    prompts = random_prompts(n, plen, SHAPES[shape]["vocab_size"])
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out: dict = {"variant": variant, "shape": shape, "prompts": n, "prompt_len": plen, "new_tokens": new,
                 "build_s": round(build_s, 1)}

    if variant == "hf_generate":
        input_ids = torch.tensor(prompts, device=device)
        kwargs = dict(attention_mask=torch.ones_like(input_ids), do_sample=True, temperature=0.9, top_p=1.0,
                      top_k=0, max_new_tokens=new, min_new_tokens=new, pad_token_id=0,
                      max_time=max(5.0, cap_s - build_s - 20))
        sync(); t = time.perf_counter()
        with torch.no_grad():
            seq = model.generate(input_ids, **kwargs)
        sync(); dt = time.perf_counter() - t
        generated = (seq.shape[1] - plen) * n
        out.update(seconds=round(dt, 2), generated_tokens=generated, tokens_per_s=round(generated / dt, 1),
                   complete=generated == n * new)
    else:
        from kevin.core.policy import TransformersPolicy, round_up

        mode = variant.split(":", 1)[1]
        extra = {"memory_fraction": None}  # no bound unless a flag sets one (the policy's default is 0.9)
        mode, *flags = mode.split("+")
        from kevin.core.policy.engine import decoding

        for flag in flags:
            if flag == "unfused":  # the decoding step without kevin.core.policy.engine.fused's one matmul per group
                extra["fuse_projections"] = False
            elif flag == "cublas":  # the decoding loop's matmuls through torch's default BLAS, not DECODE_BLAS
                decoding.DECODE_BLAS = "default"
            elif flag == "inlinerotary":  # the prefill's cos and sin traced through (inside every layer's kernel)
                decoding.PREFILL_ROTARY = False
            elif flag.startswith("budget"):  # +budget40: a KV-cache budget of 40 GiB (generation in waves that fit)
                extra["cache_budget_bytes"] = int(float(flag[len("budget"):]) * 2**30)
            elif flag.startswith("mem"):  # +mem0.5: each call's budget is half the memory the device still has
                extra["memory_fraction"] = float(flag[len("mem"):])
            elif flag == "whole":  # the prefill's last layer on every position, not the last one only
                decoding._install_last_position_hooks = lambda model: False
            else:
                raise SystemExit(f"unknown variant flag +{flag} in {variant!r}")
        if "@" in mode:
            mode, impl = mode.split("@", 1)
            extra["decode_attention"] = None if impl == "model" else impl
        cb = None
        if mode == "continuous":
            from transformers import ContinuousBatchingConfig

            cb = ContinuousBatchingConfig(
                block_size=256, num_blocks=math.ceil(n * (plen + new) / 256) + n, max_batch_tokens=8192,
                max_requests_per_batch=n, use_cuda_graph=True, return_logprobs=True, allow_block_sharing=False,
            )
        policy = TransformersPolicy(model, _IdsOnlyTokenizer(), max_new_tokens=new, temperature=0.9, mode=mode,
                                    stop_token_ids=(), batch_size=batch_size, continuous_batching_config=cb, **extra)
        out["resolved_mode"] = policy.resolved_mode()
        # Warm-up (compilation, CUDA graph capture): a short call with the same batch and KV-cache shape, so
        # the timed call reuses the compiled graphs (the cache length is rounded up to the policy's bucket).
        warm_new = min(16, new)
        if round_up(plen + warm_new, policy.cache_bucket) != round_up(plen + new, policy.cache_bucket):
            warm_new = new
        warm_policy = TransformersPolicy(model, _IdsOnlyTokenizer(), max_new_tokens=warm_new, temperature=0.9,
                                         mode=mode, stop_token_ids=(), batch_size=batch_size,
                                         continuous_batching_config=cb, **extra)
        warm = []
        for _ in range(warmup):
            sync(); t = time.perf_counter()
            warm_policy.generate_from_ids(prompts)
            sync(); warm.append(round(time.perf_counter() - t, 2))
        out["warmup_new_tokens"] = warm_new
        sync(); t = time.perf_counter()
        gens = policy.generate_from_ids(prompts)
        sync(); dt = time.perf_counter() - t
        generated = sum(len(g.token_ids) for g in gens)
        lps = [x for g in gens for x in g.logprobs]
        if extra.get("decode_attention") == "triton":
            from kevin.core.policy.engine import attention

            out["triton_config"] = dict(attention.TRITON_CONFIG)
        out.update(warmup_s=warm, seconds=round(dt, 2), generated_tokens=generated,
                   tokens_per_s=round(generated / dt, 1), complete=generated == n * new,
                   mean_logprob=round(sum(lps) / len(lps), 3),
                   logprob_check_max_abs=round(logprob_check(model, gens, 0.9), 4))
        if mode == "static" and new > 1:  # prefill (+ one sampling step) alone, same batch and cache shape
            one = TransformersPolicy(model, _IdsOnlyTokenizer(), max_new_tokens=1, temperature=0.9, mode=mode,
                                     stop_token_ids=(), batch_size=batch_size, **extra)
            one._cache_len = policy._cache_len
            sync(); t = time.perf_counter()
            one.generate_from_ids(prompts)
            sync(); prefill = time.perf_counter() - t
            out.update(prefill_s=round(prefill, 2), decode_step_ms=round(1000 * (dt - prefill) / (new - 1), 2))
    if device == "cuda":
        out["max_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
        out["device_name"] = torch.cuda.get_device_name()
    import transformers

    out["torch"], out["transformers"] = torch.__version__, transformers.__version__
    return out


def render(rows: list[dict]) -> str:
    lines = ["| shape | prompts x len + new | variant | tokens/s | seconds | prefill s | decode step ms | warm-up s | complete | logprob check | GiB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "tokens_per_s" not in r:
            lines.append(f"| {r.get('shape')} | | {r['variant']} | {r.get('status', 'failed')} | | | | | | | |")
            continue
        lines.append(
            f"| {r['shape']} | {r['prompts']} x {r['prompt_len']} + {r['new_tokens']} | {r['variant']} | "
            f"{r['tokens_per_s']:.0f} | {r['seconds']} | {r.get('prefill_s', '')} | {r.get('decode_step_ms', '')} | "
            f"{r.get('warmup_s', '')} | {r['complete']} | "
            f"{r.get('logprob_check_max_abs', '')} | {r.get('max_memory_gib', '')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="1.5b", choices=sorted(SHAPES))
    p.add_argument("--device", default="cuda")
    p.add_argument("--variants", default="hf_generate,policy:static")
    p.add_argument("--prompts", type=int)
    p.add_argument("--prompt-len", type=int)
    p.add_argument("--new-tokens", type=int)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--cap-s", type=float, default=240.0, help="time cap of one variant")
    p.add_argument("--budget-s", type=float, default=600.0, help="time budget of this whole invocation")
    p.add_argument("--triton-config", default=None,
                   help="JSON keyword arguments of kevin.core.policy.engine.attention.triton_decode for decode_attention=triton")
    p.add_argument("--warmup", type=int, default=None,
                   help="warm-up calls before the timed one (default: 1 for policy:static, else 0); a warm-up of a "
                        "long generation repeats it whole, so 0 times it with its compilation")
    p.add_argument("--out", default="benchmarks/results/out")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    n, plen, new = (args.prompts or DEFAULTS[args.shape][0], args.prompt_len or DEFAULTS[args.shape][1],
                    args.new_tokens or DEFAULTS[args.shape][2])

    if args.triton_config:
        from kevin.core.policy.engine import attention

        attention.TRITON_CONFIG.update(json.loads(args.triton_config))
    if args.worker:  # child: run one variant, print one JSON line
        warmup = args.warmup if args.warmup is not None else int(args.worker.startswith("policy:static"))
        res = run_variant(args.worker, args.shape, args.device, n, plen, new, args.cap_s, warmup, args.batch_size)
        print("RESULT " + json.dumps(res), flush=True)
        return

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows = []
    for variant in args.variants.split(","):
        left = args.budget_s - (time.perf_counter() - start)
        cap = min(args.cap_s, left)
        if cap < 30:
            res = {"variant": variant, "shape": args.shape, "status": "skipped (budget)"}
        else:
            cmd = [sys.executable, __file__, "--worker", variant, "--shape", args.shape, "--device", args.device,
                   "--prompts", str(n), "--prompt-len", str(plen), "--new-tokens", str(new), "--cap-s", str(cap)]
            if args.batch_size:
                cmd += ["--batch-size", str(args.batch_size)]
            if args.triton_config:
                cmd += ["--triton-config", args.triton_config]
            if args.warmup is not None:
                cmd += ["--warmup", str(args.warmup)]
            print(f"[{time.perf_counter() - start:6.1f}s] {variant} (cap {cap:.0f}s): {' '.join(cmd)}", flush=True)
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=cap,
                                      env={**os.environ, "PYTHONUNBUFFERED": "1"})
                lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
                if proc.returncode == 0 and lines:
                    res = json.loads(lines[-1][len("RESULT "):])
                else:
                    res = {"variant": variant, "shape": args.shape, "status": f"failed rc={proc.returncode}",
                           "stderr_tail": proc.stderr[-3000:]}
                    print(proc.stderr[-3000:], flush=True)
            except subprocess.TimeoutExpired as e:
                res = {"variant": variant, "shape": args.shape, "status": f"timeout after {cap:.0f}s",
                       "stderr_tail": (e.stderr or b"")[-2000:].decode(errors="replace") if isinstance(e.stderr, bytes) else str(e.stderr)[-2000:]}
        res["wall_s"] = round(time.perf_counter() - start, 1)
        rows.append(res)
        print(json.dumps(res), flush=True)
        with open(out / "results.jsonl", "a") as f:
            f.write(json.dumps(res) + "\n")
        (out / f"results_{args.shape}.md").write_text(render(rows))


if __name__ == "__main__":
    main()
