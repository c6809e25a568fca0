"""Check that sharding over processes leaves the loss alone: the loss, mean log-prob and gradient norm of one saved batch.

A tool, not training: it loads a rollout that a training run saved (``<run>/rollouts/step_N.jsonl.gz``), deals its
trajectories over the processes exactly as ``recipes/train_multiturn.py`` does (contiguous blocks,
`kevin.core.run.shards.trajectory_share`: any number of processes), builds the model (replicated, or sharded when
launched for FSDP2) and computes the loss and gradient with the recipe's own functions (``behaviour_logprobs``,
``micro_loss``, `minibatches_everywhere`), over the whole batch as one mini-batch, and prints one JSON line per process
(``debug/loss``, ``debug/logprob_mean``, ``debug/grad_norm``, ...). Run on 1 and on N processes, DDP or FSDP2, the
numbers must agree.

A random model earns nothing (every advantage 0, so a zero gradient) and group-normalised advantages make the loss
about 0; to compare shardings on a non-zero loss, every turn scores a fixed function of its tokens, sum(ids) % 5 / 4,
and its (unnormalised) discounted return is its advantage.

Every option of the training recipe applies (the model, LoRA, the loss), plus ``--rollout_file``:
    python recipes/check_sharding.py --model random:qwen2.5-1.5b --lora --rollout_file runs/x/rollouts/step_000001.jsonl.gz
    accelerate launch --num_processes 2 recipes/check_sharding.py --model random:qwen2.5-1.5b --lora \\
        --rollout_file runs/x/rollouts/step_000001.jsonl.gz
    torchrun --nproc_per_node 2 recipes/check_sharding.py --rollout_file ...     # CPU: gloo
    accelerate launch --config_file recipes/configs/accelerate/fsdp2.yaml recipes/check_sharding.py --rollout_file ...
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from kevin.core.records import load_rollout
from kevin.core.run.cli import parse_run_config
from kevin.core.run.learner import accelerator, build_learner
from kevin.core.run.shards import minibatches_everywhere, trajectory_share
from kevin.core.split import split_trajectories
from kevin.rewards import aggregate_rewards
from recipes import train_multiturn as multiturn


@dataclass(frozen=True)
class Config(multiturn.Config):
    rollout_file: str = ""
    """the saved rollout (a training run's rollouts/step_N.jsonl.gz) whose loss and gradient are computed"""


def main(argv: list[str]) -> None:
    from accelerate.utils import gather_object

    cfg = parse_run_config(Config, argv, presets=multiturn.PRESETS)
    if not cfg.rollout_file:
        raise SystemExit("--rollout_file: the saved rollout to compute the loss of")
    acc = accelerator(bf16=cfg.bf16, project_dir=cfg.output_dir)
    rank, world = acc.process_index, acc.num_processes
    lrn = build_learner(acc, cfg.model, seed=cfg.seed, bf16=cfg.bf16, lora_rank=cfg.lora_rank if cfg.lora else 0,
                        gradient_checkpointing=cfg.gradient_checkpointing, lr=cfg.lr, weight_decay=cfg.weight_decay,
                        warmup_steps=math.ceil(cfg.warmup_ratio * cfg.steps * cfg.n_minibatches),
                        kl_reference=cfg.kl_coef > 0)
    trajectories = load_rollout(cfg.rollout_file)  # task-major, B*G
    n_tasks = len({t.task_id for t in trajectories})
    share = trajectory_share(n_tasks, len(trajectories) // n_tasks, rank, world)
    mine = [trajectories[b * (len(trajectories) // n_tasks) + g] for b, g in share]
    scores = torch.tensor([[sum(u.response_ids) % 5 / 4 for u in t.turns] for t in mine])  # [B*G, T]
    returns = aggregate_rewards(scores, gamma=cfg.gamma, mode=cfg.reward_mode).flatten()  # [N]
    samples = split_trajectories(mine, returns, returns)
    mini = minibatches_everywhere(acc, samples, 1, seed=0, pad_id=lrn.tokenizer.pad_token_id,
                                  micro_batch_size=cfg.micro_batch_size)[0]

    lrn.model.train()
    sums = torch.zeros(3, device=acc.device)  # loss, sum of token log-probs, tokens
    for i, (mb, keep) in enumerate(zip(mini.micros, mini.keep)):
        old, ref = multiturn.behaviour_logprobs(cfg, lrn, mb)
        with acc.no_sync(lrn.model) if i < len(mini.micros) - 1 else torch.enable_grad():
            loss, _, _ = multiturn.micro_loss(cfg, lrn, mb, mini, mb.old_logprobs if mb.old_logprobs is not None
                                              else old, ref, cfg.max_new_tokens, keep)
            acc.backward(loss)
        sums += torch.stack([loss.detach().float(), keep * (old * mb.mask).sum(), keep * mb.mask.sum()])
    grad_norm = lrn.clip_gradients(float("inf"))  # the whole gradient's norm, replicated or sharded
    loss_sum, lp_sum, n_tok = acc.reduce(sums, "sum").tolist()
    result = {"debug/processes": world, "debug/rank": rank, "debug/sharded": lrn.sharded,
              "debug/tasks": sorted({t.task_id for t in mine}), "debug/samples": len(samples),
              "debug/loss": loss_sum / world, "debug/logprob_mean": lp_sum / n_tok, "debug/grad_norm": grad_norm.item()}
    for r in gather_object([result]):
        acc.print(json.dumps(r))
    acc.end_training()  # the process group closed before exit


if __name__ == "__main__":
    multiturn.cli(sys.argv[1:], main)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # The results are printed and the process group is closed, yet a gloo process sometimes aborted in the
        # interpreter's teardown ("terminate called without an active exception": 1 launch in 8 on a busy 2-core
        # machine), failing the whole launch: it leaves at once instead.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
