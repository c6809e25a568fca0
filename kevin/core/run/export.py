"""A training run's checkpoint as a Hugging Face model: `export_pretrained` writes ``save_pretrained`` output that
transformers, peft and vLLM load, and `push_to_hub` uploads it.

Two forms, by how the run trained and what is asked:

- **full weights** (a full fine-tune, or a LoRA run with ``merge``): ``model.safetensors``, ``config.json`` and
  the tokenizer; ``AutoModelForCausalLM.from_pretrained(out_dir)`` gives `RunDir.trained_model`'s logits.
- **adapter** (a LoRA run without ``merge``): peft's ``adapter_config.json`` and ``adapter_model.safetensors``
  plus the tokenizer; ``AutoPeftModelForCausalLM.from_pretrained(out_dir)`` or
  ``kevin.core.policy.models.load_model(out_dir)`` fetch the base and put the adapter on it. The adapter names its
  base as the run did: a hub id, or a local directory's absolute path. A base that kevin builds itself ("tiny",
  "random:<shape>", "starter...") has no name that ``from_pretrained`` understands, so its adapter could not be
  loaded anywhere: that export is refused, with ``merge`` as the way out.

Either way the tokenizer is saved with ``save_pretrained`` (its chat template included) and ``kevin_export.json``
records the run, the checkpoint, its step and the form. The files are written beside ``out_dir`` and renamed into
place, so ``out_dir`` is either complete or untouched.

Tokenizers of kevin's own models (tiny, starter) are generic fast tokenizers: `load_model(out_dir)` reads them as
saved; elsewhere use ``PreTrainedTokenizerFast.from_pretrained(out_dir)``. transformers 5's ``AutoTokenizer`` builds its own
``Qwen2Tokenizer`` for any Qwen2 config, whose pre-tokenizer splits text unlike the one these were trained with.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from kevin.core.run.rundir import RunDir

__all__ = ["EXPORT_FILE", "ExportError", "adapter_base", "find_run", "export_pretrained", "push_to_hub"]

EXPORT_FILE = "kevin_export.json"


class ExportError(ValueError):
    """An export that cannot be written as asked: not a run, an occupied output directory, an adapter without a
    loadable base."""


def find_run(run_or_checkpoint: str | os.PathLike) -> tuple[RunDir, Path]:
    """(run, checkpoint) of a training run's directory (its latest checkpoint) or of one of its checkpoints."""
    found = RunDir.find(run_or_checkpoint)
    if found is None:
        raise ExportError(f"{run_or_checkpoint} is neither a training run's directory with a checkpoint nor one of "
                          "its checkpoints/step_N directories")
    return found


def adapter_base(name: str) -> str | None:
    """What an adapter of a run on ``name`` names as its base: a local directory's absolute path, a hub id as it is,
    None for the models kevin builds itself (tiny, random:<shape>, starter...), which ``from_pretrained`` cannot
    load."""
    if name in ("tiny", "starter") or name.startswith(("random:", "starter:")):
        return None
    path = Path(name).expanduser()
    return str(path.resolve()) if path.is_dir() else name


def _claim(out: Path, run: RunDir, overwrite: bool) -> Path:
    """The scratch directory beside ``out`` to write into, after refusing an ``out`` that holds files (unless
    ``overwrite``) or that holds the run itself (``overwrite`` would delete it)."""
    if run.path.resolve().is_relative_to(out.resolve()):
        raise ExportError(f"{out} holds the run {run.path}: export to another directory")
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise ExportError(f"{out} is not empty: use --overwrite to replace it, or another --output_dir")
    scratch = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    return scratch


def _replace(scratch: Path, out: Path) -> None:
    """Put the finished ``scratch`` at ``out`` (whatever was there goes)."""
    if out.is_dir() and not out.is_symlink():
        shutil.rmtree(out)
    elif out.exists() or out.is_symlink():
        out.unlink()
    os.replace(scratch, out)


def export_pretrained(run_or_checkpoint: str | os.PathLike, out_dir: str | os.PathLike, *, merge: bool = False,
                      overwrite: bool = False, device: Any = "cpu") -> Path:
    """Write the checkpoint ``run_or_checkpoint`` names (a run: its latest) to ``out_dir`` as ``save_pretrained``
    output: the adapter of a LoRA run, or full weights for a full fine-tune or with ``merge`` (see the module's
    docstring); return ``out_dir``. The model is rebuilt on ``device`` as `RunDir.trained_model` does: fp32 on the
    CPU, a LoRA run's base in bf16 on CUDA when it trained so (half the memory; merged weights then bf16). Raises
    `ExportError` for what cannot be exported as asked."""
    import torch

    run, checkpoint = find_run(run_or_checkpoint)
    saved, out = run.config(), Path(out_dir)
    adapter = bool(saved.get("lora")) and not merge
    base = adapter_base(saved["model"]) if adapter else None
    if adapter and base is None:
        raise ExportError(f"the run's base model {saved['model']!r} is built by kevin, not loaded by "
                          "from_pretrained, so an adapter of it cannot be loaded elsewhere: export full weights with "
                          "--merge (merge=True)")
    scratch = _claim(out, run, overwrite)
    try:
        model, tokenizer = run.trained_model(checkpoint, device=torch.device(device), merge=not adapter)
        if adapter:
            model.peft_config["default"].base_model_name_or_path = base
        model.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        step = json.loads((checkpoint / "meta.json").read_text()).get("step")
        record = {"run": str(run.path.resolve()), "checkpoint": checkpoint.name, "step": step,
                  "model": saved["model"], "lora": bool(saved.get("lora")), "weights": "adapter" if adapter else "full"}
        (scratch / EXPORT_FILE).write_text(json.dumps(record, indent=1) + "\n")
        _replace(scratch, out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def push_to_hub(folder: str | os.PathLike, repo_id: str) -> str:
    """Upload ``folder`` to the model repository ``repo_id`` (created when missing) and return the commit's URL.
    The token is huggingface_hub's own: ``HF_TOKEN`` or the one ``hf auth login`` saved."""
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(repo_id, exist_ok=True)
    info = api.upload_folder(repo_id=repo_id, folder_path=str(folder), commit_message=_commit_message(Path(folder)))
    return info.commit_url


def _commit_message(folder: Path) -> str:
    """"Export <run> <checkpoint>" from the folder's `EXPORT_FILE`, or a plain line without one."""
    if not (folder / EXPORT_FILE).is_file():
        return f"Upload {folder.name}"
    record = json.loads((folder / EXPORT_FILE).read_text())
    return f"Export {Path(record['run']).name} {record['checkpoint']} ({record['weights']} weights)"
