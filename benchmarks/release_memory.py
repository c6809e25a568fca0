"""What ``TransformersPolicy.release_memory`` gives back, and what the next generation pays for it.

A randomly initialised Qwen2.5-shaped model in bf16 (``benchmarks/generation.py``'s ``--shape``) samples the
benchmark batch in static mode: a warm-up call (compiling), a timed call, then ``release_memory()``, then two
more timed calls (the first allocates the cache and the fused weights again and captures the decoding step's
CUDA graphs again; the second is warm again). Between the release and the next call the freed memory is filled
with NaN, so a graph still reading the old addresses would be caught by the log-prob check.

    python benchmarks/release_memory.py --shape 1.5b --out OUT      # appends a row to OUT/release_memory.jsonl
    python benchmarks/release_memory.py --shape 1.5b --prompts 8 --cycles 20 --out OUT

``--cycles N`` then times N more (release, call) cycles: every release moves the cache and the fused weights,
so the compiled step records one more CUDA graph per cycle, and the graphs already recorded are checked first
at every step. With few prompts the step is bound by the host, where that checking would show.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/generation.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, kevin not installed

from generation import DEFAULTS, SHAPES, _IdsOnlyTokenizer, build_model, logprob_check, random_prompts  # noqa: E402


def main() -> None:
    import torch
    from torch._dynamo.utils import counters

    from kevin.core.policy import TransformersPolicy

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="1.5b", choices=sorted(SHAPES))
    p.add_argument("--prompts", type=int, default=None, help="default: the shape's benchmark batch")
    p.add_argument("--cycles", type=int, default=0)
    p.add_argument("--out", default="/tmp/release_memory")
    a = p.parse_args()
    n, plen, new = DEFAULTS[a.shape]
    n = a.prompts or n
    gib = 2**30

    model = build_model(a.shape, "cuda")
    prompts = random_prompts(n, plen, SHAPES[a.shape]["vocab_size"])
    policy = TransformersPolicy(model, _IdsOnlyTokenizer(), max_new_tokens=new, temperature=0.9, mode="static",
                                stop_token_ids=(), memory_fraction=None)  # one wave, as measured before the budget

    def timed() -> tuple[float, list]:
        torch.cuda.synchronize()
        t = time.perf_counter()
        gens = policy.generate_from_ids(prompts)
        torch.cuda.synchronize()
        return round(time.perf_counter() - t, 2), gens

    row: dict = {"shape": a.shape, "prompts": n, "prompt_len": plen, "new_tokens": new}
    row["warmup_s"], _ = timed()
    row["warm_s"], _ = timed()
    graphs = counters["stats"]["unique_graphs"]
    row["allocated_before_release_gib"] = round(torch.cuda.memory_allocated() / gib, 2)
    row["reserved_before_release_gib"] = round(torch.cuda.memory_reserved() / gib, 2)
    t = time.perf_counter()
    freed = policy.release_memory()
    row["release_s"] = round(time.perf_counter() - t, 3)
    row["released_gib"] = round(freed / gib, 2)
    row["allocated_after_release_gib"] = round(torch.cuda.memory_allocated() / gib, 2)
    row["reserved_after_release_gib"] = round(torch.cuda.memory_reserved() / gib, 2)
    junk = torch.full((freed // 4,), float("nan"), device="cuda")  # where the old cache and weights were
    del junk
    row["after_release_s"], gens = timed()
    row["recompiled_graphs"] = counters["stats"]["unique_graphs"] - graphs
    row["logprob_check_after_release"] = round(logprob_check(model, gens, 0.9), 4)
    row["warm_again_s"], _ = timed()
    row["cycles_s"] = []  # (release, call) cycles: does a call slow down as recorded graphs pile up?
    for _ in range(a.cycles):
        policy.release_memory()
        row["cycles_s"].append(timed()[0])
    if a.cycles:
        row["warm_after_cycles_s"] = timed()[0]
    row["device_name"], row["torch"] = torch.cuda.get_device_name(), torch.__version__
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "release_memory.jsonl", "a") as fh:
        fh.write(json.dumps(row) + "\n")
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
