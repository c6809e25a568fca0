"""Samples -> padded tensors for a causal LM, and the per-token log-probs of their responses.

Layout of a batch of B samples (P = longest prompt, L = longest response)::

    input_ids  [B, P + L]   p p p pad pad p | r r r pad     prompt padded before its LAST token,
    mask       [B, L]                         1 1 1 0       response right-padded; 1 = sampled token

Every prompt's last token sits in column ``P - 1`` and every response starts in column ``P``, so the
logits that predict the response are one slice ``logits[:, P-1 : P+L-1]`` (and the model only has to
return the last ``L + 1`` positions' logits). The padding goes *inside* the prompt rather than in front
of it so that no padded query row is fully masked: a left-padded row's first positions attend to nothing,
and fully masked rows give NaN in CUDA attention (pytorch/pytorch#110213). With left padding, the gradient
was NaN on an H200 (sdpa, torch 2.11); with this layout it is finite, and equal on 1 and 2 processes
(benchmarks/results/train_h200.md). Here each pad attends to the prompt
tokens before it; pads are never attended by real tokens (attention mask 0), and position ids count real
tokens only, so every real token's output is exactly what it is unpadded.

>>> from kevin.core.types import Sample
>>> s = [Sample((5, 6), (7,), (1,), 1.0, 0.5, "t", 0, 0, 0), Sample((5,), (8, 9), (1, 1), 0.0, -0.5, "t", 0, 1, 0)]
>>> b = collate(s, pad_id=0)
>>> b.input_ids.tolist(), b.mask.tolist(), b.prompt_len
([[5, 6, 7, 0], [0, 5, 8, 9]], [[1.0, 0.0], [1.0, 1.0]], 2)

Imports torch only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any, Sequence

import torch
from torch import Tensor

from kevin.core.loss import token_logprobs
from kevin.core.types import Sample

__all__ = [
    "Batch", "collate", "slice_batch", "micro_batches", "response_logprobs", "loss_weight", "split_minibatches",
]


@dataclass(frozen=True)
class Batch:
    """Padded tensors of B samples; see the module docstring for the layout."""

    input_ids: Tensor  # [B, P+L] long
    attention_mask: Tensor  # [B, P+L] long, 1 on real tokens
    position_ids: Tensor  # [B, P+L] long, 0.. over real tokens
    response_ids: Tensor  # [B, L] long (pad where mask == 0)
    mask: Tensor  # [B, L] float32, 1 on sampled tokens
    advantages: Tensor  # [B] float32
    prompt_len: int  # P
    old_logprobs: Tensor | None = None  # [B, L] float32 sampling log-probs, when every sample has them

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def response_len(self) -> int:
        return int(self.response_ids.shape[1])

    def to(self, device: Any) -> "Batch":
        """The same batch on ``device``."""
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return replace(self, input_ids=move(self.input_ids), attention_mask=move(self.attention_mask),
                       position_ids=move(self.position_ids), response_ids=move(self.response_ids),
                       mask=move(self.mask), advantages=move(self.advantages), old_logprobs=move(self.old_logprobs))


def collate(samples: Sequence[Sample], pad_id: int) -> Batch:
    """Pad B samples into a :class:`Batch` (prompts padded before their last token, responses right-padded).

    ``mask`` is each sample's own ``loss_mask`` padded with 0, so tokens the splitter marked as not
    sampled stay untrained. ``old_logprobs`` is filled only when every sample carries them.
    """
    if not samples:
        raise ValueError("collate needs at least one sample")
    B = len(samples)
    P = max(len(s.prompt_ids) for s in samples)
    L = max(max(len(s.response_ids) for s in samples), 1)
    input_ids = torch.full((B, P + L), pad_id, dtype=torch.long)
    attention = torch.zeros(B, P + L, dtype=torch.long)
    response = torch.full((B, L), pad_id, dtype=torch.long)
    mask = torch.zeros(B, L, dtype=torch.float32)
    have_old = all(s.old_logprobs is not None for s in samples)
    old = torch.zeros(B, L, dtype=torch.float32) if have_old else None
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        assert len(s.loss_mask) == r, (len(s.loss_mask), r)
        if p == 0:
            raise ValueError("a sample needs at least one prompt token")
        head = p - 1 if p > 1 else 0  # a one-token prompt is left-padded (nothing before it to attend)
        prompt = torch.tensor(s.prompt_ids, dtype=torch.long)
        input_ids[i, :head] = prompt[:head]
        input_ids[i, P - (p - head) : P] = prompt[head:]
        input_ids[i, P : P + r] = torch.tensor(s.response_ids, dtype=torch.long)
        attention[i, :head] = 1
        attention[i, P - (p - head) : P + r] = 1
        response[i, :r] = input_ids[i, P : P + r]
        mask[i, :r] = torch.tensor(s.loss_mask, dtype=torch.float32)
        if old is not None:
            old[i, :r] = torch.tensor(s.old_logprobs, dtype=torch.float32)
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)  # [B, P+L]
    advantages = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    return Batch(input_ids, attention, position_ids, response, mask, advantages, P, old)


def slice_batch(batch: Batch, start: int, stop: int, *, old_logprobs: Tensor | None = None) -> Batch:
    """Rows ``start:stop`` of ``batch``, with padding columns that no remaining row uses trimmed.

    ``old_logprobs`` ([B, L] of the full batch) replaces the batch's own before slicing, when given.
    """
    rows = slice(start, stop)
    att = batch.attention_mask[rows]
    P, L = batch.prompt_len, batch.response_len
    keep = att[:, :P].any(0)  # prompt columns some row uses (pads of every row are dropped)
    keep[P - 1] = True  # the column whose logits predict the first response token
    cols = keep.nonzero()[:, 0]
    used_resp = batch.mask[rows].any(0).nonzero()
    resp_len = max(int(used_resp[-1]) + 1, 1) if len(used_resp) else 1
    old = batch.old_logprobs if old_logprobs is None else old_logprobs
    cols = torch.cat([cols, torch.arange(P, P + resp_len, dtype=torch.long, device=att.device)])
    return Batch(
        input_ids=batch.input_ids[rows][:, cols],
        attention_mask=att[:, cols],
        position_ids=batch.position_ids[rows][:, cols],
        response_ids=batch.response_ids[rows, :resp_len],
        mask=batch.mask[rows, :resp_len],
        advantages=batch.advantages[rows],
        prompt_len=int(keep.sum()),
        old_logprobs=None if old is None else old[rows, :resp_len],
    )


def micro_batches(batch: Batch, size: int, *, old_logprobs: Tensor | None = None) -> list[Batch]:
    """Consecutive slices of at most ``size`` rows (each trimmed; see :func:`slice_batch`)."""
    if size <= 0:
        raise ValueError(f"micro-batch size must be > 0, got {size}")
    return [slice_batch(batch, i, min(i + size, batch.size), old_logprobs=old_logprobs) for i in range(0, batch.size, size)]


def loss_weight(micro: Batch, full: Batch, aggregation: str, *, tokens_everywhere: float | None = None,
                samples_everywhere: float | None = None, world: int = 1) -> float:
    """The factor that makes summed micro-batch losses equal the loss of ``full`` in one piece.

    Per-sequence aggregations ("seq-mean-token-mean", and "seq-mean-token-sum-norm" with a fixed
    ``max_response_len``) average over sequences: weight B_micro / B. "token-mean" averages over
    tokens: weight tokens_micro / tokens_full. Example: 3 of 4 sequences -> 0.75.

    With ``world`` processes whose gradients are averaged (DDP, FSDP) the weights count every process's share of the
    mini-batch: "token-mean" needs ``tokens_everywhere``, the sum of ``full``'s tokens over the processes: weight
    world * tokens_micro / tokens_everywhere. Example: 3 of this process's 4 tokens, and 4 on the other of 2
    processes: 2 * 3 / 8 = 0.75. The per-sequence ones take ``samples_everywhere`` likewise, which shares of
    different sizes need: 2 of this process's 3 sequences and 1 on the other: 2 * 2 / 4 = 1 (its other sequence
    weighs 2 * 1 / 4 = 0.5, the other process's 0.5; averaged over 2 processes each of the 4 sequences weighs 1/4).
    Without it, every process is taken to hold as many sequences as ``full``: B_micro / B.
    """
    if aggregation == "token-mean":
        if tokens_everywhere is None:
            return float(micro.mask.sum() / full.mask.sum().clamp(min=1))
        return float(world * micro.mask.sum() / max(float(tokens_everywhere), 1.0))
    if samples_everywhere is None:
        return micro.size / full.size
    return world * micro.size / max(float(samples_everywhere), 1.0)


def response_logprobs(model: Any, batch: Batch, *, temperature: float = 1.0, chunk_size: int = 1024) -> Tensor:
    """``[B, L]`` log-probs of ``batch.response_ids`` under a causal LM (transformers-style call).

    The model returns logits only for the last ``L + 1`` positions (``logits_to_keep``); the logits at
    column ``P - 1 + j`` predict response token ``j``. Differentiable unless called under no_grad.
    """
    L = batch.response_len
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                position_ids=batch.position_ids, logits_to_keep=L + 1, use_cache=False)
    logits = out.logits[:, -(L + 1) : -1]  # [B, L, V]
    return token_logprobs(logits, batch.response_ids, temperature=temperature, chunk_size=chunk_size)


def split_minibatches(samples: Sequence[Sample], n: int, *, seed: int) -> list[list[Sample]]:
    """Shuffle ``samples`` with ``random.Random(seed)`` and deal them into ``n`` mini-batches.

    Sizes differ by at most one (10 samples, n = 2 -> 5 + 5; 7, n = 2 -> 4 + 3). Inside a mini-batch the
    samples are sorted longest first (prompt + response), so consecutive micro-batches pad little.
    The paper's "two gradient steps per batch" is ``n = 2`` (docs/method.md, "Updates and schedule").
    """
    if n < 1:
        raise ValueError(f"need n >= 1 mini-batches, got {n}")
    order = list(samples)
    random.Random(seed).shuffle(order)
    size, extra = divmod(len(order), n)
    out, start = [], 0
    for i in range(n):
        stop = start + size + (1 if i < extra else 0)
        chunk = sorted(order[start:stop], key=lambda s: len(s.prompt_ids) + len(s.response_ids), reverse=True)
        if chunk:
            out.append(chunk)
        start = stop
    return out
