"""Plain ``generate`` on the CPU: the starter policy's decoding with ``decode_attention`` against transformers' sdpa.

The shipped CPU starter (4 query heads over 2 KV heads) samples 16 left-padded rows of a random prompt of ``--prompt``
tokens (row r padded by r/32 of it) for exactly ``--new`` tokens through `TransformersPolicy` (mode "generate"),
once with ``decode_attention=None`` (transformers' sdpa, which copies K and V per query head at every step) and
once with the default; the two alternate ``--rounds`` times. Prints seconds per call and whether both sampled the
same tokens from the same seed.

    python benchmarks/generate_cpu.py --prompt 900 --new 400
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import torch

    from kevin.core.policy import TransformersPolicy
    from kevin.core.policy.starter import load_starter

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=900, help="prompt tokens (the longest row)")
    parser.add_argument("--new", type=int, default=400, help="new tokens per row")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    model, tok = load_starter("cpu")
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(10, model.config.vocab_size - 10, (args.prompt,), generator=generator).tolist()
    prompts = [prompt[(r * args.prompt) // 32:] for r in range(16)]
    for round_ in range(args.rounds):
        tokens = {}
        for name, attention in (("sdpa", None), ("decode_attention", "triton")):
            policy = TransformersPolicy(model, tok, max_new_tokens=args.new, temperature=0.9, mode="generate",
                                        decode_attention=attention, stop_token_ids=())
            torch.manual_seed(round_)
            start = time.perf_counter()
            gens = policy.generate_from_ids(prompts)
            seconds = time.perf_counter() - start
            tokens[name] = [g.token_ids for g in gens]
            print(f"round {round_ + 1} {name}: {seconds:.2f} s for 16 x {args.new} new tokens after up to "
                  f"{args.prompt}", flush=True)
        print(f"round {round_ + 1}: the same tokens: {tokens['sdpa'] == tokens['decode_attention']}", flush=True)


if __name__ == "__main__":
    main()
