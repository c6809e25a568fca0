"""The README's scale table: GiB per H200 for each model size, LoRA and full fine-tuning, on 1 and 8 GPUs, as
`recipes/train_multiturn.py` runs them, from the library's own arithmetic (`kevin.core.run.memory.footprint`) at the
paper's shapes: one task of 16 trajectories per GPU, the 8,192-token prompt budget filled, 16,384 new tokens, one
sequence per micro-batch. vLLM gets `VLLMPolicy.from_model`'s default share of the GPU (0.3): its weights and KV cache
live in that share.

    python benchmarks/scale_table.py                      # the table, in markdown
    python benchmarks/scale_table.py --new-tokens 22528   # the paper's budget after step 30
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, kevin not installed

from kevin.core.run.memory import ARCHITECTURES, GIB, footprint, n_parameters

H200_GIB = 139.0  # what one H200 gives a process: 140.4 GiB less the CUDA context
VLLM_SHARE = 0.3  # VLLMPolicy.from_model's gpu_memory_utilization on a GPU

SETUPS = [("LoRA r=32, DDP", dict(lora_rank=32), (1,)), ("full, FSDP2", dict(), (1, 8)),
          ("full, FSDP2 + CPU offload", dict(offload=True), (1,)),
          ("LoRA r=32, DDP, vLLM", dict(lora_rank=32, sampler="vllm"), (1,)),
          ("full, FSDP2, vLLM", dict(sampler="vllm"), (1, 8))]


def cell(arch: dict, gpus: int, kwargs: dict, shape: dict) -> str:
    if kwargs.get("sampler") == "vllm":
        cache = VLLM_SHARE * 140.4 - 2 * n_parameters(arch) / GIB
        if cache <= 0:
            return f"**does not fit**: vLLM's {VLLM_SHARE} of the GPU is less than its {2 * n_parameters(arch) / GIB:.0f} of weights"
        kwargs = dict(kwargs, cache_budget_gib=cache)
    fp = footprint(arch, gpus=gpus, **kwargs, **shape)
    verdict = "fits" if max(fp.sampling, fp.training) <= H200_GIB else "**does not fit**"
    host = f"; host memory {fp.host:.0f} on the node" if fp.host else ""
    return f"{verdict}: sampling {fp.sampling:.0f} (KV cache {fp.kv_cache:.0f}), training {fp.training:.0f}{host}"


def rows(prompt_tokens: int, new_tokens: int) -> list[str]:
    out = ["| model | setup | GPUs | GiB per GPU (arithmetic; an H200 gives 139) |", "| --- | --- | --- | --- |"]
    shape = dict(rows=16, prompt_tokens=prompt_tokens, new_tokens=new_tokens)
    for name, arch in ARCHITECTURES.items():
        for label, kwargs, counts in SETUPS:
            for gpus in counts:
                where = "1 or 8" if "LoRA" in label else str(gpus) if "offload" not in label else "1 (or 8)"
                out.append(f"| {name} | {label} | {where} | {cell(arch, gpus, kwargs, shape)} |")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompt-tokens", type=int, default=8192)
    p.add_argument("--new-tokens", type=int, default=16384)
    args = p.parse_args()
    print("\n".join(rows(args.prompt_tokens, args.new_tokens)))


if __name__ == "__main__":
    main()
