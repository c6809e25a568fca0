"""Single-turn GRPO baseline for kernel writing: ``recipes/train_multiturn.py`` with one turn.

It runs the multi-turn recipe's own ``main`` (the same loop, reward path, loss, logging, checkpoints, resume and
accelerate sharding), so that the two compare as in the paper's Fig. 2 / section 3.3 (single-turn training plateaus;
multi-turn keeps rising). It differs from the multi-turn recipe in these defaults only, and every option is the same:

1. ``n_turns = 1``: each of the 16 samples per task is one independent attempt; no sandbox feedback is ever shown
   to the model, and a sample's return is its own score (gamma has nothing to discount). Advantages are normalised
   per task over its 16 samples (the paper's single-turn GRPO).
2. ``grad_clip = 0.5``: the blog's single-turn setting (the multi-turn recipe uses the 0.05 fix).
3. ``output_dir = runs/singleturn`` (and ``runs/starter-singleturn`` or ``runs/tiny-singleturn`` for the CPU
   presets of ``--model starter`` and ``--model tiny``, otherwise the multi-turn ones); the tracker's project is "kevin-singleturn" and the report's title "Single-turn GRPO run".

Launch:
    python recipes/train_singleturn.py                      # CPU: the starter policy on 4 tasks, CPU sandbox
    python recipes/train_singleturn.py --model Qwen/Qwen2.5-7B-Instruct --lora --backend cuda   # one GPU
    accelerate launch --num_processes 8 recipes/train_singleturn.py --config recipes/configs/kevin-32b.yaml \\
        --output_dir runs/singleturn-32b                                                       # 8 GPUs
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from recipes import train_multiturn as multiturn


@dataclass(frozen=True)
class Config(multiturn.Config):
    n_turns: int = 1
    """T: turns per trajectory; 1 = single-turn GRPO (no feedback)"""
    grad_clip: float = 0.5
    """max gradient norm (the blog's single-turn setup: 0.5; Kevin's stability fix: 0.05)"""
    output_dir: str = "runs/singleturn"
    """metrics.jsonl, config.json, rollouts/, checkpoints/, report.md go here"""


PRESETS = {name: {**preset, "n_turns": 1, "output_dir": f"{preset['output_dir']}-singleturn"}
           for name, preset in multiturn.PRESETS.items()}
RECIPE = dict(config=Config, presets=PRESETS, title="Single-turn GRPO run", project="kevin-singleturn")

if __name__ == "__main__":
    multiturn.cli(sys.argv[1:], **RECIPE)
