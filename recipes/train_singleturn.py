"""Single-turn GRPO baseline for kernel writing: recipes/train_multiturn.py with one turn.

This is a copy of ``train_multiturn.py`` (Kevin) with exactly these differences, so that the two can be
compared as in the paper's Fig. 2 / section 3.3 (single-turn training plateaus; multi-turn keeps rising):

1. ``n_turns = 1``: each of the 16 samples per task is one independent attempt; no sandbox feedback is
   ever shown to the model, and a sample's return is its own score (gamma has nothing to discount).
   Advantages are normalised per task over its 16 samples (the paper's single-turn GRPO).
2. ``grad_clip = 0.5``: the blog's single-turn setting (the multi-turn recipe uses the 0.05 fix).
3. ``output_dir = runs/singleturn`` (and ``runs/tiny-singleturn`` for the tiny preset).

Everything else -- model, LoRA, sampling, score, loss, optimiser, logging, checkpoints, resume,
accelerate sharding -- is the same code. Edit one and you will usually want to edit the other.

Launch:
    python recipes/train_singleturn.py                      # CPU: tiny random policy, CPU sandbox, minutes
    python recipes/train_singleturn.py --model Qwen/Qwen2.5-7B-Instruct --lora --backend cuda   # one GPU
    accelerate launch --num_processes 8 recipes/train_singleturn.py --model Qwen/QwQ-32B --lora \\
        --lora_rank 64 --backend cuda --output_dir runs/singleturn-32b                          # 8 GPUs
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from kevin.core.advantages import group_advantages
from kevin.core.batch import collate, loss_weight, micro_batches, response_logprobs, split_minibatches
from kevin.core.run.checkpoint import (checkpoint_path, latest_checkpoint, load_checkpoint, prune_checkpoints,
                                   restore_training_state, rng_state, save_checkpoint, training_state)
from kevin.core.run.cli import ConfigError, check_training_config, log_to_stderr, parse_run_config
from kevin.core.loss import grpo_loss
from kevin.core.eval.metrics import metrics_dict
from kevin.core.policy.models import ModelNameError, load_model
from kevin.core.records import load_rollout, save_rollout
from kevin.core.rollout import rollout
from kevin.core.split import group_labels, split_trajectories
from kevin.core.run.loggers import AccelerateLogger, JsonlLogger, MultiLogger, NullLogger, drop_records_from
from kevin.core.run.rundir import claim_output_dir, write_run_report
from kevin.rewards import aggregate_rewards, turn_scores


@dataclass(frozen=True)
class Config:
    model: str = "tiny"
    """"tiny" (random 2-layer Qwen2, CPU-sized), a Hugging Face id or path, or "random:qwen2.5-1.5b" /
    "random:qwen2.5-7b" (that architecture, randomly initialised, with the tiny tokenizer: for speed tests)"""
    lora: bool = False
    """train LoRA adapters (peft) instead of every weight (the paper fully fine-tunes)"""
    lora_rank: int = 32
    """LoRA rank r (alpha = 2r, all linear layers)"""
    bf16: bool = True
    """bf16 autocast on CUDA (LoRA: bf16 base weights, fp32 adapters); ignored on CPU"""
    gradient_checkpointing: bool = True
    """recompute activations in the backward pass (needed for 16k-token responses)"""
    tasks: str = "builtin"
    """"builtin" (our suite, train split) or a path / datasets id for kevin.data.load_tasks"""
    calibrate_tasks: bool = True
    """drop loaded tasks that a fake passes (zeros, a constant, the input, a subsample: kevin.sandbox.calibrate),
    e.g. a KernelBench task whose output is constant; the built-in suite is vetted by its tests"""
    tasks_per_step: int = 8
    """B: tasks per step (paper: 8), sharded over processes"""
    n_trajectories: int = 16
    """G: parallel trajectories per task (paper: 16)"""
    n_turns: int = 1
    """T: turns per trajectory; 1 = single-turn GRPO (no feedback)"""
    max_new_tokens: int = 16384
    """response budget per turn (paper: 16k, 22k after step 30)"""
    max_prompt_tokens: int | None = 8192
    """prompt budget; the earliest attempts are dropped first (None: no budget)"""
    temperature: float = 0.9
    """sampling temperature, also used for the log-probs of the loss (paper: 0.9)"""
    top_p: float = 1.0
    """nucleus sampling (not stated in the paper)"""
    generation_mode: str = "auto"
    """TransformersPolicy engine: auto, generate, static, continuous"""
    release_sampling_memory: bool = True
    """free the static KV cache and fused weights for the training phase (7B x 16 rows: 10.6 GiB; the next rollout's
    first call took 6.51 s against 6.49 s, benchmarks/results/generation_h200.md run 37)"""
    backend: str = "cuda"
    """sandbox backend: "cuda" kernels on this process's GPU or "cpu" C++ kernels"""
    correctness_weight: float = 0.3
    """S = w * correct + speedup * correct (paper: 0.3)"""
    speedup_cap: float | None = None
    """cap on the speedup term of S (paper: none)"""
    gamma: float = 0.4
    """discount of later turns' scores in a turn's return (paper: 0.4)"""
    reward_mode: str = "sum"
    """"sum" R_t = sum_i gamma^(i-t) S_i (paper) or "max" R_t = max_i gamma^(i-t) S_i"""
    advantage_per_turn: bool = False
    """False: one group per task over all G*T samples (paper); True: one group per (task, turn)"""
    scale_by_std: bool = True
    """divide advantages by the group's std (GRPO, paper Eq. 1) or not (Dr. GRPO)"""
    clip_low: float = 0.2
    """ratio clipped below at 1 - clip_low (paper: 0.2)"""
    clip_high: float = 0.28
    """ratio clipped above at 1 + clip_high (clip-higher, paper: 0.28)"""
    kl_coef: float = 0.0
    """beta of the k3 KL to the initial model (paper: 0; LoRA: the adapter-disabled base)"""
    loss_aggregation: str = "seq-mean-token-mean"
    """seq-mean-token-mean (paper Eq. 1), token-mean (DAPO), seq-mean-token-sum-norm (Dr. GRPO)"""
    lr: float = 2e-6
    """AdamW learning rate, constant after warm-up (blog: 2e-6)"""
    warmup_ratio: float = 0.03
    """share of all optimizer steps spent in linear warm-up (blog: 0.03)"""
    weight_decay: float = 0.0
    """AdamW weight decay (not stated in the paper)"""
    grad_clip: float = 0.5
    """max gradient norm (the blog's single-turn setup: 0.5; Kevin's stability fix: 0.05)"""
    n_minibatches: int = 2
    """gradient steps per batch, each on its own mini-batch (paper: 2)"""
    micro_batch_size: int = 4
    """samples per forward/backward; gradients are accumulated over a mini-batch"""
    steps: int = 40
    """RL steps (paper: 40 steps = 80 gradient steps)"""
    seed: int = 0
    """seed of the task sampler, model init and sampling"""
    output_dir: str = "runs/singleturn"
    """metrics.jsonl, config.json, rollouts/, checkpoints/, report.md go here"""
    tracker: str = "none"
    """also log to this accelerate tracker: none, tensorboard, trackio, wandb, ..."""
    checkpoint_every: int = 1
    """save a checkpoint every this many steps (and after the last)"""
    keep_checkpoints: int = 2
    """how many recent checkpoints to keep (0: all)"""
    resume: str = ""
    """"" fresh run; "latest" the newest checkpoint in output_dir; or a checkpoint directory"""
    overwrite: bool = False
    """start afresh in an output_dir that holds an earlier run: its config, metrics, rollouts, checkpoints and report
    are deleted first (without it the recipe refuses, so that nothing is mixed or lost)"""
    peak_flops: float = 989e12
    """peak bf16 FLOP/s of one device, for the MFU estimate (H100/H200 dense: 989e12)"""
    debug_fixed_batch: str = ""
    """a saved rollout file: compute loss and gradient norm on it (sharded like training), print, exit"""


# CPU-sized defaults used when --model tiny (anything on the command line still wins).
TINY = dict(tasks_per_step=2, n_trajectories=4, n_turns=1, max_new_tokens=32, max_prompt_tokens=None, backend="cpu",
            bf16=False, gradient_checkpointing=False, steps=3, micro_batch_size=8, lr=1e-4, output_dir="runs/tiny-singleturn")


def build_model(cfg: Config, device: torch.device):
    """(model, tokenizer) for cfg.model on ``device``, LoRA-wrapped when cfg.lora (also rebuilt by evaluate.py)."""
    return load_model(cfg.model, device=device, seed=cfg.seed, bf16=cfg.bf16,
                      lora_rank=cfg.lora_rank if cfg.lora else 0, gradient_checkpointing=cfg.gradient_checkpointing)


def main(argv: list[str]) -> None:
    cfg = parse_run_config(Config, argv, presets={"tiny": TINY})  # --resume: the run's own config.json underneath
    check_training_config(cfg)  # bad reward / loss / sampling options stop here, before any work

    # ------------------------------------------------------------------ setup (accelerate, model, data)
    from accelerate import Accelerator
    from accelerate.utils import broadcast_object_list, gather_object, set_seed
    from tqdm.auto import tqdm

    from kevin.core.policy import TransformersPolicy
    from kevin.data import BatchSampler, builtin_tasks, load_tasks
    from kevin.sandbox import Sandbox, SandboxConfig
    from kevin.sandbox.calibrate import usable_tasks

    cuda = torch.cuda.is_available()
    acc = Accelerator(cpu=not cuda, mixed_precision="bf16" if cfg.bf16 and cuda else "no", project_dir=cfg.output_dir,
                      log_with=None if cfg.tracker == "none" else cfg.tracker)
    rank, world, main_proc = acc.process_index, acc.num_processes, acc.is_main_process
    if cfg.tasks_per_step % world:
        raise SystemExit(f"--tasks_per_step {cfg.tasks_per_step} must be a multiple of the {world} processes")
    out = Path(cfg.output_dir)
    claim_output_dir(acc, out, fresh=not cfg.resume and not cfg.debug_fixed_batch, overwrite=cfg.overwrite,
                     broadcast=broadcast_object_list)
    set_seed(cfg.seed)  # identical model init on every process
    model, tokenizer = build_model(cfg, acc.device)
    ref_model = None
    if cfg.kl_coef > 0 and not cfg.lora:  # with LoRA the reference is the base model, adapters disabled
        import copy
        ref_model = copy.deepcopy(model).eval().requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    total_updates = cfg.steps * cfg.n_minibatches
    warmup = max(1, math.ceil(cfg.warmup_ratio * total_updates))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda u: min(1.0, (u + 1) / warmup))
    model, optimizer = acc.prepare(model, optimizer)  # DDP over processes; the scheduler is stepped by hand
    net = acc.unwrap_model(model)
    n_params = sum(p.numel() for p in net.parameters())
    policy = TransformersPolicy(net, tokenizer, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                                top_p=cfg.top_p, mode=cfg.generation_mode)

    all_tasks = builtin_tasks(split="train") if cfg.tasks == "builtin" else load_tasks(cfg.tasks)
    if not all_tasks:
        raise SystemExit(f"--tasks {cfg.tasks}: no tasks loaded")
    device = f"cuda:{acc.local_process_index}" if cfg.backend == "cuda" else "cpu"
    if cfg.tasks != "builtin" and cfg.calibrate_tasks:  # one seed on every process: they keep the same tasks
        all_tasks, dropped = usable_tasks(all_tasks, device=device, seed=cfg.seed)
        acc.print(f"calibration: dropped {len(dropped)} of {len(all_tasks) + len(dropped)} tasks that a fake passes: {dropped[:20]}")
    sampler = BatchSampler(all_tasks, cfg.tasks_per_step, seed=cfg.seed)
    sandbox = Sandbox(device=device, config=SandboxConfig(workers=max(1, (os.cpu_count() or 1) // world)))

    def old_and_ref_logprobs(mb):
        """Behaviour (and reference) log-probs of a micro-batch, before any update of this batch."""
        with torch.no_grad():
            old = response_logprobs(net, mb, temperature=cfg.temperature)
            if cfg.kl_coef <= 0:
                return old, None
            if ref_model is not None:
                return old, response_logprobs(ref_model, mb, temperature=cfg.temperature)
            with net.disable_adapter():
                return old, response_logprobs(net, mb, temperature=cfg.temperature)

    def tokens_everywhere(mini):
        """The mini-batch's response tokens summed over the processes (for the token-mean's weights)."""
        return acc.reduce(mini.mask.sum().float(), "sum").item()

    def loss_of(mb, mini, old, ref, mini_tokens):
        """GRPO loss of a micro-batch times its weight w: summed over a mini-batch (and averaged over processes),
        the mini-batch's loss."""
        lp = response_logprobs(model, mb, temperature=cfg.temperature)
        loss, stats = grpo_loss(lp, old, mb.advantages, mb.mask, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                                kl_coef=cfg.kl_coef, ref_logprobs=ref, aggregation=cfg.loss_aggregation,
                                max_response_len=cfg.max_new_tokens)
        w = loss_weight(mb, mini, cfg.loss_aggregation, tokens_everywhere=mini_tokens, world=world)
        return loss * w, stats, w

    def samples_of(trajectories):
        """score -> aggregate -> advantages -> split: the paper's reward path, one task group at a time."""
        scores = torch.tensor(turn_scores(trajectories, correctness_weight=cfg.correctness_weight,
                                          speedup_cap=cfg.speedup_cap))  # [B*G, T]
        returns = aggregate_rewards(scores, gamma=cfg.gamma, mode=cfg.reward_mode)  # [B*G, T]
        groups = group_labels(trajectories, per_turn=cfg.advantage_per_turn)
        advantages = group_advantages(returns.flatten(), groups, scale_by_std=cfg.scale_by_std)  # [N]
        return scores, returns, split_trajectories(trajectories, returns.flatten(), advantages)

    if cfg.debug_fixed_batch:  # ---------------------------------- loss on a fixed batch, sharded like training
        trajs = load_rollout(cfg.debug_fixed_batch)
        task_ids = sorted({t.task_id for t in trajs})
        mine = [t for t in trajs if task_ids.index(t.task_id) % world == rank]
        # A random model earns nothing (advantages 0, zero gradient), and normalised advantages make the loss
        # ~0: to compare shardings on a non-zero loss, every turn scores a fixed function of its tokens,
        # sum(ids) % 5 / 4, and its (unnormalised) return is its advantage.
        scores = torch.tensor([[sum(u.response_ids) % 5 / 4 for u in t.turns] for t in mine])  # [B*G, T]
        returns = aggregate_rewards(scores, gamma=cfg.gamma, mode=cfg.reward_mode).flatten()
        samples = split_trajectories(mine, returns, returns)
        batch = collate(samples, tokenizer.pad_token_id).to(acc.device)
        model.train()
        sums = torch.zeros(3, device=acc.device)  # loss, sum of token log-probs, tokens
        micros = micro_batches(batch, cfg.micro_batch_size)
        batch_tokens = tokens_everywhere(batch)
        for i, mb in enumerate(micros):
            old, ref = old_and_ref_logprobs(mb)
            with acc.no_sync(model) if i < len(micros) - 1 else torch.enable_grad():
                loss, _, _ = loss_of(mb, batch, mb.old_logprobs if mb.old_logprobs is not None else old, ref,
                                     batch_tokens)
                acc.backward(loss)
            sums += torch.stack([loss.detach().float(), (old * mb.mask).sum(), mb.mask.sum()])
        grad_norm = torch.norm(torch.stack([p.grad.float().norm() for p in params if p.grad is not None]))
        loss_mean, lp_sum, n_tok = acc.reduce(sums, "sum").tolist()
        result = {"debug/processes": world, "debug/rank": rank, "debug/tasks": sorted({t.task_id for t in mine}),
                  "debug/samples": batch.size, "debug/loss": loss_mean / world, "debug/logprob_mean": lp_sum / n_tok,
                  "debug/grad_norm": grad_norm.item()}
        for r in gather_object([result]):
            acc.print(json.dumps(r))
        return

    # ------------------------------------------------------------------ state: fresh or resumed
    start_step = 0
    if cfg.resume:
        where = latest_checkpoint(out / "checkpoints") if cfg.resume == "latest" else Path(cfg.resume)
        if where is None:
            raise SystemExit(f"--resume latest: no checkpoint under {out / 'checkpoints'}")
        start_step = restore_training_state(load_checkpoint(where), model=net, optimizer=optimizer,
                                            scheduler=scheduler, sampler=sampler, rank=rank)
        saved = json.loads((out / "config.json").read_text()) if (out / "config.json").exists() else {}
        changed = {k: (saved[k], v) for k, v in dataclasses.asdict(cfg).items() if k in saved and saved[k] != v}
        acc.print(f"resumed from {where} at step {start_step}; options changed since (old, new): {changed}")
    else:
        set_seed(cfg.seed, device_specific=True)  # each process samples differently
    logger = NullLogger()
    if main_proc:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=1))
        if start_step:
            drop_records_from(out / "metrics.jsonl", start_step + 1)
        trackers = [AccelerateLogger(acc)] if cfg.tracker != "none" else []
        logger = MultiLogger([JsonlLogger(out / "metrics.jsonl"), *trackers])
        if not start_step:
            logger.log({"config": dataclasses.asdict(cfg)}, step=0)
    if cfg.tracker != "none":
        acc.init_trackers("kevin-singleturn", config={k: str(v) for k, v in dataclasses.asdict(cfg).items()})

    # ------------------------------------------------------------------ the RL loop
    for step in tqdm(range(start_step, cfg.steps), desc="steps", initial=start_step, total=cfg.steps, disable=not main_proc):
        t0 = time.perf_counter()
        tasks = sampler.next_batch()[rank::world]  # the same batch everywhere; this process's share

        # rollout: G trajectories x T turns per task, generation batched over all of them
        model.eval()
        with acc.autocast():
            trajectories = rollout(policy, tasks, sandbox, n_trajectories=cfg.n_trajectories, n_turns=cfg.n_turns,
                                   backend=cfg.backend, max_prompt_tokens=cfg.max_prompt_tokens, progress=False)
        if cfg.release_sampling_memory:
            freed = policy.release_memory()
            if step == start_step and freed:
                acc.print(f"released {freed / 2**20:,.0f} MiB of sampling memory (static cache, fused weights) "
                          "for the training phase, and after every rollout")
        trajectories = [dataclasses.replace(t, task_index=rank + world * t.task_index) for t in trajectories]
        t_rollout = time.perf_counter()

        # score -> aggregate -> advantages (per task, all G*T samples) -> split into one sample per turn
        scores, returns, samples = samples_of(trajectories)

        # old log-probs of every mini-batch first, then one gradient step per mini-batch
        model.train()
        minis = []
        for chunk in split_minibatches(samples, cfg.n_minibatches, seed=cfg.seed * 100003 + step):
            mini = collate(chunk, tokenizer.pad_token_id).to(acc.device)
            micros = micro_batches(mini, cfg.micro_batch_size)
            minis.append((mini, micros, [old_and_ref_logprobs(mb) for mb in micros], tokens_everywhere(mini)))
        updates = []  # one dict of mini-batch statistics per gradient step
        for mini, micros, olds, mini_tokens in minis:
            stats_sum = {}
            for i, (mb, (old, ref)) in enumerate(zip(micros, olds)):
                with acc.no_sync(model) if i < len(micros) - 1 else torch.enable_grad():
                    loss, stats, w = loss_of(mb, mini, old, ref, mini_tokens)
                    acc.backward(loss)
                for k, v in stats.items():
                    stats_sum[k] = stats_sum.get(k, 0.0) + w * v.float()
                stats_sum["loss/total"] = stats_sum.get("loss/total", 0.0) + loss.detach().float()
            grad_norm = acc.clip_grad_norm_(params, cfg.grad_clip).float()  # the same on every process
            finite = bool(torch.isfinite(grad_norm))
            stats_sum["train/grad_norm"] = grad_norm
            stats_sum["train/skipped_update"] = torch.tensor(float(not finite), device=acc.device)
            stats_sum["train/lr"] = torch.tensor(scheduler.get_last_lr()[0], device=acc.device)
            if finite:  # a NaN/inf gradient would turn every weight into NaN: skip the update, and log it
                optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            updates.append(stats_sum)
        t_train = time.perf_counter()

        # log: rollout metrics over every process's trajectories, losses averaged over processes
        tokens = torch.tensor(float(sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)), device=acc.device)
        losses = {k: acc.reduce(torch.stack([u[k] for u in updates]).mean(), "mean").item()
                  for k in updates[0] if k != "tokens"}
        times = acc.reduce(torch.tensor([sum(u.generation_s for t in trajectories for u in t.turns),
                                         sum(u.evaluation_s for t in trajectories for u in t.turns),
                                         t_rollout - t0, t_train - t_rollout], device=acc.device), "max").tolist()
        all_tokens = acc.reduce(tokens, "sum").item()
        everything = gather_object(trajectories)
        all_scores = acc.gather(scores.to(acc.device)).float()
        all_returns = acc.gather(returns.to(acc.device)).float()
        if main_proc:
            save_rollout(everything, out / "rollouts" / f"step_{step + 1:06d}.jsonl.gz")
            metrics = {**metrics_dict(everything), **losses,
                       "reward/score_mean": all_scores.mean().item(), "reward/score_max": all_scores.max().item(),
                       "reward/return_mean": all_returns.mean().item(), "reward/return_std": all_returns.std().item(),
                       "train/samples": float(len(everything) * cfg.n_turns), "train/tokens": all_tokens,
                       "time/generation": times[0], "time/sandbox": times[1], "time/rollout": times[2],
                       "time/train": times[3], "time/step": time.perf_counter() - t0,
                       "perf/train_tokens_per_s": all_tokens / times[3],
                       "perf/mfu": 6 * n_params * all_tokens / times[3] / (cfg.peak_flops * world)}
            if cuda:
                metrics["perf/peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
            logger.log(metrics, step=step + 1)

        # checkpoint: trainable weights, optimizer, scheduler, sampler, every process's RNG (atomic)
        rngs = gather_object([rng_state()])
        if main_proc and ((step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps):
            state = training_state(model=net, optimizer=optimizer, scheduler=scheduler, sampler=sampler, rngs=rngs,
                                   step=step + 1)
            save_checkpoint(checkpoint_path(out / "checkpoints", step + 1), state, meta={"step": step + 1})
            prune_checkpoints(out / "checkpoints", cfg.keep_checkpoints)
        acc.wait_for_everyone()

    # ------------------------------------------------------------------ report
    if main_proc:
        summary = (f"model {cfg.model}; {cfg.tasks_per_step} tasks x {cfg.n_trajectories} trajectories x "
                   f"{cfg.n_turns} turns per step; {world} process(es).")
        report = write_run_report(out, title="Single-turn GRPO run", summary=summary,
                                  checkpoint=latest_checkpoint(out / "checkpoints"))
        acc.print(f"done: {report}")
    logger.close()


if __name__ == "__main__":
    log_to_stderr()  # the library's lines: one per rollout turn, warnings
    try:
        main(sys.argv[1:])
    except (ConfigError, ModelNameError) as exc:  # a mistyped option or model: say so, without a traceback
        raise SystemExit(f"{Path(__file__).name}: {exc}") from None
