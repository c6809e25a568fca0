"""Attention functions for decoding with a static KV cache, plugged into ``transformers``' attention interface.

During a decoding step of a grouped-query model (``H`` query heads sharing ``Hkv`` KV heads, ``R = H / Hkv``)
attention reads the whole KV cache once per layer: that read, with the weights, is the step's cost. Three
implementations of the same function

    out[b, g*R + r] = sum_s softmax_s(scale * <q[b, g*R + r], k[b, g, s]> + mask[b, s]) * v[b, g, s]

for one query token (``query [B, H, 1, D]``, ``key, value [B, Hkv, S, D]``, ``mask [B, 1, 1, S]``):

- ``"grouped"`` (:func:`grouped_attention`): the ``R`` query heads of a KV head are stacked as rows of one
  matmul against that head; transformers' eager arithmetic (scores in the model dtype, softmax in fp32).
- ``"grouped_sdpa"`` (:func:`grouped_sdpa_attention`): the same stacking handed to
  ``F.scaled_dot_product_attention`` as ``R`` query rows, so a fused kernel never writes the scores.
- ``"triton"`` (:func:`triton_attention`): a split-KV flash-decoding kernel that never loads a masked cache
  slot (left padding, and the slots past the current position, which a static cache of ``S`` slots holds
  until the end of generation); told how many slots are written (``kevin_live_slots``), it divides only
  those among its programs. Scores and softmax in fp32. CUDA only; elsewhere it falls back to
  ``"grouped"``. Measured on an H200 at the 7B decoding shape with 2,560 of 3,072 slots written: 0.171 ms
  per layer against 0.191 (all slots divided), 0.357 (grouped), 0.281 (grouped_sdpa) and 6.82 (transformers'
  sdpa) (``benchmarks/results/generation_h200.md``).

transformers' own ``sdpa`` cannot use grouped-query attention with a mask, so it copies K and V ``R`` times
per layer and step: for a static cache that copy dominates decoding, and it leads the cost of ``generate``'s
decoding steps on the CPU too, where `TransformersPolicy` decodes with these as well. Every function here sends
forwards of more than one query token (prefill, training) to transformers' sdpa, after dropping cache slots that
no query may attend to (:func:`prefill_attention`).

Like the policy package itself (``kevin.core.policy``), this module imports ``transformers`` (and ``triton`` for ``"triton"``) lazily, inside the
functions that need them; unlike the pure core, it is plumbing for the policy backend.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

IMPLEMENTATIONS = ("grouped", "grouped_sdpa", "triton")
LIVE_SLOTS = "kevin_live_slots"  # forward keyword read by `triton_attention`: how many cache slots are written
_FRESH_PREFILL: str | None = None  # set by `fresh_prefill` (kevin.core.policy.engine.decoding): None, "padded" or "unpadded"


@contextlib.contextmanager
def fresh_prefill(padded: bool = True) -> Iterator[None]:
    """Declare that forwards of several query tokens inside are prefills into an empty static cache.

    Such a prefill writes slots 0..Q-1 and its queries sit at those slots, so no query may attend to a slot
    from Q on (causality by slot): `prefill_attention` then cuts them without reading the mask, which keeps
    the cut inside a compiled graph. ``padded=False`` declares that no row has padding and every layer attends
    to all earlier tokens (no sliding window): the attention is then plain causal and runs without a mask (a
    compiled graph cannot see that the mask is all ones, and sdpa with a mask took 760 ms against 227 without,
    for a 7B prefill on an H200).
    """
    # A process-wide flag (read inside compiled graphs): no other thread may run a forward meanwhile.
    global _FRESH_PREFILL
    saved, _FRESH_PREFILL = _FRESH_PREFILL, ("padded" if padded else "unpadded")
    try:
        yield
    finally:
        _FRESH_PREFILL = saved


@torch.library.custom_op("kevin::prefill_sdpa", mutates_args=())
def prefill_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                 scale: float, groups: int) -> torch.Tensor:
    """Causal sdpa of a prefill into an empty cache, as transformers' eager sdpa computes it; an opaque operator
    for ``torch.compile``, so the compiled prefill passes it one bool mask instead of rewriting the mask into a
    float bias per layer (which made a compiled 7B prefill's attention 3.6x slower on an H200).

    query [B, H, Q, D]; key, value [B, Hkv, Q, D]; mask [B, 1, Q, Q] bool or None (causal) -> [B, Q, H, D].
    """
    import torch.nn.functional as F

    if mask is None:
        out = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scale, enable_gqa=groups > 1)
    else:
        if groups > 1:
            key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale)
    return out.transpose(1, 2).contiguous()


@prefill_sdpa.register_fake
def _(query, key, value, mask, scale, groups):
    b, h, q, d = query.shape
    return query.new_empty((b, q, h, d))


@torch.library.custom_op("kevin::rotary_cos_sin", mutates_args=())
def rotary_cos_sin(position_ids: torch.Tensor, inv_freq: torch.Tensor, scaling: float,
                   dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotary embedding's (cos, sin) as transformers' ``*RotaryEmbedding.forward`` computes them, as one opaque
    operator, so that a compiled prefill computes them once and its layers read them.

    position_ids [B, Q] int64, inv_freq [D/2] -> cos, sin [B, Q, D] in ``dtype``:
        f = position * inv_freq;  cos = cos([f, f]) * scaling;  sin = sin([f, f]) * scaling

    Traced through, cos and sin are pointwise in the positions, so Inductor recomputes them inside every layer's
    rotary kernel, for every head: in a profile of a compiled 7B prefill on an H200 (``benchmarks/LOG.md``) the kernel
    that rotates q took 5.2 ms per layer, where reading and writing q takes about 0.9 ms; computed once, cos and sin
    bring one layer's rotary from 3.62 to 1.05 ms (``benchmarks/prefill_rotary.py``; ``benchmarks/README.md``).
    """
    freqs = position_ids[..., None].float() * inv_freq.float()  # [B, Q, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)


@rotary_cos_sin.register_fake
def _(position_ids, inv_freq, scaling, dtype):
    shape = (*position_ids.shape, 2 * inv_freq.shape[0])
    return position_ids.new_empty(shape, dtype=dtype), position_ids.new_empty(shape, dtype=dtype)


ROTARY_MODELS = ("llama", "mistral", "qwen2", "qwen3")
"""``config.model_type``s whose rotary embedding is ``cos, sin = cos([f, f]), sin([f, f])`` of ``f = position *
inv_freq``, what `rotary_cos_sin` computes (others interleave the halves, scale the frequencies per call, or return
one complex tensor)."""
_STATIC_ROPE = ("default", "linear", "llama3", "yarn")  # frequencies fixed at init (no per-call update)
_PREFILL_ROTARY: dict[type, type] = {}  # rotary-embedding class -> its subclass made by `install_prefill_rotary`


def _new_instance(cls: type) -> Any:
    """An empty instance of ``cls``, for unpickling (its state is set after)."""
    return cls.__new__(cls)


def _prefill_rotary_class(cls: type) -> type:
    """A subclass of ``cls`` whose forward runs :func:`rotary_cos_sin` inside `fresh_prefill`, ``cls.forward`` else.

    Pickled (and deep-copied) as ``cls`` itself: the subclass exists only in the process that made it, and
    `install_prefill_rotary` makes it again for the copy."""
    if cls not in _PREFILL_ROTARY:
        def forward(self: Any, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            if _FRESH_PREFILL is None:
                return cls.forward(self, x, position_ids)
            return torch.ops.kevin.rotary_cos_sin(position_ids, self.inv_freq, float(self.attention_scaling), x.dtype)

        def __reduce_ex__(self: Any, protocol: int) -> Any:
            _, _, *state = cls.__reduce_ex__(self, protocol)  # (copyreg.__newobj__, (sub,), state, ...)
            return (_new_instance, (cls,), *state)

        _PREFILL_ROTARY[cls] = type(cls.__name__, (cls,), {"forward": forward, "__reduce_ex__": __reduce_ex__,
                                                           "__module__": cls.__module__})
    return _PREFILL_ROTARY[cls]


def _same_cos_sin(module: Any, dtype: torch.dtype) -> bool:
    """Whether `rotary_cos_sin` gives exactly the module's own (cos, sin) at a few positions, in ``dtype``."""
    device = module.inv_freq.device
    positions = torch.tensor([[0, 1, 7, 1000, 31999]], device=device)
    x = torch.zeros(1, 5, 1, dtype=dtype, device=device)
    with torch.no_grad():
        own = type(module).forward(module, x, positions)
        ours = torch.ops.kevin.rotary_cos_sin(positions, module.inv_freq, float(module.attention_scaling), dtype)
    return (isinstance(own, tuple) and len(own) == 2
            and all(a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(own, ours)))


def install_prefill_rotary(model: Any) -> int:
    """Inside `fresh_prefill`, compute the (cos, sin) of ``model``'s rotary-embedding modules with `rotary_cos_sin`;
    elsewhere (decoding steps, training) their own forward runs unchanged. Returns the number of modules changed.

    Only for `ROTARY_MODELS`, and only modules of the plain form (``inv_freq``, ``attention_scaling``, a ``rope_type``
    whose frequencies are fixed at init) whose own forward gives exactly `rotary_cos_sin`'s values at a few positions
    in the model's dtype (checked here). Each module gets a subclass of its class, so a ``.to`` of the model keeps
    working on its own buffers. Idempotent.
    """
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(config, "model_type", None) not in ROTARY_MODELS:
        return 0
    dtype = next(model.parameters()).dtype
    changed = 0
    for module in model.modules():
        cls = type(module)
        if (cls in _PREFILL_ROTARY.values() or not cls.__name__.endswith("RotaryEmbedding")
                or not isinstance(getattr(module, "inv_freq", None), torch.Tensor)
                or not isinstance(getattr(module, "attention_scaling", None), (int, float))
                or getattr(module, "rope_type", None) not in _STATIC_ROPE
                or not _same_cos_sin(module, dtype)):
            continue
        module.__class__ = _prefill_rotary_class(cls)
        changed += 1
    return changed


def prefill_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' sdpa for forwards of several query tokens, with the never-attended cache tail dropped.

    query [B, H, Q, D]; key, value [B, Hkv, S, D]; attention_mask [B, 1, Q, S] bool or None.

    A left-padded prefill into an empty static cache of S > Q slots carries a mask over all S slots, so the
    fused kernel does S / Q times the work. When every slot from Q on is masked for every query (checked on
    the mask, so exact whatever the cache holds), those slots are cut: key[:, :, :Q], mask[..., :Q]. The check
    reads the mask (a device sync), so it runs only outside ``torch.compile``; inside `fresh_prefill` the cut is
    known to be exact and made without the check, and the attention runs as :func:`prefill_sdpa`.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q_len, s = query.shape[2], key.shape[2]
    if (_FRESH_PREFILL and s >= q_len and not kwargs.get("dropout") and kwargs.get("position_bias") is None
            and (attention_mask is None or attention_mask.dtype == torch.bool)):
        unmasked = _FRESH_PREFILL == "unpadded" and getattr(module, "sliding_window", None) is None
        mask = None if attention_mask is None or unmasked else attention_mask[..., :q_len]
        scale = kwargs.get("scaling") or query.shape[-1] ** -0.5
        groups = query.shape[1] // key.shape[1]
        out = torch.ops.kevin.prefill_sdpa(query, key[:, :, :q_len], value[:, :, :q_len], mask, scale, groups)
        return out, None
    if (
        attention_mask is not None
        and attention_mask.dtype == torch.bool
        and s > q_len
        and attention_mask.shape[-1] >= s
        and not torch.compiler.is_compiling()
        and not bool(attention_mask[..., q_len:s].any())
    ):
        key, value, attention_mask = key[:, :, :q_len], value[:, :, :q_len], attention_mask[..., :q_len]
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def _decoding(module: Any, query: torch.Tensor, dropout: float, kwargs: dict) -> bool:
    """True when the grouped paths apply: one query token, grouped heads, no dropout or position bias."""
    return (query.shape[2] == 1 and getattr(module, "num_key_value_groups", 1) > 1 and not dropout
            and kwargs.get("position_bias") is None)


def grouped_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """``"grouped"``: one matmul per KV head over its R query heads; returns ([B, 1, H, D], None).

        scores[b, g, r, s] = scaling * <q[b, g*R + r], k[b, g, s]>        [B, Hkv, R, S], model dtype
        out[b, g*R + r]    = sum_s softmax_s(scores + mask)[b, g, r, s] * v[b, g, s]   (softmax in fp32)

    transformers' eager arithmetic without copying K and V once per query head.
    """
    if not _decoding(module, query, dropout, kwargs):
        return prefill_attention(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    b, h, _, d = query.shape
    hkv = key.shape[1]
    scale = scaling if scaling is not None else d**-0.5
    q = query.reshape(b, hkv, h // hkv, d)  # [B, Hkv, R, D]; head g*R + r uses KV head g, as repeat_kv does
    scores = torch.matmul(q, key.transpose(-1, -2)) * scale  # [B, Hkv, R, S]
    if attention_mask is not None:
        mask = attention_mask[:, :, :, : key.shape[2]]  # [B, 1, 1, S] broadcasts over Hkv and R
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + mask
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    out = torch.matmul(probs, value)  # [B, Hkv, R, D]
    return out.reshape(b, h, 1, d).transpose(1, 2).contiguous(), None  # [B, 1, H, D]


def grouped_sdpa_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """``"grouped_sdpa"``: the R query heads of a KV head as R query rows of one fused sdpa call.

    sdpa(q [B, Hkv, R, D], k, v [B, Hkv, S, D], mask [B, 1, 1, S]) -> [B, Hkv, R, D], no causal mask (the
    mask already hides the future); returns ([B, 1, H, D], None).
    """
    if not _decoding(module, query, dropout, kwargs):
        return prefill_attention(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    b, h, _, d = query.shape
    hkv = key.shape[1]
    q = query.reshape(b, hkv, h // hkv, d)
    mask = None if attention_mask is None else attention_mask[:, :, :, : key.shape[2]]
    out = torch.nn.functional.scaled_dot_product_attention(q, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(b, h, 1, d).transpose(1, 2).contiguous(), None


# ----------------------------------------------------------------------------------------------------------
# triton: split-KV flash decoding


_KERNELS: tuple | None = None  # (split_kernel, combine_kernel) once `load_triton_kernels` succeeded
# Launch settings of `triton_attention` (keyword arguments of `triton_decode`): the fastest of the 36 that
# `benchmarks/decode_attention.py --sweep-live` timed on an H200 at the 7B decoding shape with 2,560 of 3,072 slots
# written and the live-slot bound (0.166 ms per layer, 4.05 TB/s of K and V; 0.178 ms with the earlier settings;
# benchmarks/results/generation_h200.md).
TRITON_CONFIG: dict[str, Any] = {"block_n": 64, "num_warps": 4, "num_stages": 2, "skip": False, "target_programs": 1024}


def load_triton_kernels() -> bool:
    """Define the Triton kernels (compiled by Triton on first launch); False when triton is not installed.

    Called by ``register("triton")``, outside any ``torch.compile`` region, so that the compiled decoding
    forward only reads the module global.
    """
    global _KERNELS
    if _KERNELS is not None:
        return True
    try:
        import triton
        import triton.language as tl
    except ImportError:  # pragma: no cover - CPU-only installs
        return False

    @triton.jit
    def split_kernel(Q, K, V, MASK, LIVE, O, LSE, S, n_split, n_iter, scale,
                     stride_kb, stride_kh, stride_ks, stride_vb, stride_vh, stride_vs, stride_mb, stride_ms,
                     HKV: tl.constexpr, R: tl.constexpr, RP: tl.constexpr, D: tl.constexpr,
                     BLOCK_N: tl.constexpr, HAS_MASK: tl.constexpr, HAS_LIVE: tl.constexpr,
                     PRECISION: tl.constexpr, SKIP: tl.constexpr):
        # program (b * HKV + g, split): the R query rows of KV head g over n_iter blocks of cache slots; with
        # HAS_LIVE, the first LIVE[0] slots (read on the device) are shared out among the n_split programs
        # instead, so none spends time on the cache's unwritten tail
        bh = tl.program_id(0)
        sp = tl.program_id(1)
        b = bh // HKV
        g = bh % HKV
        rows = tl.arange(0, RP)
        cols = tl.arange(0, D)
        q = tl.load(Q + (bh * R + rows[:, None]) * D + cols[None, :], mask=rows[:, None] < R, other=0.0)  # [RP, D]
        m_i = tl.full([RP], float("-inf"), tl.float32)
        l_i = tl.zeros([RP], tl.float32)
        acc = tl.zeros([RP, D], tl.float32)
        k_base = K + b * stride_kb + g * stride_kh
        v_base = V + b * stride_vb + g * stride_vh
        end = S
        first = sp * n_iter
        count = n_iter
        if HAS_LIVE:
            end = tl.minimum(tl.load(LIVE), S)
            live_blocks = tl.cdiv(end, BLOCK_N)
            per_split = tl.cdiv(live_blocks, n_split)
            first = sp * per_split
            count = tl.minimum(per_split, live_blocks - first)  # <= 0: nothing left for this split
        for i in range(0, count):  # count blocks of BLOCK_N slots from block `first`
            offs = (first + i) * BLOCK_N + tl.arange(0, BLOCK_N)
            keep = offs < end
            if HAS_MASK:
                keep = keep & (tl.load(MASK + b * stride_mb + offs * stride_ms, mask=offs < end, other=0) != 0)
            # Masked-off slots are never loaded (predicated loads); SKIP also skips a block's arithmetic when
            # none of its slots is kept, at the price of a branch in the loop (which hinders pipelining).
            if (not SKIP) or tl.max(keep.to(tl.int32), axis=0) > 0:
                k = tl.load(k_base + offs[:, None] * stride_ks + cols[None, :], mask=keep[:, None], other=0.0)
                s = (tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale).to(tl.float32)  # [RP, BLOCK_N]
                s = tl.where(keep[None, :], s, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(s, axis=1))
                m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a block with nothing kept yet
                alpha = tl.exp(m_i - m_safe)
                p = tl.exp(s - m_safe[:, None])
                l_i = l_i * alpha + tl.sum(p, axis=1)
                v = tl.load(v_base + offs[:, None] * stride_vs + cols[None, :], mask=keep[:, None], other=0.0)
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
                m_i = m_new
        seen = l_i > 0
        out = acc / tl.where(seen, l_i, 1.0)[:, None]
        lse = tl.where(seen, m_i + tl.log(tl.where(seen, l_i, 1.0)), float("-inf"))
        base = bh * n_split + sp
        tl.store(O + (base * RP + rows[:, None]) * D + cols[None, :], out)
        tl.store(LSE + base * RP + rows, lse)

    @triton.jit
    def combine_kernel(O, LSE, OUT, n_split, R: tl.constexpr, RP: tl.constexpr, D: tl.constexpr,
                       SPLIT_P: tl.constexpr):
        # out[bh, r] = sum_i w_i * o_i[r] / sum_i w_i, w_i = exp(lse_i[r] - max_i lse_i[r])
        bh = tl.program_id(0)
        splits = tl.arange(0, SPLIT_P)
        rows = tl.arange(0, RP)
        cols = tl.arange(0, D)
        lse = tl.load(LSE + (bh * n_split + splits[:, None]) * RP + rows[None, :], mask=splits[:, None] < n_split,
                      other=float("-inf"))  # [SPLIT_P, RP]
        top = tl.max(lse, axis=0)  # [RP]
        top = tl.where(top == float("-inf"), 0.0, top)
        w = tl.exp(lse - top[None, :])  # [SPLIT_P, RP]; 0 for empty splits
        total = tl.sum(w, axis=0)
        acc = tl.zeros([RP, D], tl.float32)
        for i in range(0, n_split):
            o = tl.load(O + ((bh * n_split + i) * RP + rows[:, None]) * D + cols[None, :])  # [RP, D]
            wi = tl.sum(tl.where(splits[:, None] == i, w, 0.0), axis=0)  # [RP]
            acc += o * wi[:, None]
        acc = acc / tl.where(total > 0, total, 1.0)[:, None]
        tl.store(OUT + (bh * R + rows[:, None]) * D + cols[None, :], acc.to(OUT.dtype.element_ty), mask=rows[:, None] < R)

    _KERNELS = (split_kernel, combine_kernel)
    return True


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def triton_decode(q: torch.Tensor, key: torch.Tensor, value: torch.Tensor, keep: torch.Tensor | None,
                  scale: float, *, live: torch.Tensor | None = None, block_n: int = 64, target_programs: int = 2048,
                  num_warps: int = 4, num_stages: int = 2, skip: bool = True) -> torch.Tensor:
    """Split-KV flash decoding. q [B, Hkv, R, D] (contiguous), key/value [B, Hkv, S, D] (last dim contiguous),
    keep [B, S] bool (True = attend; None = all), live [1] int32 on q's device or None -> [B, Hkv, R, D] in q's
    dtype.

    Each program takes the R query rows of one (batch, KV head) over a chunk of cache slots; a second kernel
    merges the splits by their log-sum-exp. ``live`` (read on the device, so a CUDA graph replays it with new
    values) declares that no query attends to a slot from ``live[0]`` on: the chunks then divide slots
    0..live-1 only (the same result, since those slots would be masked). ``skip`` skips blocks of ``block_n``
    slots with no True in ``keep``.
    """
    if _KERNELS is None and not load_triton_kernels():
        raise RuntimeError("the triton decode attention needs the triton package")
    split_kernel, combine_kernel = _KERNELS
    b, hkv, r, d = q.shape
    s = key.shape[2]
    bh = b * hkv
    rp = max(16, _next_pow2(r))  # tl.dot needs at least 16 rows
    n_blocks = -(-s // block_n)
    n_split = max(1, min(n_blocks, -(-target_programs // bh)))
    chunk = -(-n_blocks // n_split) * block_n
    n_split = -(-s // chunk)
    o = torch.empty((bh, n_split, rp, d), device=q.device, dtype=torch.float32)
    lse = torch.empty((bh, n_split, rp), device=q.device, dtype=torch.float32)
    out = torch.empty_like(q)
    mask = keep if keep is not None else key.new_empty((1, 1), dtype=torch.bool)
    split_kernel[(bh, n_split)](
        q, key, value, mask, live if live is not None else mask, o, lse, s, n_split, chunk // block_n, scale,
        key.stride(0), key.stride(1), key.stride(2), value.stride(0), value.stride(1), value.stride(2),
        mask.stride(0), mask.stride(1),
        HKV=hkv, R=r, RP=rp, D=d, BLOCK_N=block_n, HAS_MASK=keep is not None, HAS_LIVE=live is not None,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",  # fp32 models: no TF32 rounding
        SKIP=skip, num_warps=num_warps, num_stages=num_stages,
    )
    combine_kernel[(bh,)](o, lse, out, n_split, R=r, RP=rp, D=d, SPLIT_P=max(2, _next_pow2(n_split)))
    return out


def triton_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """``"triton"``: :func:`triton_decode` for decoding steps on CUDA with a bool (or no) mask and a power-of-two
    head dim; :func:`grouped_attention` otherwise. Returns ([B, 1, H, D], None).

    The keyword ``kevin_live_slots`` ([1] int32, passed through the model's forward by
    :func:`kevin.core.policy.engine.decoding.sample_static`) is the number of cache slots written so far; see `triton_decode`.
    """
    d = query.shape[-1]
    usable = (
        _decoding(module, query, dropout, kwargs)
        and query.is_cuda
        and (attention_mask is None or attention_mask.dtype == torch.bool)
        and d == _next_pow2(d) and d >= 16
        and key.stride(-1) == 1 and value.stride(-1) == 1
        and _KERNELS is not None
    )
    if not usable:
        return grouped_attention(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    b, h, _, _ = query.shape
    hkv, s = key.shape[1], key.shape[2]
    q = query.reshape(b, hkv, h // hkv, d).contiguous()
    keep = None if attention_mask is None else attention_mask[:, 0, 0, :s]  # [B, S]
    live = kwargs.get(LIVE_SLOTS)
    out = triton_decode(q, key, value, keep, scaling if scaling is not None else d**-0.5, live=live, **TRITON_CONFIG)
    return out.reshape(b, h, 1, d).transpose(1, 2).contiguous(), None


_FUNCTIONS = {"grouped": grouped_attention, "grouped_sdpa": grouped_sdpa_attention, "triton": triton_attention}


def interface_name(implementation: str) -> str:
    """The name `register` gives ``implementation`` in transformers' attention interface."""
    return f"kevin_{implementation}_decode"


def register(implementation: str) -> str:
    """Register ``implementation`` with transformers' attention and mask interfaces; returns its name there.

    The mask is built as for sdpa (a [B, 1, Q, S] bool mask, or None when sdpa could rely on is_causal).
    """
    if implementation not in _FUNCTIONS:
        raise ValueError(f"unknown decode attention {implementation!r}; expected one of {IMPLEMENTATIONS}")
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    if implementation == "triton":
        load_triton_kernels()  # without triton, triton_attention falls back to grouped_attention
    name = interface_name(implementation)
    AttentionInterface.register(name, _FUNCTIONS[implementation])
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    return name
