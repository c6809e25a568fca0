"""Kevin: multi-turn RL for writing kernels (arXiv 2507.11948), as one script that reads like the paper.

Each RL step: 1. rollout: 8 tasks, 16 trajectories of 4 turns each (the model writes a kernel, the sandbox compiles,
checks and times it, the feedback goes into the next turn's prompt); 2. rewards: every kernel scores
S = 0.3 * correct + speedup * correct, every turn's return is the discounted sum of its own and later scores
(gamma 0.4), advantages are normalised per task over its 16 * 4 samples, every turn is one sample; 3. update: the
behaviour log-probs, then two gradient steps (GRPO, clip 0.2 / 0.28, no KL); 4. log, checkpoint.

How it differs from the paper (docs/method.md):
1. Any Hugging Face causal LM, fully fine-tuned (as the paper's QwQ-32B) or LoRA; ``--generation vllm`` as the paper.
2. The "two gradient steps" split the batch into two shuffled mini-batches, with the old log-probs of both computed
   before the first step: the first step is exactly on-policy, the second slightly off.
3. Gradient clipping 0.05, the paper's stability fix (paired there with Dr. GRPO's normalisation: ``--loss_aggregation
   seq-mean-token-sum-norm``; Eq. 1's token mean stays the default). lr 2e-6 constant after 3% warm-up (the blog's).
4. The step's trajectories are dealt over the processes in blocks (8 tasks on 8 GPUs: one each, as the paper; any
   number otherwise), judged on their own GPU; gradients averaged (DDP) or sharded (FSDP2, not ZeRO-3: recipes/README).

Launch (``--help``: every option, with its documentation; ``--config file.yaml``: options from a file):
    python recipes/train_multiturn.py                       # CPU: the starter policy on 4 tasks, CPU sandbox
    python recipes/train_multiturn.py --model Qwen/Qwen2.5-7B-Instruct --lora --backend cuda   # one GPU
    accelerate launch --num_processes 8 recipes/train_multiturn.py --config recipes/configs/kevin-32b.yaml
    accelerate launch --config_file recipes/configs/accelerate/fsdp2.yaml recipes/train_multiturn.py --model <id>
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from kevin.core.batch import loss_weight, response_logprobs
from kevin.core.loss import grpo_loss, logprob_mismatch, truncated_is_weights
from kevin.core.rollout import rollout
from kevin.core.run.cli import check_training_config, parse_run_config, run_recipe
from kevin.core.run.learner import Learner, accelerator, build_learner, local_processes
from kevin.core.run.shards import (gather_trajectories, minibatches_everywhere, own_samples, place, rollout_layout,
                                   share_tasks, trajectory_share)
from kevin.core.run.rundir import RunConfig, RunDir
from kevin.rewards.samples import rewarded_samples


@dataclass(frozen=True)
class Config(RunConfig):
    model: str = "starter"
    """"starter" (a small Qwen2 warm-started on kernel answers, CPU-sized: recipes/warmstart.py), "tiny" (random
    2-layer Qwen2), a Hugging Face id or path, or "random:qwen2.5-7b" (random weights)"""
    lora: bool = False
    """train LoRA adapters (peft) instead of every weight (the paper fully fine-tunes)"""
    lora_rank: int = 32
    """LoRA rank r (alpha = 2r, all linear layers)"""
    bf16: bool = True
    """bf16 autocast on CUDA (LoRA: bf16 base weights, fp32 adapters); ignored on CPU"""
    gradient_checkpointing: bool = True
    """recompute activations in the backward pass (needed for 16k-token responses)"""
    tasks: str = "builtin"
    """"builtin" (our suite, train split), "builtin:<name>,<name>" (those tasks), a path / datasets id (load_tasks)"""
    calibrate_tasks: bool = True
    """drop loaded (not built-in) tasks that a fake kernel passes, e.g. a constant output (kevin.sandbox.calibrate)"""
    tasks_per_step: int = 8
    """B: tasks per step (paper: 8); the B*G trajectories are dealt over the processes, any number of them"""
    n_trajectories: int = 16
    """G: parallel trajectories per task (paper: 16)"""
    n_turns: int = 4
    """T: refinement turns per trajectory (paper: 4 in training)"""
    stagger: int = 1
    """CUDA: tasks start in this many waves, each generating while others are judged (docs/method.md); 1: at once"""
    max_new_tokens: int = 16384
    """response budget per turn (paper: 16k, raised to 22k after step 30: ``raise_max_new_tokens_by``)"""
    raise_max_new_tokens_by: float = 1.375
    """from RL step ``raise_max_new_tokens_at`` on, the response budget times this (paper: 16k -> 22k; 1: never)"""
    raise_max_new_tokens_at: int = 30
    """how many RL steps run at ``max_new_tokens`` before the raise (paper: 30)"""
    max_prompt_tokens: int | None = 8192
    """prompt budget; the earliest attempts are dropped first (None: no budget)"""
    temperature: float = 0.9
    """sampling temperature, also used for the log-probs of the loss (paper: 0.9)"""
    top_p: float = 1.0
    """nucleus sampling (not stated in the paper)"""
    generation_mode: str = "auto"
    """TransformersPolicy engine: auto, generate, static, continuous"""
    release_sampling_memory: bool = True
    """free the sampler's memory for training (benchmarks/results/generation_h200.md; vLLM: its sleep mode, if any)"""
    generation: Literal["transformers", "vllm"] = "transformers"
    """the sampler: TransformersPolicy (generation_mode) or vLLM, an engine per process synced after each update"""
    backend: str = "cuda"
    """sandbox backend: "cuda" kernels on this process's GPU or "cpu" C++ kernels"""
    correctness_weight: float = 0.3
    """S = w * correct + speedup * correct (paper: 0.3)"""
    speedup_cap: float | None = None
    """cap on the speedup term of S (paper: none)"""
    measure_speed: bool = True
    """time correct kernels for the speedup term of S; false: correctness alone, no timing (faster, not the paper)"""
    timing_budget_s: float = 1.0
    """seconds of timed calls per kernel, at least 10 calls (the sandbox's default: 10 s): a timing holds the device"""
    gamma: float = 0.4
    """discount of later turns' scores in a turn's return (paper: 0.4)"""
    reward_mode: str = "sum"
    """"sum" R_t = sum_i gamma^(i-t) S_i (paper) or "max" R_t = max_i gamma^(i-t) S_i"""
    advantage_baseline: str = "task"
    """advantage groups: task (a task's G*T samples, paper), task_turn, loo, final_broadcast (kevin.rewards.samples)"""
    scale_by_std: bool | None = None
    """divide advantages by the group's std (GRPO, paper Eq. 1) or not (Dr. GRPO); None: yes, except for loo"""
    clip_low: float = 0.2
    """ratio clipped below at 1 - clip_low (paper: 0.2)"""
    clip_high: float = 0.28
    """ratio clipped above at 1 + clip_high (clip-higher, paper: 0.28)"""
    kl_coef: float = 0.0
    """beta of the k3 KL to the initial model (paper: 0; LoRA: the adapter-disabled base)"""
    loss_aggregation: str = "seq-mean-token-mean"
    """seq-mean-token-mean (paper Eq. 1), token-mean (DAPO), seq-mean-token-sum-norm (Dr. GRPO)"""
    tis_cap: float = 0.0
    """truncated importance sampling: token weights min(exp(old - sampler log-prob), tis_cap) (0: off; TRL's: 3)"""
    lr: float = 2e-6
    """AdamW learning rate, constant after warm-up (blog: 2e-6)"""
    warmup_ratio: float = 0.03
    """share of all optimizer steps spent in linear warm-up (blog: 0.03)"""
    weight_decay: float = 0.0
    """AdamW weight decay (not stated in the paper)"""
    grad_clip: float = 0.05
    """max gradient norm (paper's stability fix: 0.05; its single-turn setup used 0.5)"""
    n_minibatches: int = 2
    """gradient steps per batch, each on its own mini-batch (paper: 2)"""
    micro_batch_size: int = 4
    """samples per forward/backward; gradients are accumulated over a mini-batch"""
    steps: int = 40
    """RL steps (paper: 40 steps = 80 gradient steps)"""
    seed: int = 0
    """seed of the task sampler, model init and sampling"""
    output_dir: str = "runs/kevin"
    """metrics.jsonl, config.json, rollouts/, checkpoints/, report.md go here (the other run options: RunConfig)"""


# CPU-sized defaults of --model starter / tiny (options still win); the starter's pool: 4 train tasks it half solves
CPU = dict(tasks_per_step=2, n_trajectories=4, n_turns=2, raise_max_new_tokens_by=1.0, max_prompt_tokens=None,
           backend="cpu", bf16=False, gradient_checkpointing=False, micro_batch_size=8)
PRESETS = {"starter": dict(CPU, tasks="builtin:GroupNorm,Conv2d_LayerNorm_GELU_ResidualAdd,BMM_LayerNorm_ReLU,"
                                      "Matmul_Scaling_ResidualAdd_Clamp", tasks_per_step=4, max_new_tokens=512, steps=8,
                           lr=1e-4, output_dir="runs/starter"),
           "tiny": dict(CPU, max_new_tokens=32, steps=3, lr=1e-4, output_dir="runs/tiny")}


def response_budget(cfg: Config, step: int) -> int:
    """max_new_tokens of RL step ``step`` (0-based), times raise_max_new_tokens_by from raise_max_new_tokens_at on."""
    return round(cfg.max_new_tokens * (cfg.raise_max_new_tokens_by if step >= cfg.raise_max_new_tokens_at else 1))


def behaviour_logprobs(cfg: Config, lrn: Learner, mb: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Old (and KL reference) log-probs of a micro-batch, before any update of this batch."""
    with torch.no_grad():
        old = response_logprobs(lrn.net, mb, temperature=cfg.temperature)
        if cfg.kl_coef <= 0:
            return old, None
        if lrn.ref is not None:
            return old, response_logprobs(lrn.ref, mb, temperature=cfg.temperature)
        with lrn.net.disable_adapter():  # LoRA: the reference is the base model
            return old, response_logprobs(lrn.net, mb, temperature=cfg.temperature)


def micro_loss(cfg: Config, lrn: Learner, mb: Any, mini: Any, old: Any, ref: Any, budget: int, keep: float = 1.0):
    """GRPO loss of a micro-batch times its weight w (summed over a mini-batch and averaged over processes: the
    mini-batch's loss; ``keep`` 0 for padding); ``budget``: Dr. GRPO's constant. Logs the sampler's log-prob gap."""
    lp, sampled = response_logprobs(lrn.model, mb, temperature=cfg.temperature), mb.old_logprobs
    tis = truncated_is_weights(old, sampled, cap=cfg.tis_cap) if cfg.tis_cap > 0 and sampled is not None else None
    loss, stats = grpo_loss(lp, old, mb.advantages, mb.mask, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                            kl_coef=cfg.kl_coef, ref_logprobs=ref, aggregation=cfg.loss_aggregation,
                            max_response_len=budget, is_weights=tis)
    stats |= {"train/logp_mismatch": logprob_mismatch(old, sampled, mb.mask)} if sampled is not None else {}
    w = keep * loss_weight(mb, mini.batch, cfg.loss_aggregation, tokens_everywhere=mini.tokens_everywhere,
                           samples_everywhere=mini.samples_everywhere, world=lrn.acc.num_processes)
    return loss * w, stats, w


def grpo_update(cfg: Config, lrn: Learner, samples: list, step: int) -> list[dict]:
    """``n_minibatches`` gradient steps on shuffled mini-batches of ``samples``, the old log-probs of all of them taken
    first; gradients are accumulated over micro-batches. Returns each step's statistics."""
    acc, budget = lrn.acc, response_budget(cfg, step)
    lrn.model.train()
    minis = minibatches_everywhere(acc, samples, cfg.n_minibatches, seed=cfg.seed * 100003 + step,
                                   pad_id=lrn.tokenizer.pad_token_id, micro_batch_size=cfg.micro_batch_size)
    olds = [[behaviour_logprobs(cfg, lrn, mb) for mb in mini.micros] for mini in minis]
    updates = []
    for mini, mini_olds in zip(minis, olds):
        sums: dict[str, Any] = {}
        for i, (mb, keep, (old, ref)) in enumerate(zip(mini.micros, mini.keep, mini_olds)):
            with acc.no_sync(lrn.model) if i < len(mini.micros) - 1 else torch.enable_grad():
                loss, stats, w = micro_loss(cfg, lrn, mb, mini, old, ref, budget, keep)
                acc.backward(loss)
            for k, v in [*((k, w * v.float()) for k, v in stats.items()), ("loss/total", loss.detach().float())]:
                sums[k] = sums.get(k, 0.0) + v
        grad_norm = lrn.clip_gradients(cfg.grad_clip).float()  # the same on every process
        finite = bool(torch.isfinite(grad_norm))
        if finite:  # a NaN/inf gradient would turn every weight into NaN: skip the update, and log it
            lrn.optimizer.step()
        updates.append({**sums, "train/grad_norm": grad_norm, "train/lr": torch.tensor(lrn.scheduler.get_last_lr()[0]),
                        "train/skipped_update": torch.tensor(float(not finite))})
        lrn.scheduler.step()
        lrn.optimizer.zero_grad(set_to_none=True)
    return updates


def main(argv: list[str], *, config: type = Config, presets: dict = PRESETS, title: str = "Kevin training run",
         project: str = "kevin") -> None:
    cfg = parse_run_config(config, argv, presets=presets)  # --resume: the run's own config.json underneath
    check_training_config(cfg)  # bad reward / loss / sampling options stop here, before any work
    from accelerate.utils import set_seed
    from tqdm.auto import tqdm

    from kevin.core.policy import TransformersPolicy, VLLMPolicy
    from kevin.data import BatchSampler, tasks_from_spec
    from kevin.sandbox import Sandbox, SandboxConfig
    from kevin.sandbox.calibrate import usable_tasks

    # ------------------------------------------------------------------ setup: run directory, sandbox, model, tasks
    acc = accelerator(bf16=cfg.bf16, project_dir=cfg.output_dir, tracker=cfg.tracker)
    rank, world = acc.process_index, acc.num_processes
    share = trajectory_share(cfg.tasks_per_step, cfg.n_trajectories, rank, world)  # [(task, trajectory)] of a step
    run = RunDir(cfg.output_dir, acc)
    run.claim(fresh=not cfg.resume, overwrite=cfg.overwrite)  # an earlier run here: refused, or --overwrite deletes it
    device = f"cuda:{acc.local_process_index}" if cfg.backend == "cuda" else "cpu"
    workers = max(1, (os.cpu_count() or 1) // local_processes(acc))  # this node's cores over its processes
    sandbox = Sandbox(device, SandboxConfig(workers=workers, precompiled_header=True, measure_speed=cfg.measure_speed,
                                            timing_budget_s=cfg.timing_budget_s))
    lrn = build_learner(acc, cfg.model, seed=cfg.seed, bf16=cfg.bf16, lora_rank=cfg.lora_rank if cfg.lora else 0,
                        gradient_checkpointing=cfg.gradient_checkpointing, lr=cfg.lr, weight_decay=cfg.weight_decay,
                        warmup_steps=math.ceil(cfg.warmup_ratio * cfg.steps * cfg.n_minibatches),
                        kl_reference=cfg.kl_coef > 0)
    if not (all_tasks := tasks_from_spec(cfg.tasks)):
        raise SystemExit(f"--tasks {cfg.tasks}: no tasks loaded")
    if not cfg.tasks.startswith("builtin") and cfg.calibrate_tasks:  # one seed everywhere: the same tasks kept
        all_tasks, dropped = usable_tasks(all_tasks, device=device, seed=cfg.seed)
        acc.print(f"calibration: dropped {len(dropped)} task(s) that a fake kernel passes: {dropped[:20]}")
    sampler = BatchSampler(all_tasks, cfg.tasks_per_step, seed=cfg.seed)
    state = dict(model=lrn.net, optimizer=lrn.optimizer, scheduler=lrn.scheduler, sampler=sampler)
    start = run.resume(cfg.resume, **state)
    if not start:
        set_seed(cfg.seed, device_specific=True)  # each process samples differently
    sampling = dict(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p)
    with lrn.full_parameters():  # after resume: the trained weights (FSDP2: all-gathered)
        policy = (VLLMPolicy.from_model(lrn.net, lrn.tokenizer, **sampling) if cfg.generation == "vllm"
                  else TransformersPolicy(lrn.net, lrn.tokenizer, **sampling, mode=cfg.generation_mode))
    run.start(cfg, step=start, tracker=cfg.tracker, project=project)

    # ------------------------------------------------------------------ the RL loop
    for step in tqdm(range(start, cfg.steps), desc="steps", initial=start, total=cfg.steps, disable=not run.is_main):
        t0 = time.perf_counter()
        tasks = share_tasks(sampler.next_batch(), share)  # the same batch everywhere; this process's trajectories

        # 1. rollout: G trajectories x T turns per task, generation batched over all of them
        policy.max_new_tokens = response_budget(cfg, step)
        lrn.model.eval()
        with acc.autocast(), lrn.full_parameters(cfg.generation == "transformers"):  # vLLM samples by itself
            trajectories = rollout(policy, tasks, sandbox, **rollout_layout(share, sandbox, cfg.stagger),
                                   n_turns=cfg.n_turns, max_prompt_tokens=cfg.max_prompt_tokens, progress=False)
        freed = policy.release_memory() if cfg.release_sampling_memory else 0
        if step == start and freed:
            acc.print(f"released {freed / 2**20:,.0f} MiB of sampling memory for training (after every rollout)")
        trajectories = place(trajectories, share)
        everything = gather_trajectories(trajectories)  # every process's, in the step's order
        t_rollout = time.perf_counter()

        # 2. rewards: score -> discounted returns -> advantages (per task, all G*T samples) -> one sample per turn
        rewarded = rewarded_samples(everything, correctness_weight=cfg.correctness_weight,
                                    speedup_cap=cfg.speedup_cap, gamma=cfg.gamma, mode=cfg.reward_mode,
                                    baseline=cfg.advantage_baseline, scale_by_std=cfg.scale_by_std)

        # 3. update: old log-probs of every mini-batch first, then one gradient step per mini-batch
        updates = grpo_update(cfg, lrn, own_samples(rewarded.samples, share), step)
        if cfg.generation == "vllm":  # the engine samples the next step with the updated weights
            with lrn.full_parameters():
                policy.sync_weights(lrn.net)
        t_train = time.perf_counter()

        # 4. log (every process's trajectories, losses averaged over processes), checkpoint
        run.log_step(step + 1, trajectories, everything, rewarded, updates, started=t0, rolled_out=t_rollout,
                     trained=t_train, n_params=sum(p.numel() for p in lrn.net.parameters()), peak_flops=cfg.peak_flops)
        if cfg.checkpoint_every and ((step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps):
            run.checkpoint(step + 1, keep=cfg.keep_checkpoints, **state)
        acc.wait_for_everyone()

    # ------------------------------------------------------------------ report
    summary = f"{cfg.model}; B x G x T {cfg.tasks_per_step} x {cfg.n_trajectories} x {cfg.n_turns}; {world} process(es)"
    acc.print(f"done: {run.report(title=title, summary=summary)}")
    run.close()


def cli(argv: list[str], entry: Any = None, **recipe: Any) -> None:
    """``entry`` (default `main`) run from a command line (kevin.core.run.cli.run_recipe)."""
    run_recipe(entry or main, argv, **recipe)


if __name__ == "__main__":
    cli(sys.argv[1:])
