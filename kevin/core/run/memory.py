"""What a training run holds on each GPU, by arithmetic: the README's scale table comes from `footprint`.

A step has two peaks. While sampling, a GPU holds its share of the training state (weights, AdamW moments; the
gradients are freed after every update), the copy the sampler decodes with, and the KV cache. While training, it holds
the training state, the gradients and the activations of one micro-batch. `footprint` counts both, in GiB, for the way
this library stores each part:

- full fine-tuning keeps fp32 weights (bf16 autocast), fp32 gradients and two fp32 AdamW moments: 16 bytes a
  parameter, divided by the GPUs under FSDP2; to sample with transformers, FSDP2 gathers the whole model on every GPU
  in bf16 (`Learner.full_parameters`);
- LoRA keeps the base in bf16 on every GPU (DDP) and trains fp32 adapters (r x (in + out) per linear layer);
- the static-cache engine decodes with fused q/k/v and gate/up matrices, a bf16 copy of those weights; vLLM
  decodes with its own bf16 copy of the model (synced after each update), beside the trainer's;
- the KV cache is rows x (prompt + new tokens) x `kv_bytes_per_token` (bf16); a cache budget bounds it by generating
  in waves (`TransformersPolicy(cache_budget_bytes=)`);
- activations under gradient checkpointing: each layer's input kept (tokens x hidden x 2 bytes x layers) plus one
  layer recomputed, about tokens x (4 hidden + 3 intermediate) x 2 bytes; the log-probs are taken in chunks and
  left out. An estimate, not a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

from kevin.core.policy.base import kv_bytes_per_token
from kevin.core.policy.tiny import REAL_ARCHITECTURES

GIB = 2**30

# Public config.json values: the shapes that can be built at random, and two larger ones
ARCHITECTURES = {
    **REAL_ARCHITECTURES,
    "qwen2.5-14b": dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=48, num_attention_heads=40,
                        num_key_value_heads=8, vocab_size=152064, tie_word_embeddings=False),
    "qwq-32b": dict(hidden_size=5120, intermediate_size=27648, num_hidden_layers=64, num_attention_heads=40,
                    num_key_value_heads=8, vocab_size=152064, tie_word_embeddings=False),
}


class _Config:
    def __init__(self, **values: int | bool) -> None:
        self.__dict__.update(values)


def linear_shapes(arch: dict) -> list[tuple[int, int]]:
    """(in, out) of one decoder layer's linear layers: q, k, v, o, gate, up, down."""
    h, i = arch["hidden_size"], arch["intermediate_size"]
    kv = arch["num_key_value_heads"] * (h // arch["num_attention_heads"])
    return [(h, h), (h, kv), (h, kv), (h, h), (h, i), (h, i), (i, h)]


def n_parameters(arch: dict) -> int:
    """Every weight: layers x (linear weights + q/k/v biases + 2 norms) + embeddings (x2 untied) + final norm.

    Qwen2.5-7B: 28 x 233,057,792 + 2 x 152,064 x 3,584 + 3,584 = 7,615,616,512 (its published 7.62B).
    """
    h = arch["hidden_size"]
    layer = sum(a * b for a, b in linear_shapes(arch)) + sum(b for _, b in linear_shapes(arch)[:3]) + 2 * h
    embed = arch["vocab_size"] * h * (1 if arch["tie_word_embeddings"] else 2)
    return arch["num_hidden_layers"] * layer + embed + h


def lora_parameters(arch: dict, rank: int) -> int:
    """Adapter weights of rank r on every linear layer: layers x sum r x (in + out)."""
    return arch["num_hidden_layers"] * sum(rank * (a + b) for a, b in linear_shapes(arch))


def fused_copy_parameters(arch: dict) -> int:
    """The static engine's fused q/k/v and gate/up matrices: layers x h x (q + k + v + gate + up outputs)."""
    shapes = linear_shapes(arch)
    return arch["num_hidden_layers"] * sum(a * b for a, b in (shapes[0], shapes[1], shapes[2], shapes[4], shapes[5]))


@dataclass(frozen=True)
class Footprint:
    """GiB on one GPU in each phase of a step; ``sampling`` and ``training`` are the two peaks."""

    state: float
    """training state while sampling: weights and AdamW moments (this GPU's shard under FSDP2)"""
    sampler_copy: float
    """weights the sampler decodes with besides the state: FSDP2's gathered model, the engine's fused copy"""
    kv_cache: float
    gradients: float
    activations: float
    host: float = 0.0
    """host memory on the node for the offloaded training state (FSDP2 CPU offload: fp32 weights, gradients and
    AdamW moments, 16 bytes a parameter, all of them on a node of one or more GPUs); 0 without offload"""

    @property
    def sampling(self) -> float:
        return self.state + self.sampler_copy + self.kv_cache

    @property
    def training(self) -> float:
        return self.state + self.gradients + self.activations


def footprint(arch: dict, *, lora_rank: int = 0, gpus: int = 1, offload: bool = False, rows: int = 16,
              prompt_tokens: int = 8192, new_tokens: int = 16384, cache_budget_gib: float | None = None,
              micro_batch: int = 1, sampler: str = "transformers") -> Footprint:
    """GiB per GPU of training ``arch`` (an ``ARCHITECTURES`` entry) on ``gpus`` GPUs.

    Full fine-tuning (``lora_rank`` 0) is sharded over the GPUs (FSDP2; ``offload``: the shards in host memory);
    LoRA is replicated (DDP). A GPU samples ``rows`` rows of ``prompt_tokens + new_tokens`` (the paper: one task of
    16 trajectories, an 8,192-token prompt budget, 16,384 new tokens), its cache capped at ``cache_budget_gib``;
    training runs ``micro_batch`` sequences of that length at once. ``sampler``: "transformers" (the static engine:
    the fused copy, and a full fine-tune gathered whole) or "vllm" (the engine's own weights, beside the trainer's).
    """
    if sampler not in ("transformers", "vllm"):
        raise ValueError(f"sampler must be 'transformers' or 'vllm', not {sampler!r}")
    p, h = n_parameters(arch), arch["hidden_size"]
    if lora_rank > 0:
        adapters = lora_parameters(arch, lora_rank)
        state, gradients = 2 * p + 12 * adapters, 4 * adapters
    else:
        shard = 0 if offload else 1 / gpus
        state, gradients = 12 * p * shard, 4 * p * shard
    if sampler == "vllm":
        copy = 2 * p  # the engine's weights
    else:  # the fused matrices, and a full fine-tune's units gathered in bf16 (the mixed-precision dtype)
        copy = 2 * fused_copy_parameters(arch) + (0 if lora_rank > 0 else 2 * p)
    tokens = prompt_tokens + new_tokens
    kv = rows * tokens * kv_bytes_per_token(_Config(**arch), 2)
    if cache_budget_gib is not None:
        kv = min(kv, cache_budget_gib * GIB)
    n = micro_batch * tokens
    activations = n * h * 2 * arch["num_hidden_layers"] + n * (4 * h + 3 * arch["intermediate_size"]) * 2
    host = 16 * p if offload and lora_rank == 0 else 0
    return Footprint(state=state / GIB, sampler_copy=copy / GIB, kv_cache=kv / GIB,
                     gradients=gradients / GIB, activations=activations / GIB, host=host / GIB)
