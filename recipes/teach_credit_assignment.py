"""Teaching recipe: why Kevin trains every turn on the discounted sum of later scores (paper section 4.3).

The paper's core claim in miniature, on the CPU in about a minute. A two-turn synthetic environment:

    turn 1: the policy answers with one token. It scores 0 whatever it says, but an answer from the
            "key" set K (token id divisible by 4, about a quarter of the vocabulary) unlocks turn 2.
    turn 2: scores 1.3 (a correct kernel at 1.0x: 0.3 + 1.0) if turn 1 unlocked it, else 0.

Every turn is its own sample. With Kevin's returns ``R_t = sum_{i>=t} gamma^(i-t) S_i`` and gamma = 0.4,
turn 1 is credited ``0.4 * 1.3 = 0.52`` when its key unlocked turn 2, so the policy learns to answer
from K on turn 1. With gamma = 0 (each turn rewarded only by its own score, the paper's rejected
"greedy" baseline) every turn-1 sample has return 0: nothing tells the policy which first answer was
good, and the unlock rate stays where it started. The table printed at the end shows both.

Everything except the environment is the library's own training path, as in ``train_multiturn.py``:
``rollout`` -> ``rewarded_samples`` (the reward path the training recipes call: ``turn_scores`` ->
``aggregate_rewards`` -> ``group_advantages``, one group per task over all G*T samples -> ``split_trajectories``)
-> ``collate`` -> old log-probs -> two mini-batch ``grpo_loss`` steps. The environment plugs in through rollout's
``build_messages`` / ``parse_response`` hooks and a sandbox object with ``evaluate_many``. The tiny
policy is the random 2-layer Qwen2 of ``kevin.core.policy.tiny``; each answer is exactly one token
(``TokenPolicy``), so nothing is ever truncated. The same code, with ``--env target`` and one turn,
is the single-turn sanity check used by ``tests/recipes/test_learning.py``: reward rises when the answer
itself is rewarded.

Differences from the paper: a synthetic environment instead of kernels, a learning rate of 1e-2 (the
model is tiny and random), temperature 1.

Launch:  python recipes/teach_credit_assignment.py            (gamma 0.4 against gamma 0, 4 seeds each)
         python recipes/teach_credit_assignment.py --steps 40 --n_seeds 8 --compare_gamma 0.8
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from kevin.core.batch import collate, micro_batches, response_logprobs
from kevin.core.loss import grpo_loss
from kevin.core.policy import TransformersPolicy
from kevin.core.policy.tiny import build_tiny_model, build_tiny_tokenizer
from kevin.core.rollout import rollout
from kevin.core.run.cli import ConfigError, parse_config
from kevin.data.task import Task
from kevin.rewards.samples import rewarded_samples
from kevin.sandbox.result import EvalResult


@dataclass(frozen=True)
class Config:
    env: str = "credit"
    """"credit": turn 1 scores 0 but unlocks turn 2 (needs n_turns=2); "target": every turn scores
    when its own answer is in the key set (learnable with any gamma, any number of turns)"""
    gamma: float = 0.4
    """discount of later turns' scores in each turn's return"""
    compare_gamma: float | None = 0.0
    """also train with this gamma from the same seed and print both side by side (None: skip)"""
    steps: int = 30
    """RL steps (each: one rollout, two gradient steps)"""
    n_tasks: int = 2
    """B: tasks per step (identical copies of the environment, each its own advantage group)"""
    n_trajectories: int = 16
    """G: trajectories per task"""
    n_turns: int = 2
    """T: turns per trajectory"""
    lr: float = 1e-2
    """AdamW learning rate (constant)"""
    temperature: float = 1.0
    """sampling temperature (the loss uses the same one)"""
    seed: int = 0
    """seed of the tiny model and of sampling (of the first run)"""
    n_seeds: int = 4
    """train this many times per gamma (seeds seed, seed+1, ...) and report the mean and the range"""


# --------------------------------------------------------------------------- the synthetic environment

def in_key_set(token_id: int) -> bool:
    """The "good" first answers: token ids divisible by 4 (about a quarter of the vocabulary)."""
    return token_id % 4 == 0


class TokenPolicy:
    """A ``TransformersPolicy`` whose answers are exactly ``max_new_tokens`` tokens, shown as their ids.

    The text of a generation is its token ids (``"412"``), so the environment judges tokens, not
    decoded bytes; a fixed-length answer is complete by definition, so it is never "truncated".
    """

    def __init__(self, inner: TransformersPolicy):
        self.inner = inner

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def generate(self, conversations):
        gens = self.inner.generate(conversations)
        return [dataclasses.replace(g, text=" ".join(map(str, g.token_ids)), truncated=False) for g in gens]


def build_messages(task, attempts, **_):
    """The prompt names the task and the turn; the turn-2 prompt also shows the turn-1 feedback."""
    lines = [f"task {task.task_id}, turn {len(attempts) + 1}"] + [a.feedback for a in attempts]
    return [{"role": "user", "content": "\n".join(lines)}]


def parse_response(text: str):
    """The whole answer is the "kernel"."""
    return SimpleNamespace(thought=None, code=text, summary=None, error=None)


def _verdict(good: bool, feedback: str) -> EvalResult:
    # A correct kernel at 1.0x scores kernel_score = 0.3 + 1.0 = 1.3; an incorrect one scores 0.
    if good:
        return EvalResult("correct", feedback, runtime_ms=1.0, baseline_ms=1.0)
    return EvalResult("incorrect", feedback)


class SyntheticSandbox:
    """``evaluate_many`` for the synthetic environment of one rollout.

    ``rollout`` makes exactly one ``evaluate_many`` call per turn, with the jobs of every trajectory in
    the same task-major order (every answer parses and none is truncated, so none is skipped). That lets
    this sandbox remember, per position, whether turn 1 unlocked turn 2. Make a new one per rollout.
    """

    def __init__(self, env: str):
        self.env, self.turn, self.unlocked = env, 0, []

    def evaluate_many(self, jobs):
        first_tokens = [int(code.split()[0]) for _, code in jobs]
        if self.env == "target":
            out = [_verdict(in_key_set(t), "scored") for t in first_tokens]
        elif self.turn == 0:  # credit, turn 1: never scores, may unlock
            self.unlocked = [in_key_set(t) for t in first_tokens]
            out = [_verdict(False, "unlocked" if u else "locked") for u in self.unlocked]
        else:  # credit, turn >= 2: scores iff turn 1 unlocked it
            assert len(jobs) == len(self.unlocked), "jobs must keep their order across turns"
            out = [_verdict(u, "scored" if u else "locked") for u in self.unlocked]
        self.turn += 1
        return out


# --------------------------------------------------------------------------- training

def train(cfg: Config, gamma: float) -> list[dict[str, float]]:
    """Train a fresh tiny policy for ``cfg.steps`` steps; returns one metrics dict per step."""
    torch.manual_seed(cfg.seed)
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=cfg.seed)
    policy = TokenPolicy(TransformersPolicy(model, tokenizer, max_new_tokens=1, temperature=cfg.temperature, mode="generate"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    tasks = [Task(f"env{b}", "x = 0\n") for b in range(cfg.n_tasks)]
    history = []
    for step in range(cfg.steps):
        # rollout -> score -> aggregate -> advantages -> split
        trajectories = rollout(policy, tasks, SyntheticSandbox(cfg.env), n_trajectories=cfg.n_trajectories,
                               n_turns=cfg.n_turns, backend="cpu", build_messages=build_messages,
                               parse_response=parse_response, progress=False)
        rewarded = rewarded_samples(trajectories, gamma=gamma, mode="sum")  # the recipes' own reward path
        scores, returns = rewarded.scores, rewarded.returns  # [B*G, T]
        batch = collate(rewarded.samples, tokenizer.pad_token_id)
        # old log-probs once, then two gradient steps on two mini-batches (the paper's 1 on- + 1 off-policy)
        with torch.no_grad():
            old = response_logprobs(model, batch, temperature=cfg.temperature)  # [N, L]
        for mb in micro_batches(batch, math.ceil(batch.size / 2), old_logprobs=old):
            lp = response_logprobs(model, mb, temperature=cfg.temperature)
            loss, stats = grpo_loss(lp, mb.old_logprobs, mb.advantages, mb.mask)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        first = [int(tr.turns[0].response_ids[0]) for tr in trajectories]
        history.append({
            "step": step,
            "turn1/key_rate": sum(map(in_key_set, first)) / len(first),
            "reward/score_mean": scores.mean().item(),
            "reward/return_mean": returns.mean().item(),
            "loss/policy": stats["loss/policy"].item(),
        })
    return history


def window_mean(history: list[dict[str, float]], key: str, start: int, stop: int) -> float:
    """Mean of ``key`` over steps ``start:stop`` of a history."""
    rows = history[start:stop]
    return sum(r[key] for r in rows) / len(rows)


# --------------------------------------------------------------------------- main

def main(argv: list[str]) -> None:
    cfg = parse_config(Config, argv)
    if cfg.env == "credit" and cfg.n_turns < 2:
        raise SystemExit("--env credit needs --n_turns 2 or more")
    gammas = [cfg.gamma] + ([cfg.compare_gamma] if cfg.compare_gamma is not None else [])
    k = max(1, cfg.steps // 5)
    rows = {}
    for gamma in gammas:
        start = time.perf_counter()
        runs = [train(dataclasses.replace(cfg, seed=cfg.seed + i), gamma) for i in range(cfg.n_seeds)]
        print(f"gamma={gamma}: {cfg.n_seeds} runs of {cfg.steps} steps in {time.perf_counter() - start:.1f}s")
        rows[gamma] = [(window_mean(h, "turn1/key_rate", 0, k), window_mean(h, "turn1/key_rate", -k, None),
                        window_mean(h, "reward/score_mean", -k, None)) for h in runs]
    print(f"\nenv={cfg.env}, {cfg.n_seeds} seeds: share of turn-1 answers in the key set over the first and the last "
          f"{k} steps (mean, and min-max over seeds), and the mean turn score over the last {k} steps")
    print(f"{'gamma':>6} | {'key rate, first':>15} | {'key rate, last':>22} | {'score, last':>11}")
    for gamma, r in rows.items():
        first, last, score = (sum(x[i] for x in r) / len(r) for i in range(3))
        lo, hi = min(x[1] for x in r), max(x[1] for x in r)
        last_text = f"{last:.2f} ({lo:.2f}-{hi:.2f})"
        print(f"{gamma:>6} | {first:>15.2f} | {last_text:>22} | {score:>11.3f}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except ConfigError as exc:  # a mistyped option: say so, without a traceback
        raise SystemExit(f"{Path(__file__).name}: {exc}") from None
