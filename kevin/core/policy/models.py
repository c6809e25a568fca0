"""`load_model`: the (model, tokenizer) a recipe trains, from one name: "tiny", "random:<shape>" or a hub id."""

from __future__ import annotations

from typing import Any

import torch


def load_model(name: str, *, device: torch.device, seed: int = 0, bf16: bool = True, lora_rank: int = 0,
               gradient_checkpointing: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer) on ``device``; ``lora_rank`` > 0 wraps it in a peft LoRA (alpha = 2 x rank, every linear).

    "tiny": the random CPU policy of `kevin.core.policy.tiny` (``seed`` fixes its weights); "random:<shape>": a
    real architecture with random weights, built on ``device`` directly; anything else goes to
    ``from_pretrained`` (left padding, the EOS token as padding when there is none). Weights are bf16 only for a
    LoRA on CUDA with ``bf16`` (the frozen base); a full fine-tune keeps fp32 weights under bf16 autocast.
    """
    dtype = torch.bfloat16 if bf16 and lora_rank > 0 and device.type == "cuda" else torch.float32
    if name == "tiny" or name.startswith("random:"):
        from kevin.core.policy.tiny import build_random_model, build_tiny_model, build_tiny_tokenizer
        tokenizer = build_tiny_tokenizer()
        if name == "tiny":
            model = build_tiny_model(tokenizer, seed=seed).to(device)
        else:
            model = build_random_model(name.split(":", 1)[1], tokenizer, device=device, dtype=dtype)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(name, padding_side="left")
        tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype).to(device)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora_rank > 0:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
    return model, tokenizer
