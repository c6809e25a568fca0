"""Per-token log-probs and the GRPO loss with clip-higher (Kevin, arXiv 2507.11948, Eq. 1; DAPO).

Shapes: ``B`` sequences (samples) in the batch, ``L`` response tokens (padded), ``V`` vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor

AGGREGATIONS = ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm")


def token_logprobs(logits: Tensor, ids: Tensor, *, temperature: float = 1.0, chunk_size: int = 1024) -> Tensor:
    """``log softmax(logits / temperature)[..., ids]``: the log-prob of each given token, in float32.

    ``logits[b, l]`` must be the distribution that produced ``ids[b, l]`` (shift a causal LM's logits
    by one before calling). The log-softmax is computed as ``x[id] - logsumexp(x)`` over chunks of
    ``chunk_size`` rows, so at most a float32 ``[chunk_size, V]`` block exists at a time, never the
    float32 ``[B, L, V]`` tensor (15 GB for B=16, L=16k, V=152k). Equal to the naive
    ``logits.float().div(temperature).log_softmax(-1).gather(-1, ids[..., None])[..., 0]``. Differentiable.

    Args:
        logits: ``[B, L, V]`` (any float dtype, e.g. bf16).
        ids: ``[B, L]`` integer token ids.
        temperature: the sampling temperature; the behaviour log-probs of a policy that sampled at
            temperature tau are those of ``logits / tau``.
        chunk_size: rows of ``B*L`` processed at once.

    Returns:
        ``[B, L]`` float32 log-probs.

    >>> token_logprobs(torch.tensor([[[0.0, 0.0]]]), torch.tensor([[1]]))  # log(1/2)
    tensor([[-0.6931]])
    """
    assert logits.ndim == 3 and ids.shape == logits.shape[:2], (logits.shape, ids.shape)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    B, L, V = logits.shape
    flat_logits = logits.reshape(B * L, V)  # [B*L, V]
    flat_ids = ids.reshape(B * L, 1)  # [B*L, 1]
    out = []
    for start in range(0, B * L, chunk_size):
        chunk = flat_logits[start : start + chunk_size].float()  # [c, V]
        if temperature != 1.0:
            chunk = chunk / temperature
        picked = chunk.gather(1, flat_ids[start : start + chunk_size])[:, 0]  # [c]
        out.append(picked - torch.logsumexp(chunk, dim=-1))
    if not out:
        return torch.zeros(B, L, dtype=torch.float32, device=logits.device)
    return torch.cat(out).reshape(B, L)


def grpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    kl_coef: float = 0.0,
    ref_logprobs: Tensor | None = None,
    aggregation: str = "seq-mean-token-mean",
    max_response_len: int | None = None,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The clipped GRPO surrogate with clip-higher, optional k3 KL, and a named aggregation.

    Per token, with ratio ``r = exp(lp - old_lp)``, the sequence's advantage ``A`` and the importance weight ``w``
    (``is_weights``, 1 without them):

        l = w * max(-A * r, -A * clip(r, 1 - clip_low, 1 + clip_high)) + kl_coef * k3
        k3 = exp(ref_lp - lp) - (ref_lp - lp) - 1          (only when kl_coef > 0)

    There is no dual clip (unlike verl's default) and no clamp of the log-ratio (like TRL). Tokens whose
    clipped branch is active get zero policy gradient. Aggregation over masked tokens (``m`` = mask):

        "seq-mean-token-mean"      mean_i( sum_t l m / sum_t m )   paper Eq. 1, TRL "grpo", verl same name
        "token-mean"               sum l m / sum m                 DAPO, TRL "bnpo", verl "token-mean"
        "seq-mean-token-sum-norm"  sum l m / (B * max_response_len) Dr. GRPO, TRL "dr_grpo"
                                   (the paper's "constant length normalization"; ``max_response_len``
                                   defaults to L)

    Args:
        logprobs: ``[B, L]`` current log-probs (with grad).
        old_logprobs: ``[B, L]`` behaviour log-probs (computed before the first gradient step).
        advantages: ``[B]`` one advantage per sequence, broadcast over its tokens.
        mask: ``[B, L]`` 1 on tokens the policy sampled, 0 on padding.
        clip_low, clip_high: the ratio is clipped to ``[1 - clip_low, 1 + clip_high]`` (DAPO's
            clip-higher: 0.2 and 0.28 in the paper).
        kl_coef: beta; 0 in the paper (no reference model needed).
        ref_logprobs: ``[B, L]`` reference-model log-probs, required when ``kl_coef > 0``.
        aggregation: one of :data:`AGGREGATIONS`.
        max_response_len: the constant of "seq-mean-token-sum-norm".
        is_weights: ``[B, L]`` per-token weights of the policy term, no gradient: the truncated importance weights
            of `truncated_is_weights` when another engine sampled the tokens; None: 1.

    Returns:
        ``(loss, stats)``: a scalar loss, and detached scalar statistics: ``loss/policy``,
        ``loss/kl`` (the k3 KL to the reference, 0 without one), ``clip/low_frac`` (share of masked
        tokens with A < 0 and r < 1 - clip_low), ``clip/high_frac`` (A > 0 and r > 1 + clip_high),
        ``ratio/mean``, ``kl/approx_old`` (k3 estimate of KL(old || new)), ``tokens``; with ``is_weights``, also
        ``tis/weight_mean`` (their mean over masked tokens).

    >>> lp = torch.zeros(1, 2); old = torch.tensor([[0.0, -1.0]])  # ratios 1 and e = 2.718
    >>> loss, stats = grpo_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 2))
    >>> round(loss.item(), 4)  # -(1 + min(2.718, 1.28)) / 2 = -1.14
    -1.14
    """
    assert logprobs.ndim == 2, logprobs.shape
    B, L = logprobs.shape
    assert old_logprobs.shape == (B, L) and mask.shape == (B, L), (old_logprobs.shape, mask.shape)
    assert advantages.shape == (B,), advantages.shape
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; expected one of {AGGREGATIONS}")
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip bounds must be >= 0, got {clip_low}, {clip_high}")
    if kl_coef > 0 and ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs")

    mask = mask.to(logprobs.dtype)
    adv = advantages.to(logprobs.dtype)[:, None]  # [B, 1]
    log_ratio = logprobs - old_logprobs  # [B, L]
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)  # [B, L]
    if is_weights is not None:
        assert is_weights.shape == (B, L), is_weights.shape
        per_token = is_weights.detach().to(per_token.dtype) * per_token
    policy_term = per_token

    kl = torch.zeros_like(per_token)
    if ref_logprobs is not None:
        assert ref_logprobs.shape == (B, L), ref_logprobs.shape
        d = ref_logprobs - logprobs
        kl = torch.exp(d) - d - 1.0  # [B, L], k3 >= 0
    if kl_coef > 0:
        per_token = per_token + kl_coef * kl

    def aggregate(x: Tensor) -> Tensor:
        if aggregation == "seq-mean-token-mean":
            return ((x * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()
        if aggregation == "token-mean":
            return (x * mask).sum() / mask.sum().clamp(min=1)
        norm = L if max_response_len is None else max_response_len
        return (x * mask).sum() / (B * norm)

    loss = aggregate(per_token)

    with torch.no_grad():
        n_tok = mask.sum().clamp(min=1)
        low = ((adv < 0) & (ratio < 1.0 - clip_low)).to(mask.dtype)
        high = ((adv > 0) & (ratio > 1.0 + clip_high)).to(mask.dtype)
        stats = {
            "loss/policy": aggregate(policy_term).detach(),
            "loss/kl": aggregate(kl).detach(),
            "clip/low_frac": (low * mask).sum() / n_tok,
            "clip/high_frac": (high * mask).sum() / n_tok,
            "ratio/mean": (ratio * mask).sum() / n_tok,
            "kl/approx_old": (((ratio - 1.0) - log_ratio) * mask).sum() / n_tok,
            "tokens": mask.sum(),
        }
        if is_weights is not None:
            stats["tis/weight_mean"] = (is_weights * mask).sum() / n_tok
    return loss, stats


def truncated_is_weights(old_logprobs: Tensor, sampler_logprobs: Tensor, *, cap: float) -> Tensor:
    """Truncated importance-sampling weights for tokens that another engine sampled (TIS; TRL's and verl's vLLM
    correction): ``[B, L], [B, L] -> [B, L]``, no gradient.

        w = min(exp(old_lp - sampler_lp), cap)

    ``old_logprobs`` are the trainer's log-probs of the tokens before the update (the policy the loss's ratio starts
    from), ``sampler_logprobs`` those the sampler reported for the same tokens: the two differ by the engines'
    numerics (kernels, precision), and w reweights each token's policy gradient from the sampler's distribution
    to the trainer's; the cap bounds the variance. Padding gets whatever its values give: the loss masks it.

    >>> truncated_is_weights(torch.tensor([[0.0, -1.0]]), torch.tensor([[-1.0, 0.0]]), cap=2.0)  # e^1 = 2.72 > 2
    tensor([[2.0000, 0.3679]])
    """
    assert old_logprobs.ndim == 2 and sampler_logprobs.shape == old_logprobs.shape, (old_logprobs.shape,
                                                                                     sampler_logprobs.shape)
    if cap <= 0:
        raise ValueError(f"the importance weights' cap must be > 0, got {cap}")
    return torch.exp(old_logprobs.detach() - sampler_logprobs.detach()).clamp(max=cap)


def logprob_mismatch(logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor) -> Tensor:
    """Mean ``|lp - sampler_lp|`` over masked tokens (``[B, L]`` each -> scalar, no gradient): how far the trainer's
    log-probs of the sampled tokens are from the ones the sampler reported (0 when both computed the same numbers).

    >>> logprob_mismatch(torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -2.0]]), torch.ones(1, 2))  # (0.5 + 0) / 2
    tensor(0.2500)
    """
    assert logprobs.ndim == 2 and sampler_logprobs.shape == logprobs.shape == mask.shape
    mask = mask.to(torch.float32)
    diff = (logprobs.detach().float() - sampler_logprobs.detach().float()).abs()
    return (diff * mask).sum() / mask.sum().clamp(min=1)
