"""The sampler of one decoding step: `kevin.core.decoding.sample_logits` compiled, against the single-argmax form it
replaced (stop 13), on the 7B benchmark's logits.

logits [128, 152064] bf16 (one row per sequence, Qwen2.5's vocabulary), temperature 0.9, top-p 1 (the generation
benchmark's settings) and 0.95. Each variant is compiled as ``compiled_sampler`` compiles it (``dynamic=False``, no
CUDA graphs), warmed up, then called ``--reps`` times back to back between two CUDA events, as the decoding loop calls
it; ms is the mean per call.

    python benchmarks/decode_sampler.py --out OUT      # writes OUT/decode_sampler.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, kevin not installed


def single_argmax(logits, temperature: float, top_p: float):
    """The stop-12 sampler: log_softmax over the row, then one argmax over the whole vocabulary."""
    import torch

    from kevin.core.decoding import top_p_filter

    logp = torch.log_softmax(top_p_filter(logits.float() / temperature, top_p), dim=-1)
    clocks = torch.empty_like(logp).exponential_().clamp_min_(torch.finfo(torch.float32).tiny)
    tokens = (logp - clocks.log()).argmax(dim=-1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


def main() -> None:
    import torch

    from kevin.core.decoding import sample_logits

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
        for name, fn in (("single_argmax", single_argmax), ("chunked_argmax", sample_logits)):
            compiled = torch.compile(fn, dynamic=False)
            for _ in range(3):
                compiled(logits, 0.9, top_p)
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
            err = (logprobs - ref).abs().max().item() if top_p == 1.0 else None
            rows[f"{name}@top_p={top_p}"] = {"ms": round(ms, 4), "logprob_max_abs_vs_log_softmax": err}
            print(name, top_p, rows[f"{name}@top_p={top_p}"], flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res = {"args": vars(a), "device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": rows}
    (out / "decode_sampler.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
