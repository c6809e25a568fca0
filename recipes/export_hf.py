"""Export a training run as a Hugging Face model: ``save_pretrained`` output that transformers, peft and vLLM load.

A tool, not training. The run's checkpoint (``--checkpoint``: a step or a checkpoint directory; by default the latest)
goes to ``--output_dir`` through `kevin.core.run.export.export_pretrained`: a LoRA run's adapter (its base must be a
hub id or a local ``from_pretrained`` directory), or full weights with ``--merge`` and for a full fine-tune; with the
tokenizer (chat template included) and ``kevin_export.json`` (run, checkpoint, step, form). ``--push_to_hub
user/name`` then uploads the folder; the token is huggingface_hub's (``HF_TOKEN``, or ``hf auth login``).

    python recipes/export_hf.py --run runs/starter --output_dir exports/starter --merge
    python recipes/export_hf.py --run runs/kevin-7b --checkpoint 40 --output_dir exports/kevin-7b-adapter
    python recipes/export_hf.py --run runs/kevin-7b --output_dir exports/kevin-7b --merge --push_to_hub me/kevin-7b
    vllm serve exports/kevin-7b          # or AutoModelForCausalLM.from_pretrained, recipes/evaluate.py --model
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from kevin.core.run.checkpoint import checkpoint_path
from kevin.core.run.cli import ConfigError, parse_config
from kevin.core.run.export import EXPORT_FILE, ExportError, export_pretrained, push_to_hub


@dataclass(frozen=True)
class Config:
    run: str | None = None
    """the training run's output directory"""
    checkpoint: str | None = None
    """a step of the run (12) or a checkpoint directory; default: the run's latest checkpoint"""
    output_dir: str | None = None
    """where the save_pretrained files go (refused when it holds files, unless --overwrite)"""
    merge: bool = False
    """a LoRA run: merge the adapter into the base and write full weights (a full fine-tune always does)"""
    overwrite: bool = False
    """replace what output_dir holds"""
    device: str = "cpu"
    """where the model is rebuilt: cpu (fp32), or cuda (a LoRA run's base in bf16 as in training: half the memory)"""
    push_to_hub: str | None = None
    """upload the export to this Hugging Face model repository (user/name; created when missing)"""


def checkpoint_of(cfg: Config) -> Path:
    """The run directory or checkpoint that ``--run`` and ``--checkpoint`` name."""
    if cfg.checkpoint is None:
        return Path(cfg.run)
    if cfg.checkpoint.isdigit():
        return checkpoint_path(Path(cfg.run) / "checkpoints", int(cfg.checkpoint))
    return Path(cfg.checkpoint)


def main(argv: list[str]) -> Path:
    cfg = parse_config(Config, argv)
    if not cfg.run or not cfg.output_dir:
        raise SystemExit("--run (a training run's directory) and --output_dir (where the export goes) are needed")
    try:
        out = export_pretrained(checkpoint_of(cfg), cfg.output_dir, merge=cfg.merge, overwrite=cfg.overwrite,
                                device=cfg.device)
    except ExportError as exc:
        raise SystemExit(f"{Path(__file__).name}: {exc}") from None
    record = json.loads((out / EXPORT_FILE).read_text())
    print(f"{record['checkpoint']} of {record['run']} ({record['weights']} weights) -> {out}")
    if cfg.push_to_hub:
        print(f"uploaded to {cfg.push_to_hub}: {push_to_hub(out, cfg.push_to_hub)}")
    return out


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except ConfigError as exc:  # a mistyped option: say so, without a traceback
        raise SystemExit(f"{Path(__file__).name}: {exc}") from None
