"""`load_model`: the (model, tokenizer) a recipe trains, from one name: "tiny", "starter", "random:<shape>" or a hub id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def load_model(name: str, *, device: torch.device, seed: int = 0, bf16: bool = True, lora_rank: int = 0,
               gradient_checkpointing: bool = False, empty: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer) on ``device``; ``lora_rank`` > 0 wraps it in a peft LoRA (alpha = 2 x rank, every linear).

    "tiny": the random CPU policy of `kevin.core.policy.tiny` (``seed`` fixes its weights); "starter",
    "starter:<backend>" or "starter:<backend>:<shape>": the warm-started policy of `kevin.core.policy.starter` for
    that backend ("cpu" by default) and layout ("small" by default), read from its cache and trained there first when
    it is missing (``seed`` does not change it: the starter's own seed is its config's), or a directory a starter was
    saved in (``recipes/warmstart.py --output_dir``); "random:<shape>": a
    real architecture with random weights drawn from ``seed``, built on ``device`` directly; anything else goes to
    ``from_pretrained`` (left padding, the EOS token as padding when there is none). Weights are bf16 only for a
    LoRA on CUDA with ``bf16`` (the frozen base); a full fine-tune keeps fp32 weights under bf16 autocast.
    Dropout is switched off (`disable_dropout`).

    ``empty``: for a process whose weights will come from another's (FSDP2 broadcasts the main process's copy while
    sharding): a hub model, "random:<shape>" or "tiny" is built from its config with every parameter on the meta
    device (accelerate's ``init_empty_weights``: nothing read or initialised, buffers real), so the weights are read
    once per node, not once per process. A starter loads as usual (a few million weights).
    """
    dtype = torch.bfloat16 if bf16 and lora_rank > 0 and device.type == "cuda" else torch.float32
    if name == "starter" or name.startswith("starter:"):
        from kevin.core.policy.starter import load_starter
        _, backend, shape = (name.split(":") + [None, None])[:3]
        model, tokenizer = load_starter(backend or "cpu", shape=shape, device=device)
        model = model.to(dtype)
    elif (Path(name).expanduser() / "starter.json").is_file():
        from kevin.core.policy.starter import load_starter_dir  # its tokenizer must not go through AutoTokenizer
        model, tokenizer = load_starter_dir(name, device=device)
        model = model.to(dtype)
    elif name == "tiny" or name.startswith("random:"):
        from kevin.core.policy.tiny import build_random_model, build_tiny_model, build_tiny_tokenizer
        tokenizer = build_tiny_tokenizer()
        with _empty_weights(empty):
            if name == "tiny":
                model = build_tiny_model(tokenizer, seed=seed)
                model = model if empty else model.to(device)
            else:  # drawn from ``seed`` alone, so that another process (a continued evaluation) draws the same
                with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                    torch.manual_seed(seed)
                    model = build_random_model(name.split(":", 1)[1], tokenizer, device=device, dtype=dtype)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        check_model_name(name)
        tokenizer = saved_generic_tokenizer(name) or AutoTokenizer.from_pretrained(name, padding_side="left")
        tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
        if empty:
            model = _empty_pretrained(name, dtype)
        else:
            model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype).to(device)
    if empty:  # built under init_empty_weights, a tied output layer is a second meta tensor until tied again
        model.tie_weights()
    disable_dropout(model)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora_rank > 0:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
    return model, tokenizer


def weights_fingerprint(model: Any, values: int = 16) -> str | None:
    """A digest of a model's weights: every parameter's name, shape and dtype and ``values`` of its entries, evenly
    spaced (None for what is no torch module, e.g. an API model's name). Cheap at 7B (a gather per tensor); two
    models with the same fingerprint hold the same weights unless they differ only between the sampled entries. A
    continued evaluation checks with it that it samples the model that began it (a random model drawn again on
    another machine, a checkpoint replaced meanwhile)."""
    import hashlib

    if not isinstance(model, torch.nn.Module):
        return None

    digest = hashlib.sha256()
    with torch.no_grad():
        for name, p in model.named_parameters():
            flat = p.detach().reshape(-1)
            k = min(values, flat.numel())  # integer steps: a float linspace overshoots the last index at 7B sizes
            picked = flat[torch.arange(k, device=flat.device) * (flat.numel() - 1) // max(k - 1, 1)]
            digest.update(f"{name}:{tuple(p.shape)}:{p.dtype}:".encode())
            digest.update(picked.float().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def _empty_weights(empty: bool) -> Any:
    """accelerate's ``init_empty_weights`` (parameters made on the meta device) when ``empty``, else nothing."""
    import contextlib

    if not empty:
        return contextlib.nullcontext()
    from accelerate import init_empty_weights

    return init_empty_weights()


def _empty_pretrained(name: str, dtype: Any) -> Any:
    """The hub model ``name`` built from its config with meta parameters, and its own generation config (the EOS
    tokens sampling stops at), reading no weights."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    with _empty_weights(True):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(name), dtype=dtype)
    try:
        model.generation_config = GenerationConfig.from_pretrained(name)
    except OSError:  # the model has none: from_config's, made from its config
        pass
    return model


def saved_generic_tokenizer(name: str) -> Any | None:
    """The tokenizer of a local directory that saved a generic one (the tiny model's, an exported starter's), read as
    saved; None otherwise. ``AutoTokenizer`` would build the class its ``config.json``'s model type maps to (for
    Qwen2, ``Qwen2Tokenizer``, whose pre-tokenizer splits text differently from the saved one)."""
    import json

    path = Path(name).expanduser() / "tokenizer_config.json"
    if not path.is_file():
        return None
    if json.loads(path.read_text()).get("tokenizer_class") not in ("TokenizersBackend", "PreTrainedTokenizerFast"):
        return None
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast.from_pretrained(name, padding_side="left")


class ModelNameError(ValueError):
    """A ``--model`` that names no model: a local path that does not exist, or a training run's directory."""


def check_model_name(name: str) -> None:
    """Raise `ModelNameError` for a name that is meant as a local path but names no model, before ``from_pretrained``
    would take it for a hub id (and, offline, retry the hub for a minute):

    - a path that does not exist and starts with ``.``, ``/`` or ``~``, or whose first component is a local directory
      of training runs (``runs/x`` where ``runs/`` holds runs: a hub id such as ``Qwen/QwQ-32B`` is left alone even
      where a ``Qwen/`` folder of downloads exists);
    - a training run's output directory (``config.json`` and ``checkpoints/``): its weights are in its checkpoints.
    """
    path = Path(name).expanduser()
    if path.is_dir() and (path / "checkpoints").is_dir() and (path / "config.json").is_file() \
            and not (path / "model.safetensors").exists():
        raise ModelNameError(f"{name} is a training run's directory, not a model: continue it with --resume latest "
                             f"--output_dir {name}, or evaluate it with recipes/evaluate.py --model {name}")
    if path.exists():
        return
    if name.startswith((".", "/", "~")):
        raise ModelNameError(f"--model {name}: no such local directory")
    parts = Path(name).parts
    runs = Path(parts[0]) if len(parts) > 1 else None
    if runs is not None and runs.is_dir() and any((d / "checkpoints").is_dir() for d in runs.iterdir() if d.is_dir()):
        raise ModelNameError(f"--model {name}: no such local directory (and {parts[0]}/ holds training runs, so it is "
                             "not meant as a Hugging Face id)")


def disable_dropout(model: Any) -> int:
    """Set every dropout of ``model`` to 0 and return how many were not: each ``nn.Dropout``-like module's ``p``, each
    module's float ``*dropout`` attribute (transformers' attention passes ``attention_dropout`` to sdpa in training
    mode), and the float ``*dropout`` fields of the model's configs (some forwards read them there).

    RL needs it: the sampler draws in eval mode, while the loss's forward runs in training mode (gradient
    checkpointing needs it), so with dropout the first update's ratio new / old would not start at 1. (TRL's trainers
    do the same: ``disable_dropout``.)
    """
    from torch import nn

    changed = 0
    configs = [getattr(m, "config", None) for m in model.modules()]  # some models read the config in forward
    for config in {id(c): c for c in configs if c is not None and hasattr(c, "to_dict")}.values():
        for name, value in list(vars(config).items()):
            if "dropout" in name and isinstance(value, float):
                changed += value != 0
                setattr(config, name, 0.0)
    for module in model.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd):
            changed += module.p != 0
            module.p = 0.0
        for name, value in list(vars(module).items()):
            if "dropout" in name and isinstance(value, float) and not isinstance(value, bool):
                changed += value != 0
                setattr(module, name, 0.0)
    return changed
