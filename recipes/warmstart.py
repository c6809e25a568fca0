"""Warm start: the starter policy (a small Qwen2 fine-tuned on code-written kernel answers), and how good it is.

RL needs a policy whose kernels sometimes compile and are sometimes correct: a random model's answers never parse,
so no kernel reaches the sandbox and every reward is 0. This recipe makes one:

1. corpus: `kevin.data.corpus.build_corpus` over the built-in train tasks for ``--backend`` (at its sizes): two
   first turns per task, half of them correct and the rest with the flaws models really make, plus refinement turns;
2. tokenizer: a byte-level BPE trained on that text (`kevin.core.policy.starter.build_starter_tokenizer`);
3. model: a Qwen2 of layout ``--model_shape`` ("small" on the CPU; "medium" or "qwen2.5-0.5b" for a GPU);
4. supervised fine-tuning with transformers' ``Trainer``, the loss on the answer tokens only, then the logits
   sharpened by ``--sharpen``; same seed, same weights (`kevin.core.policy.starter.train_starter`);
5. ``save_pretrained``: into the starter cache (``--output_dir`` unset: the directory ``--model starter`` loads, so
   the RL recipes never train it a second time) or into ``--output_dir``; with ``--ship``, also into the package
   (the CPU starter ships there, so a new install unpacks it instead of training);
6. with ``--eval_tasks N``: ``--eval_samples`` first turns for N train tasks, sampled at ``--temperature`` from the
   saved model (loaded back with ``from_pretrained``), parsed with `kevin.data.parse.parse_response` and judged by
   the real sandbox on this machine's backend; prints the parse, compile and correct shares.

Launch (``--help``: every option with its documentation):
    python recipes/warmstart.py                                  # the CPU starter (about 17 minutes on 2 cores)
    python recipes/warmstart.py --eval_tasks 16 --eval_samples 4 # ... then judge 64 of its first turns
    python recipes/warmstart.py --backend cuda --model_shape medium --output_dir runs/starter-cuda   # on a GPU
    python recipes/train_multiturn.py --model starter --max_new_tokens 1024                          # RL from it
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from kevin.core.policy.starter import (StarterConfig, ensure_starter, load_starter_dir, ship_starter, starter_path,
                                       starter_tasks, torch_threads, train_starter)
from kevin.core.run.cli import ConfigError, log_to_stderr, parse_config


@dataclass(frozen=True)
class Config(StarterConfig):
    output_dir: str | None = None
    """where save_pretrained writes the starter; None: the starter cache, which `--model starter` loads"""
    overwrite: bool = False
    """train again even when the starter (in the cache or --output_dir) exists"""
    device: str | None = None
    """training device: "cpu", "cuda" or None (CUDA when available)"""
    threads: int | None = 1
    """torch threads for training and sampling (None: torch's default); on a busy shared machine 1 is the fastest"""
    ship: bool = False
    """train the starter (as --overwrite) and copy it into the package (`kevin.core.policy.starter.ship_starter`,
    weights packed to under 10 MB), replacing the shipped copy of this backend and shape: run after any change to
    the corpus, the config or the training"""
    eval_tasks: int = 0
    """after training, judge first turns for this many train tasks (0: no evaluation)"""
    eval_samples: int = 4
    """first turns sampled per evaluated task"""
    temperature: float = 0.9
    """sampling temperature of the evaluation (the RL recipes' default)"""
    max_new_tokens: int = 1024
    """response budget of the evaluation (the corpus's CPU answers are 78 to 287 tokens, 160 on average)"""
    eval_seed: int = 0
    """seed of the evaluation's sampling"""


def starter_fields(cfg: Config) -> StarterConfig:
    """The part of the config that determines the weights."""
    return StarterConfig(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(StarterConfig)})


def train(cfg: Config) -> Path:
    """Steps 1-5: the directory holding the starter's ``save_pretrained`` output."""
    if cfg.output_dir is None:  # --ship trains: a shipped copy is never shipped again as if it were fresh
        return ensure_starter(starter_fields(cfg), device=cfg.device, overwrite=cfg.overwrite or cfg.ship,
                              threads=cfg.threads)
    out = Path(cfg.output_dir)
    if out.exists() and any(out.iterdir()):
        if not cfg.overwrite:
            raise SystemExit(f"{out} is not empty: pass --overwrite to replace it")
        shutil.rmtree(out)
    train_starter(starter_fields(cfg), out, device=cfg.device, threads=cfg.threads)
    return out


def pick_eval_tasks(cfg: Config) -> list[Any]:
    """``cfg.eval_tasks`` of the tasks the starter was trained on that the corpus covers, evenly spaced (so both
    levels are in)."""
    from kevin.data.corpus import kernel_answers

    covered = [t for t in starter_tasks(starter_fields(cfg)) if kernel_answers(t, cfg.backend)]
    n = min(cfg.eval_tasks, len(covered))
    return [covered[i * len(covered) // n] for i in range(n)] if n else []


def sample_first_turns(model: Any, tokenizer: Any, tasks: list[Any], *, backend: str, samples: int,
                       temperature: float, max_new_tokens: int, seed: int) -> list[dict[str, Any]]:
    """``samples`` first-turn responses per task, as the RL rollout samples them (`TransformersPolicy`), parsed.

    One record per response: task, text, code (None when it does not parse), tokens, truncated."""
    import torch

    from kevin.core.policy import TransformersPolicy
    from kevin.data import build_messages, parse_response

    policy = TransformersPolicy(model, tokenizer, max_new_tokens=max_new_tokens, temperature=temperature,
                                mode="generate")
    conversations = [build_messages(t, backend=backend) for t in tasks for _ in range(samples)]
    torch.manual_seed(seed)
    generations = policy.generate(conversations)
    records = []
    for i, g in enumerate(generations):
        parsed = parse_response(g.text, in_thought=g.in_thought)
        records.append({"task": tasks[i // samples], "text": g.text, "code": None if g.truncated else parsed.code,
                        "tokens": len(g.token_ids), "truncated": g.truncated})
    return records


def judge(records: list[dict[str, Any]], backend: str) -> float:
    """Every parsed kernel through the sandbox (on this machine's backend) in one batch; adds each record's status
    and ``copy_of``: the kind of the corpus answer it reproduces exactly, if any. Returns the sandbox's seconds."""
    from kevin.data.corpus import kernel_answers
    from kevin.sandbox import Sandbox, SandboxConfig

    jobs = [(r["task"], r["code"]) for r in records if r["code"] is not None]
    start = time.perf_counter()
    verdicts = iter(Sandbox(backend, SandboxConfig()).evaluate_many(jobs) if jobs else [])
    for r in records:
        r["status"] = next(verdicts).status if r["code"] is not None else "format_error"
        known = {a.code: a.kind for a in kernel_answers(r["task"], backend)}
        r["copy_of"] = known.get(r["code"]) if r["code"] is not None else None
    return time.perf_counter() - start


def summarise(records: list[dict[str, Any]], *, gen_seconds: float, sandbox_seconds: float) -> dict[str, Any]:
    """The shares of first turns that parse, compile and are correct, and what they are made of."""
    n = len(records)
    statuses = Counter(r["status"] for r in records)
    tokens = sorted(r["tokens"] for r in records)
    return {
        "samples": n,
        "parsed": round(sum(r["code"] is not None for r in records) / n, 3),
        "compiled": round(sum(r["status"] not in ("format_error", "compile_error") for r in records) / n, 3),
        "correct": round(statuses["correct"] / n, 3),
        "statuses": dict(statuses),
        "copies_of_corpus_answers": dict(Counter(r["copy_of"] or "none" for r in records)),
        "tasks_with_a_correct_sample": len({r["task"].task_id for r in records if r["status"] == "correct"}),
        "truncated": sum(r["truncated"] for r in records),
        "answer_tokens": {"mean": round(sum(tokens) / n, 1), "median": tokens[n // 2], "max": tokens[-1]},
        "generation_seconds": round(gen_seconds, 1),
        "sandbox_seconds": round(sandbox_seconds, 1),
    }


def evaluate(cfg: Config, path: Path) -> dict[str, Any]:
    """Step 6: the saved starter's first turns on ``cfg.eval_tasks`` train tasks, judged."""
    model, tokenizer = load_starter_dir(path)  # the model through from_pretrained, the tokenizer as saved
    tasks = pick_eval_tasks(cfg)
    print(f"sampling {cfg.eval_samples} first turns for each of {len(tasks)} train tasks at temperature "
          f"{cfg.temperature} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    with torch_threads(cfg.threads):
        records = sample_first_turns(model, tokenizer, tasks, backend=cfg.backend, samples=cfg.eval_samples,
                                     temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, seed=cfg.eval_seed)
    gen_seconds = time.perf_counter() - start
    print(f"judging {sum(r['code'] is not None for r in records)} parsed kernels in the {cfg.backend} sandbox ...",
          file=sys.stderr, flush=True)
    summary = summarise(records, gen_seconds=gen_seconds, sandbox_seconds=judge(records, cfg.backend))
    for t in tasks:
        mine = [r for r in records if r["task"] is t]
        print(f"  {t.task_id:55s} " + " ".join(f"{r['status']}({r['copy_of'] or 'new'})" for r in mine))
    return summary


def main(argv: list[str]) -> None:
    cfg = parse_config(Config, argv)
    path = train(cfg)
    print(f"starter: {path}")
    if cfg.ship:
        print(f"shipped: {ship_starter(path, starter_path(config=starter_fields(cfg)).name)}")
    if cfg.eval_tasks > 0:
        summary = evaluate(cfg, path)
        print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    log_to_stderr()
    try:
        main(sys.argv[1:])
    except ConfigError as exc:
        raise SystemExit(f"{Path(sys.argv[0]).name}: {exc}") from None
