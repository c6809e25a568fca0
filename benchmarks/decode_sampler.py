"""The sampler of one decoding step: `kevin.core.policy.engine.decoding.sample_logits` compiled, against a two-stage ("chunked")
argmax form tried and not kept (it was slower), a form that never writes the [B, V] log-softmax
(``lse_gumbel``: token = argmax(s - log E), log pi = s_token - logsumexp(s); the same draw, since a row's logsumexp
does not move its argmax), and, as a floor that is not a sampler, the argmax of the scores without any noise, on
the 7B benchmark's logits.

logits [128, 152064] bf16 (one row per sequence, Qwen2.5's vocabulary), temperature 0.9, top-p 1 (the generation
benchmark's settings) and 0.95. Each variant is compiled as ``compiled_sampler`` compiles it (``dynamic=False``, no
CUDA graphs), warmed up, then called ``--reps`` times back to back between two CUDA events, as the decoding loop calls
it; ms is the mean per call. A variant that fails to compile is reported with its error.

    python benchmarks/decode_sampler.py --out OUT      # writes OUT/decode_sampler.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, kevin not installed


def chunked_argmax_sampler(logits, temperature: float, top_p: float, chunks: int = 64):
    """The tried form: token = argmax(s - log E) as an argmax within 64 pieces of the row, then over the pieces
    (B x 64 reduction rows instead of B); log pi = s_token - logsumexp(s)."""
    import torch

    from kevin.core.policy.engine.decoding import top_p_filter

    scores = top_p_filter(logits.float() / temperature, top_p)
    clocks = torch.empty_like(scores).exponential_().clamp_min_(torch.finfo(torch.float32).tiny)
    race = scores - clocks.log()
    b, v = race.shape
    width = -(-v // chunks)
    race = torch.nn.functional.pad(race, (0, width * chunks - v), value=float("-inf"))
    best, where = race.view(b, chunks, width).max(dim=-1)
    piece = best.argmax(dim=-1, keepdim=True)
    tokens = (piece * width + where.gather(-1, piece)).squeeze(-1)
    return tokens, scores.gather(-1, tokens[:, None]).squeeze(-1) - torch.logsumexp(scores, dim=-1)


def lse_gumbel_sampler(logits, temperature: float, top_p: float):
    """token = argmax_v (s_v - log E_v), E ~ Exp(1); log pi = s_token - logsumexp(s), with s the tempered nucleus."""
    import torch

    from kevin.core.policy.engine.decoding import top_p_filter

    scores = top_p_filter(logits.float() / temperature, top_p)
    clocks = torch.empty_like(scores).exponential_().clamp_min_(torch.finfo(torch.float32).tiny)
    tokens = (scores - clocks.log()).argmax(dim=-1)
    return tokens, scores.gather(-1, tokens[:, None]).squeeze(-1) - torch.logsumexp(scores, dim=-1)


def argmax_without_noise(logits, temperature: float, top_p: float):
    """Not a sampler: the greedy token and its log-prob, to see what the passes over the logits cost without noise."""
    import torch

    scores = logits.float() / temperature
    tokens = scores.argmax(dim=-1)
    return tokens, scores.gather(-1, tokens[:, None]).squeeze(-1) - torch.logsumexp(scores, dim=-1)


def main() -> None:
    import torch

    from kevin.core.policy.engine.decoding import sample_logits

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=128)
    p.add_argument("--vocab", type=int, default=152064)
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--out", default="/tmp/decode_sampler")
    a = p.parse_args()

    torch.manual_seed(0)
    logits = (torch.randn(a.rows, a.vocab, device="cuda") * 3).to(torch.bfloat16)
    rows = {}
    for top_p in (1.0, 0.95):
        variants = [("sample_logits", sample_logits), ("chunked_argmax", chunked_argmax_sampler),
                    ("lse_gumbel", lse_gumbel_sampler)] + ([("argmax_without_noise", argmax_without_noise)] if top_p == 1.0 else [])
        for name, fn in variants:
            compiled = torch.compile(fn, dynamic=False)
            try:
                for _ in range(3):
                    compiled(logits, 0.9, top_p)
            except Exception as e:  # noqa: BLE001 - report and go on
                rows[f"{name}@top_p={top_p}"] = {"error": repr(e)[:300]}
                print(name, top_p, rows[f"{name}@top_p={top_p}"], flush=True)
                continue
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(a.reps):
                tokens, logprobs = compiled(logits, 0.9, top_p)
            end.record()
            end.synchronize()
            ms = start.elapsed_time(end) / a.reps
            # the same draw in distribution: the log-prob of a drawn token against a log_softmax of the row
            ref = torch.log_softmax(logits.float() / 0.9, -1).gather(-1, tokens[:, None]).squeeze(-1)
            err = (logprobs - ref).abs().max().item() if top_p == 1.0 else None  # (top-p renormalises)
            rows[f"{name}@top_p={top_p}"] = {"ms": round(ms, 4), "logprob_max_abs_vs_log_softmax": err}
            print(name, top_p, rows[f"{name}@top_p={top_p}"], flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res = {"args": vars(a), "device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": rows}
    (out / "decode_sampler.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
