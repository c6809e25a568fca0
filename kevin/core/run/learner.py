"""What a training recipe trains, set up for accelerate: the `accelerator`, and the model with its optimiser
(`build_learner`). The update itself (old log-probs, the GRPO loss, the gradient steps) is the recipe's.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch


def accelerator(*, bf16: bool, project_dir: str, tracker: str = "none") -> Any:
    """An ``accelerate.Accelerator``: one process per GPU (the CPU where there is none), bf16 autocast on CUDA with
    ``bf16``, and the ``tracker`` ("none": none) for `RunDir.start`."""
    from accelerate import Accelerator

    cuda = torch.cuda.is_available()
    return Accelerator(cpu=not cuda, mixed_precision="bf16" if bf16 and cuda else "no", project_dir=project_dir,
                       log_with=None if tracker == "none" else tracker)


@dataclass
class Learner:
    """What one process trains: ``model`` wrapped by accelerate (DDP: the loss's forward and backward), the unwrapped
    ``net`` (sampling, old log-probs, checkpoints), the frozen KL reference ``ref`` (a copy of the initial model of a
    full fine-tune; None without KL, and with LoRA, whose reference is ``net`` with its adapters disabled), the
    ``tokenizer``, the trainable ``params``, the AdamW ``optimizer`` and its warm-up ``scheduler`` (stepped once per
    gradient step)."""

    acc: Any
    model: Any
    net: Any
    ref: Any
    tokenizer: Any
    params: list
    optimizer: Any
    scheduler: Any


def build_learner(acc: Any, model: str, *, seed: int, bf16: bool, lora_rank: int, gradient_checkpointing: bool,
                  lr: float, weight_decay: float, warmup_steps: int, kl_reference: bool) -> Learner:
    """The `Learner` of ``model`` (a name for `kevin.core.policy.models.load_model`; ``lora_rank`` > 0: LoRA adapters
    are trained), identical on every process (``seed``): AdamW at ``lr`` after ``warmup_steps`` of linear warm-up, then
    constant; a frozen copy of the initial model as ``ref`` when ``kl_reference`` and no LoRA."""
    from accelerate.utils import set_seed

    from kevin.core.policy.models import load_model

    set_seed(seed)  # identical model init on every process
    net, tokenizer = load_model(model, device=acc.device, seed=seed, bf16=bf16, lora_rank=lora_rank,
                                gradient_checkpointing=gradient_checkpointing)
    ref = copy.deepcopy(net).eval().requires_grad_(False) if kl_reference and lora_rank <= 0 else None
    params = [p for p in net.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    warmup = max(1, warmup_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda u: min(1.0, (u + 1) / warmup))
    wrapped, optimizer = acc.prepare(net, optimizer)  # DDP over processes; the scheduler is stepped by hand
    return Learner(acc, wrapped, acc.unwrap_model(wrapped), ref, tokenizer, params, optimizer, scheduler)
