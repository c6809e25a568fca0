"""The starter policy: a small Qwen2 warm-started by supervised fine-tuning on code-written kernel answers.

A randomly initialised model never writes a program the sandbox accepts, so RL from it sees no reward. The
starter is trained on `kevin.data.corpus.build_corpus` for one backend: two first-turn answers per task, half of
them correct (slow or fast) and the rest off by one, missing an operator, misspelt, or leaving a step to PyTorch,
and refinement turns that fix a flawed attempt, speed up a slow one or keep a fast one. It learns that mix
imperfectly, so its own first turns are right well under every time and RL has something to improve.

- **Tokenizer** (`build_starter_tokenizer`): a byte-level BPE trained with ``tokenizers`` on the corpus text,
  whose merges may span a whole line (lines are split first, then bytes merged with no word splitting), so most
  lines of a kernel program become single tokens: at 8,192 entries a CPU answer is about 160 tokens. Every byte
  string still round-trips. Special tokens and the chat template are `kevin.core.policy.tiny`'s (Qwen-style
  markers, the generation prompt opens ``<think>``).
- **Model** (`starter_model_config`): a real ``Qwen2ForCausalLM`` layout from `SHAPES`: ``"small"`` (hidden
  256, 4 layers, 5.2M parameters with the 8,192-entry vocabulary) for the CPU, ``"medium"`` (hidden 768, 12
  layers, about 130M) and ``"qwen2.5-0.5b"`` (Qwen2.5-0.5B's layout with this vocabulary, about 360M) for a GPU,
  ``"test"`` for tests.
- **Training** (`train_starter`): each example is the chat-templated prompt followed by its answer and
  ``<|im_end|>``; the loss covers the answer tokens only (labels -100 on the prompt), trained with transformers'
  ``Trainer`` (AdamW, cosine schedule, length-grouped batches), on one torch thread by default. Same config, same
  weights (the seed fixes the corpus, the initialisation and the data order); the caller's random states are
  restored afterwards. The logits are then sharpened (`sharpen_logits`): after minutes of training the model ranks
  the right token first but without confidence.
- **Cache** (`starter_path`, `load_starter`): ``$KEVIN_CACHE_DIR/starter/<backend>-<shape>-<hash>`` (default
  ``~/.cache/kevin/starter/...``) holds ``save_pretrained`` output (``model.safetensors``, the tokenizer) and
  ``starter.json``. The hash covers everything the weights depend on: every training example's text, the
  config, and this format's version. `load_starter` fills it when it is missing, under a file lock, so
  concurrent processes do it once: from the copy shipped in the package (`SHIPPED`, the default CPU starter,
  weights packed by `pack_state`) when its hash matches, else by training.

    model, tokenizer = load_starter("cpu")              # the shipped copy, unpacked once into the cache, then loaded
    python recipes/warmstart.py --overwrite              # train it again (about 17 minutes on 2 cores); --help
    load_model("starter", device=torch.device("cpu"))    # as a recipe's --model
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from kevin.core.policy.tiny import CHAT_TEMPLATE, EOS_TOKEN, PAD_TOKEN, SPECIAL_TOKENS, THINK_TOKENS

__all__ = ["SHAPES", "StarterConfig", "build_starter_tokenizer", "starter_model_config", "corpus_examples",
           "starter_tasks", "tokenize_example", "train_starter", "sharpen_logits", "torch_threads", "cache_root",
           "starter_key", "starter_path", "ensure_starter", "load_starter", "load_starter_dir", "SHIPPED", "pack_state",
           "unpack_state", "ship_starter"]

FORMAT_VERSION = 1  # raise when the tokenizer or the training changes in a way the config does not show

SHAPES: dict[str, dict[str, int]] = {
    "test": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2),
    "small": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2),
    "medium": dict(hidden_size=768, intermediate_size=4096, num_hidden_layers=12, num_attention_heads=12,
                   num_key_value_heads=2),
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2),
}
"""Qwen2 layouts by name (the rest of the config is shared: tied embeddings, rope theta 1e6, eps 1e-6)."""


@dataclass(frozen=True)
class StarterConfig:
    """Everything that determines a starter's weights (its fields are the warm-start recipe's options)."""

    backend: str = "cpu"
    """the corpus's backend: "cpu" (C++ through cpp_sources) or "cuda" (CUDA kernels); also the tasks' sizes"""
    model_shape: str = "small"
    """a layout of SHAPES: "small" (5M parameters, CPU), "medium" (130M), "qwen2.5-0.5b" (360M), "test" (tests)"""
    vocab_size: int = 8192
    """BPE vocabulary of the tokenizer trained on the corpus (special and thought tokens included); at 8,192 most
    lines of a program are one token (a CPU answer is about 160 tokens; at 4,096, about 380)"""
    tasks: str = "train"
    """built-in tasks the corpus covers: "train" (the train split), "all", or comma-separated task names"""
    max_tasks: int | None = None
    """use only the first N of those tasks (None: all of them)"""
    per_task: int = 2
    """first-turn examples per task (kevin.data.corpus.build_corpus): each task's prompt gets this many answers"""
    correct_share: float = 0.5
    """share of correct first-turn answers in the corpus (kevin.data.corpus.Mix.correct_share)"""
    refinement_share: float = 0.6
    """share of refinement (later turn) examples in the corpus (with a fifth of them, the starter's second turns in RL
    were mostly format errors: answers that start inside an earlier kernel or never close the thought)"""
    refinement_speedup: float = 1 / 3
    """among refinements, the share whose attempt is the slow correct program (the answer: the fast one)"""
    refinement_keep: float = 1 / 3
    """among refinements, the share whose attempt is the fast program (the answer keeps it). At most one of each per
    task (`kevin.data.corpus.build_corpus`); with 60 % refinements, a third each is one of each for every task. A
    policy that saw a task's slow attempt sped up but never its fast one kept tends to blend the two programs when its
    first attempt was already correct"""
    deeper_refinements: float = 0.0
    """among refinements, the share drawn to hold one or two more earlier (failed) attempts: third and fourth turns,
    which a starter trained on second turns alone answers poorly in a 4-turn rollout (kevin.data.corpus.Mix)"""
    epochs: float = 14.0
    """passes over the corpus: a small model needs many to reproduce the programs it saw"""
    batch_size: int = 4
    """examples per optimizer step"""
    lr: float = 1e-3
    """AdamW peak learning rate (cosine decay to 0 after warm-up); for "small", 2e-3 and 5e-3 learnt slower"""
    warmup_steps: int = 10
    """linear warm-up steps"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    max_length: int = 2048
    """examples longer than this many tokens (prompt and answer) are left out"""
    bf16: bool = True
    """bf16 autocast when training on CUDA (ignored on the CPU)"""
    sharpen: float = 1.3
    """after training, the logits are multiplied by this (`sharpen_logits`): sampling at temperature T then draws from
    the fine-tuned distribution at T / sharpen (1: the fine-tuned model as it is)"""
    seed: int = 0
    """seed of the corpus, the initial weights and the data order"""


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer and model config


def build_starter_tokenizer(texts: Iterable[str], *, vocab_size: int = 8192) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``texts``, with tiny.py's special tokens and template.

    Lines are split first (each keeps its newline) and the bytes of a line are merged with no word splitting, so
    frequent lines become one token. Deterministic for the same texts (the BPE trainer breaks ties by pair).
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[^\n]*\n?"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(THINK_TOKENS), min_frequency=2,
                                  special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(sorted(set(texts)), trainer=trainer)
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN,
                                   padding_side="left", chat_template=CHAT_TEMPLATE, model_max_length=32768,
                                   clean_up_tokenization_spaces=False)


def starter_model_config(tokenizer: Any, shape: str = "small") -> Any:
    """A ``Qwen2Config`` of layout ``SHAPES[shape]`` sized to ``tokenizer``."""
    from transformers import Qwen2Config

    if shape not in SHAPES:
        raise ValueError(f"unknown model shape {shape!r}; expected one of {sorted(SHAPES)}")
    return Qwen2Config(**SHAPES[shape], vocab_size=len(tokenizer), max_position_embeddings=32768,
                       rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True, attention_dropout=0.0,
                       eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None)


# ---------------------------------------------------------------------------------------------------------------
# Data


def starter_tasks(cfg: StarterConfig) -> list[Any]:
    """The built-in tasks ``cfg.tasks`` names (the first ``cfg.max_tasks``), before the corpus skips uncovered ones."""
    from kevin.data.builtin import builtin_tasks

    if cfg.tasks in ("train", "eval"):
        tasks = builtin_tasks(split=cfg.tasks)
    elif cfg.tasks == "all":
        tasks = builtin_tasks()
    else:
        names = [n.strip() for n in cfg.tasks.split(",") if n.strip()]
        tasks = builtin_tasks(names=names)
        if len(tasks) != len(names):
            raise ValueError(f"tasks {cfg.tasks!r}: only {[t.name for t in tasks]} are built-in task names")
    return list(tasks[: cfg.max_tasks] if cfg.max_tasks is not None else tasks)


_CORPUS_CACHE: dict[tuple, list[Any]] = {}


def corpus_examples(cfg: StarterConfig) -> list[Any]:
    """The `kevin.data.corpus.Example` list ``cfg`` trains on (built once per process for the same fields)."""
    from kevin.data.corpus import CORRECT_KINDS, Mix, build_corpus

    if cfg.backend not in ("cpu", "cuda"):
        raise ValueError(f"unknown backend {cfg.backend!r}; expected 'cpu' or 'cuda'")
    key = (cfg.backend, cfg.tasks, cfg.max_tasks, cfg.per_task, cfg.correct_share, cfg.refinement_share,
           cfg.refinement_speedup, cfg.refinement_keep, cfg.deeper_refinements, cfg.seed)
    if key not in _CORPUS_CACHE:
        if not 0 < cfg.correct_share < 1:
            raise ValueError(f"correct_share must be in (0, 1), got {cfg.correct_share}")
        base = Mix()
        correct = sum(w for k, w in base.first_turn.items() if k in CORRECT_KINDS)
        flawed = sum(w for k, w in base.first_turn.items() if k not in CORRECT_KINDS)
        weights = {k: w * (cfg.correct_share / correct if k in CORRECT_KINDS else (1 - cfg.correct_share) / flawed)
                   for k, w in base.first_turn.items()}
        mix = Mix(first_turn=weights, refinement_share=cfg.refinement_share, refinement_speedup=cfg.refinement_speedup,
                  refinement_keep=cfg.refinement_keep, deeper_refinements=cfg.deeper_refinements)
        _CORPUS_CACHE[key] = build_corpus(starter_tasks(cfg), cfg.backend, seed=cfg.seed, mix=mix, per_task=cfg.per_task)
    return _CORPUS_CACHE[key]


def _prompt_text(tokenizer: Any, messages: Sequence[dict]) -> str:
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)


def tokenize_example(tokenizer: Any, example: Any) -> dict[str, list[int]]:
    """``input_ids`` (prompt, answer, ``<|im_end|>``) and ``labels`` (-100 on the prompt, the ids on the rest).

    The prompt is tokenized exactly as `TransformersPolicy` tokenizes it (the rendered chat template, ending with
    the generation prompt's ``<think>``), the answer on its own, without the ``<think>`` the prompt holds."""
    prompt = tokenizer(_prompt_text(tokenizer, example.messages), add_special_tokens=False)["input_ids"]
    answer = example.answer
    if _prompt_text(tokenizer, example.messages).endswith("<think>\n") and answer.startswith("<think>\n"):
        answer = answer[len("<think>\n"):]
    reply = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return {"input_ids": prompt + reply, "labels": [-100] * len(prompt) + reply}


def _collate(pad_id: int):
    import torch

    def collate(rows: list[dict]) -> dict[str, Any]:
        n = max(len(r["input_ids"]) for r in rows)
        ids = [r["input_ids"] + [pad_id] * (n - len(r["input_ids"])) for r in rows]
        labels = [r["labels"] + [-100] * (n - len(r["labels"])) for r in rows]
        mask = [[1] * len(r["input_ids"]) + [0] * (n - len(r["input_ids"])) for r in rows]
        return {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels), "attention_mask": torch.tensor(mask)}

    return collate


# ---------------------------------------------------------------------------------------------------------------
# Training


def _say(message: str, progress: bool) -> None:
    if progress:
        print(f"[starter] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _restored_random_states():
    """Trainer seeds Python's, NumPy's and torch's global generators: give the caller its own back afterwards."""
    import random

    import numpy as np
    import torch

    py, npy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []):
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)


@contextlib.contextmanager
def torch_threads(n: int | None):
    """torch's intra-op threads set to ``n`` for the duration (None: left as they are). On a machine other processes
    keep busy, 1 thread can be several times faster than 2: a parallel region waits for its slowest thread."""
    import torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train_starter(cfg: StarterConfig = StarterConfig(), output_dir: str | os.PathLike | None = None, *,
                  device: str | None = None, progress: bool = True,
                  threads: int | None = 1) -> tuple[Any, Any, dict[str, Any]]:
    """Train a starter: (model in eval mode, tokenizer, stats); with ``output_dir``, ``save_pretrained`` both there
    and write ``starter.json`` (the config, the key, the stats).

    ``device``: "cpu", "cuda" or None (CUDA when available); ``threads``: torch's threads meanwhile (`torch_threads`;
    None leaves torch's setting). One by default: the weights then do not depend on the machine's core count, and on
    a CPU other processes keep busy one thread trains several times faster than two. Training on the CPU is
    deterministic for the same config and thread count; stats hold the example counts, the loss history and the
    wall time.
    """
    import torch
    from transformers import Qwen2ForCausalLM, Trainer, TrainingArguments

    t0 = time.perf_counter()
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    _say(f"building the {cfg.backend} corpus ({cfg.tasks} tasks) ...", progress)
    examples = corpus_examples(cfg)
    if not examples:
        raise ValueError(f"the corpus of {cfg.tasks!r} ({cfg.backend}) is empty: no template covers those tasks")
    tokenizer = build_starter_tokenizer([t for e in examples for t in [m["content"] for m in e.messages] + [e.answer]],
                                        vocab_size=cfg.vocab_size)
    rows = [tokenize_example(tokenizer, e) for e in examples]
    kept = [r for r in rows if len(r["input_ids"]) <= cfg.max_length]
    answer_tokens = sum(sum(1 for x in r["labels"] if x != -100) for r in kept)
    stats: dict[str, Any] = {
        "examples": len(kept), "dropped_too_long": len(rows) - len(kept),
        "first_turn": sum(e.turn == 1 for e in examples), "refinement": sum(e.turn > 1 for e in examples),
        "later_turns": sum(e.turn > 2 for e in examples),
        "tokens": sum(len(r["input_ids"]) for r in kept), "answer_tokens": answer_tokens,
        "vocab_size": len(tokenizer), "device": device,
    }
    later = f" ({stats['later_turns']} of them third or fourth turns)" if stats["later_turns"] else ""
    dropped = f"; {len(rows) - len(kept)} over {cfg.max_length} tokens left out" if len(rows) > len(kept) else ""
    _say(f"{stats['examples']} examples ({stats['first_turn']} first turns, {stats['refinement']} refinements{later}), "
         f"{stats['tokens']:,} tokens of which {answer_tokens:,} answer tokens; vocabulary {len(tokenizer)}{dropped}",
         progress)

    with _restored_random_states(), torch_threads(threads), tempfile.TemporaryDirectory(prefix="kevin-starter-") as scratch:
        torch.manual_seed(cfg.seed)
        model = Qwen2ForCausalLM(starter_model_config(tokenizer, cfg.model_shape))
        n_params = sum(p.numel() for p in model.parameters())
        stats["parameters"] = n_params
        _say(f"training a {cfg.model_shape} Qwen2 ({n_params / 1e6:.1f}M parameters) on {device} for "
             f"{cfg.epochs:g} epochs ...", progress)
        args = TrainingArguments(
            output_dir=scratch, per_device_train_batch_size=cfg.batch_size, num_train_epochs=cfg.epochs,
            learning_rate=cfg.lr, lr_scheduler_type="cosine", warmup_steps=cfg.warmup_steps,
            weight_decay=cfg.weight_decay, max_grad_norm=1.0, seed=cfg.seed, data_seed=cfg.seed,
            train_sampling_strategy="group_by_length", use_cpu=device == "cpu", bf16=cfg.bf16 and device != "cpu",
            logging_steps=max(1, len(kept) // cfg.batch_size // 4), report_to="none", save_strategy="no",
            disable_tqdm=not progress, remove_unused_columns=False, dataloader_num_workers=0,
        )
        trainer = Trainer(model=model, args=args, train_dataset=kept, data_collator=_collate(tokenizer.pad_token_id))
        result = trainer.train()
    diverged(trainer.model, trainer.state.log_history, cfg)
    model = sharpen_logits(trainer.model.to(torch.float32).eval(), cfg.sharpen)
    model.config.use_cache = True  # Trainer turned it off; saved off, generation would recompute the whole prefix
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    stats["train_loss"] = float(result.training_loss)
    stats["last_loss"] = next((h["loss"] for h in reversed(trainer.state.log_history) if "loss" in h), None)
    stats["loss_history"] = [(round(h["epoch"], 2), round(h["loss"], 4)) for h in trainer.state.log_history if "loss" in h]
    stats["steps"] = int(trainer.state.global_step)
    stats["seconds"] = round(time.perf_counter() - t0, 1)
    _say(f"trained in {stats['seconds']:.0f} s: mean loss {stats['train_loss']:.3f}, last logged "
         f"{stats['last_loss']}", progress)
    if output_dir is not None:
        _save(model, tokenizer, cfg, stats, Path(output_dir))
        _say(f"saved to {output_dir}", progress)
    return model, tokenizer, stats


def diverged(model: Any, log_history: list[dict], cfg: StarterConfig) -> None:
    """Raise when training left a weight non-finite: a starter that would sample from NaN probabilities must not be
    saved. Trainer logs a NaN loss as 0 (``logging_nan_inf_filter``), so the message names the first logged epoch
    whose gradient norm was not finite (bf16 at lr 1e-3 can do this to the medium layout on a GPU)."""
    import math

    import torch

    if all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        return
    first = next((h.get("epoch") for h in log_history if not math.isfinite(float(h.get("grad_norm", 0.0)))), None)
    where = f"; the gradient norm was first logged non-finite at epoch {first:.2f}" if first is not None else ""
    raise FloatingPointError(f"the warm start diverged: weights became non-finite{where}. Train again with a lower "
                             f"--lr (now {cfg.lr:g})" + (" or with --bf16 false" if cfg.bf16 else ""))


def sharpen_logits(model: Any, factor: float) -> Any:
    """``model`` with its logits multiplied by ``factor``: the weight of its final RMSNorm scaled, which the tied output
    embedding then multiplies (no bias anywhere after it). Returns the model.

    Why: minutes of fine-tuning leave the starter ranking the corpus's next token first but with little confidence
    (about 0.5 on many tokens of a program it has seen 30 times), so at the RL temperature of 0.9 nearly every program
    goes astray somewhere and few are correct; the same weights sharpened by 1.3 reproduce the programs they rank first
    far more often, while still writing a new variant on a share of the samples (the numbers are in
    ``recipes/warmstart.py``). Longer training sharpens too, at several times the cost."""
    import torch

    if factor != 1:
        with torch.no_grad():
            model.model.norm.weight.mul_(factor)
    return model


def _save(model: Any, tokenizer: Any, cfg: StarterConfig, stats: dict[str, Any], path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    info = {"config": dataclasses.asdict(cfg), "key": starter_key(cfg), "format_version": FORMAT_VERSION,
            "stats": stats}
    (path / "starter.json").write_text(json.dumps(info, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------------------------
# Cache


def cache_root() -> Path:
    """``$KEVIN_CACHE_DIR/starter`` if that variable is set, else ``~/.cache/kevin/starter``."""
    base = os.environ.get("KEVIN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kevin")
    return Path(base) / "starter"


_ABSENT = object()
_ADDED_LATER = {"deeper_refinements": 0.0}
"""Fields added after starters were trained and shipped, with their defaults: a field at its default is left out of
`starter_key`, so the starters trained before it keep their keys (the corpus is the same)."""


def starter_key(cfg: StarterConfig) -> str:
    """A hash of everything the weights depend on: the config, every training example's text, the format version."""
    h = hashlib.sha256()
    config = {k: v for k, v in dataclasses.asdict(cfg).items() if _ADDED_LATER.get(k, _ABSENT) != v}  # (see there)
    h.update(json.dumps({"config": config, "format": FORMAT_VERSION}, sort_keys=True).encode())
    for e in corpus_examples(cfg):
        h.update(json.dumps([e.messages, e.answer], sort_keys=True).encode())
    return h.hexdigest()[:16]


def starter_path(backend: str = "cpu", *, config: StarterConfig | None = None, shape: str | None = None) -> Path:
    """The cache directory of the starter of ``config`` (default: `StarterConfig` for ``backend`` and ``shape``)."""
    cfg = config or StarterConfig(backend=backend, **({"model_shape": shape} if shape else {}))
    return cache_root() / f"{cfg.backend}-{cfg.model_shape}-{starter_key(cfg)}"


SHIPPED = Path(__file__).resolve().parent / "starters"
"""Starters shipped inside the package, by cache name (`ship_starter`): a new install unpacks the CPU starter into
its cache instead of training it."""

PACKED = "model.packed.safetensors"
SHIP_LIMIT_BYTES = 10 * 10**6
"""The most packed weights `ship_starter` puts into the package."""
INT8_MIN_ELEMENTS = 2**20
"""`pack_state` stores tensors of at least this many elements (the small starter's token embedding, 2.1M) as int8."""


def pack_state(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` in about 40 % of its fp32 bytes, for shipping: a 2-D tensor of at least `INT8_MIN_ELEMENTS` (the
    tied token embedding, which is also the output layer) as int8 rows ``q = round(w / s)`` with one fp32 scale per
    row ``s = max|w_row| / 127`` (``<name>.row_scale``), every other tensor in bf16. `unpack_state` inverts it.

    Error: at most ``s / 2`` per int8 element, bf16's relative 2**-8 elsewhere. The small starter: 21.0 MB of fp32
    weights ship as 8.4 MB (a package holds at most 10 MB of them; bf16 alone would be 10.5 MB)."""
    import torch

    packed = {}
    for name, w in state.items():
        w = w.detach().to("cpu", torch.float32)
        if w.dim() == 2 and w.numel() >= INT8_MIN_ELEMENTS:
            scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127
            packed[name] = torch.round(w / scale).to(torch.int8)
            packed[name + ".row_scale"] = scale
        else:
            packed[name] = w.to(torch.bfloat16)
    return packed


def unpack_state(packed: dict[str, Any]) -> dict[str, Any]:
    """The fp32 tensors of a `pack_state` result: ``q * s`` for int8 rows, the bf16 values otherwise."""
    import torch

    return {name: w.to(torch.float32) * packed[name + ".row_scale"] if name + ".row_scale" in packed
            else w.to(torch.float32) for name, w in packed.items() if not name.endswith(".row_scale")}


def ship_starter(trained: str | os.PathLike, name: str, *, root: Path = SHIPPED) -> Path:
    """Copy the starter saved in ``trained`` into the package as ``root/name`` (``name``: its cache name, e.g.
    ``starter_path().name``), the weights packed (`pack_state`); other shipped copies of the same backend and shape,
    now stale, are removed. Returns the new directory. Refuses a starter that was itself unpacked from a shipped
    copy (shipping it again would refresh nothing) and packed weights over `SHIP_LIMIT_BYTES`."""
    from safetensors.torch import load_file, save_file

    trained, target = Path(trained), root / name
    if "weights" in json.loads((trained / "starter.json").read_text()):
        raise ValueError(f"{trained} was unpacked from a shipped copy, not trained: train it first (--overwrite)")
    scratch = root / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    for f in trained.iterdir():
        if f.is_file() and f.name != "model.safetensors":
            shutil.copy2(f, scratch / f.name)
    save_file(pack_state(load_file(trained / "model.safetensors")), scratch / PACKED, metadata={"format": "pt"})
    if (size := (scratch / PACKED).stat().st_size) > SHIP_LIMIT_BYTES:
        shutil.rmtree(scratch)
        raise ValueError(f"the packed weights take {size:,} bytes, over the {SHIP_LIMIT_BYTES:,} a package may hold")
    prefix = name.rsplit("-", 1)[0] + "-"
    for old in root.glob(prefix + "*"):
        shutil.rmtree(old)
    os.replace(scratch, target)
    return target


def _unpack_shipped(shipped: Path, out: Path) -> None:
    """The shipped starter ``shipped`` as an ordinary ``save_pretrained`` directory ``out`` (fp32 weights)."""
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True)
    for f in shipped.iterdir():
        if f.is_file() and f.name != PACKED:
            shutil.copy2(f, out / f.name)
    save_file(unpack_state(load_file(shipped / PACKED)), out / "model.safetensors", metadata={"format": "pt"})
    info = json.loads((out / "starter.json").read_text())
    info["weights"] = "unpacked from the copy shipped with kevin (bf16; the token embedding int8 per row)"
    (out / "starter.json").write_text(json.dumps(info, indent=2) + "\n")


def _is_complete(path: Path) -> bool:
    return (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file() and \
        (path / "starter.json").is_file()


@contextlib.contextmanager
def _lock(path: Path):
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_starter(cfg: StarterConfig, *, device: str | None = None, progress: bool = True,
                   overwrite: bool = False, threads: int | None = 1) -> Path:
    """The cache directory of ``cfg``'s starter, filled first when it is missing (or ``overwrite``): from the copy
    shipped in the package when there is one for this exact config and corpus (`SHIPPED`; not with ``overwrite``),
    else by training.

    One process fills it while the others wait on a file lock; the weights are written to a scratch directory
    beside it and renamed into place, so the directory is either complete or absent."""
    path = starter_path(config=cfg)
    if _is_complete(path) and not overwrite:
        _say(f"the starter is in the cache: {path}", progress)
        return path
    with _lock(path):
        if _is_complete(path) and not overwrite:  # another process trained it while this one waited
            _say(f"found the starter another process trained: {path}", progress)
            return path
        scratch = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        shutil.rmtree(scratch, ignore_errors=True)
        shipped = SHIPPED / path.name
        if (shipped / PACKED).is_file() and not overwrite:
            _say(f"unpacking the starter shipped with kevin into {path}", progress)
            _unpack_shipped(shipped, scratch)
        else:
            _say(f"no starter at {path}: training it (once; later loads read it from there)", progress)
            train_starter(cfg, scratch, device=device, progress=progress, threads=threads)
        if path.exists():
            shutil.rmtree(path)
        os.replace(scratch, path)
    _say(f"the starter is in the cache: {path}", progress)
    return path


def load_starter_dir(path: str | os.PathLike, *, device: Any = "cpu") -> tuple[Any, Any]:
    """(model in eval mode on ``device``, tokenizer) of the starter saved in ``path``.

    The tokenizer is read as it was saved, not through ``AutoTokenizer``: for a directory whose ``config.json`` names
    a Qwen2 model, that builds transformers' ``Qwen2Tokenizer``, whose word-splitting pre-tokenizer replaces the saved
    one, so the line-level merges would never apply and every prompt would be split unlike in training."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    path = Path(path).expanduser()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()
    return model, tokenizer


def load_starter(backend: str = "cpu", *, shape: str | None = None, config: StarterConfig | None = None,
                 device: Any = "cpu", train_device: str | None = None, progress: bool = True) -> tuple[Any, Any]:
    """(model in eval mode on ``device``, tokenizer) of the starter for ``backend`` (or ``config``), from the cache;
    trained there first when absent (`ensure_starter`, on ``train_device``: None means CUDA when available)."""
    cfg = config or StarterConfig(backend=backend, **({"model_shape": shape} if shape else {}))
    return load_starter_dir(ensure_starter(cfg, device=train_device, progress=progress), device=device)
