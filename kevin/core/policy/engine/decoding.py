"""A sampling loop over a static KV cache: a compiled prefill, then a compiled step per token, no host sync per step.

``TransformersPolicy(mode="static")`` samples with :func:`sample_static`. Why not ``model.generate`` with a static
cache: its loop asks the device every step whether all rows are done (``unfinished.max() == 0`` read on the
host), so the host waits for each step to finish before it can queue the next; on an H200 a 7B decoding
step then left the GPU idle for 2.6 of its 13.6 ms (``benchmarks/profile_decode.py``; ``benchmarks/LOG.md``).
Here the host queues steps ahead and looks at the stop flags every ``check_every`` steps.

The arithmetic, per row b (left-padded prompt of ``n_b`` real tokens in ``P`` columns, cache of ``S`` slots):

    prefill:   slots 0..P-1 hold the prompt; positions p = cumsum(mask) - 1 (pads masked, position 1)
               (every layer's keys and values at every position; the last layer's o_proj and MLP at P-1 only)
    step t:    token x_t is written to slot P + t at position n_b + t; it attends to the real prompt slots and
               slots P..P+t (causality by slot, padding by the [B, S] mask, which never changes)
    sampling:  log pi = log_softmax(top_p(logits / temperature)); x = argmax_v (log pi_v - log E_v), E_v ~ Exp(1)

The last line is exact categorical sampling (the minimum of exponential clocks E_v / pi_v is clock v with
probability pi_v), the same draw ``torch.multinomial`` makes for one sample; ``top_p`` keeps the smallest set of
tokens whose probability reaches ``top_p``, as transformers' ``TopPLogitsWarper`` does. The recorded log-prob is
log pi of the drawn token under that final (tempered, truncated) distribution.

Like the policy package itself (``kevin.core.policy``), this imports ``transformers`` lazily; ``torch`` is imported at module level.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from kevin.core.policy.engine import fused as _fused


@dataclass(frozen=True)
class Sampled:
    """tokens [B, N] int64 and their sampling log-probs [B, N] float32 (N = max_new_tokens, or fewer when every
    row stopped early; a row's tokens after its first stop token are filler, to be cut by the caller)."""

    tokens: torch.Tensor
    logprobs: torch.Tensor


def top_p_filter(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """scores [B, V] with every token outside the nucleus set to -inf.

    Sorted ascending, a token is dropped when the probability mass up to and including it is <= 1 - top_p;
    the most likely token is always kept. (Same rule as transformers' ``TopPLogitsWarper``.)
    """
    if top_p >= 1.0:
        return scores
    sorted_scores, order = torch.sort(scores, dim=-1, descending=False)
    cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
    drop_sorted = cumulative <= (1 - top_p)
    drop_sorted[..., -1:] = False
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return scores.masked_fill(drop, float("-inf"))


@torch.compiler.disable
def _top_p_filter_eager(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """`top_p_filter`, never compiled: Inductor (torch 2.11, CUDA) fails to generate the cumsum of a row as long as a
    vocabulary (a split scan: "list indices must be integers or slices, not NoneType" for [128, 152064] logits on
    an H200, with ``benchmarks/decode_sampler.py``)."""
    return top_p_filter(scores, top_p)


def sample_logits(logits: torch.Tensor, temperature: float, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, V] -> (tokens [B] int64, log pi(token) [B] float32); exact draws from the tempered nucleus.

        log pi = log_softmax(top_p(logits / temperature));  token = argmax_v (log pi_v - log E_v),  E ~ Exp(1)
    """
    scores = logits.float() / temperature  # [B, V]
    if top_p < 1.0:  # (a Python float: under torch.compile this branch is taken at trace time)
        scores = _top_p_filter_eager(scores, top_p)
    logp = torch.log_softmax(scores, dim=-1)  # [B, V]
    clocks = torch.empty_like(logp).exponential_().clamp_min_(torch.finfo(torch.float32).tiny)
    tokens = (logp - clocks.log()).argmax(dim=-1)  # [B]
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


_compiled_sampler: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None


def compiled_sampler() -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """`sample_logits` under ``torch.compile``: its ~9 passes over the [B, V] logits fused into a few kernels."""
    global _compiled_sampler
    if _compiled_sampler is None:
        _compiled_sampler = torch.compile(sample_logits, dynamic=False)
    return _compiled_sampler


def _cache_keyword(model: Any) -> str:
    """The forward's name for the cache: ``cache`` (transformers >= 5.2x) or ``past_key_values`` (older)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def new_static_cache(model: Any, batch: int, length: int) -> Any:
    """A transformers ``StaticCache`` of ``length`` slots for ``batch`` rows, allocated now on the model's device.

    Allocated up front (not lazily at the first write) so that a compiled prefill only writes into it. Reuse
    one cache for every call of a shape (`model_static_cache` does): new cache tensors would make the compiled
    decoding step capture its CUDA graphs again.
    """
    from transformers import StaticCache

    model = _unwrap(model)
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    param = next(model.parameters())
    cache = StaticCache(config=model.config, max_cache_len=length)
    cache.early_initialization(batch, heads, head_dim, param.dtype, param.device)
    return cache


def model_static_cache(model: Any, batch: int, length: int) -> Any:
    """The model's own `new_static_cache` for this shape, kept on the model (one at a time, like transformers'
    ``generate``), so every policy and call of one shape reuses the cache the decoding graphs were captured on."""
    param = next(model.parameters())
    key = (id(model), batch, length, str(param.device), param.dtype)  # id: a deepcopy of the model gets its own
    held = model.__dict__.get("_kevin_static_cache")
    if held is None or held[0] != key:
        model.__dict__["_kevin_static_cache"] = None  # free the old cache before allocating the new one
        held = model.__dict__["_kevin_static_cache"] = (key, new_static_cache(model, batch, length))
    return held[1]


def held_cache_bytes(model: Any) -> int:
    """Bytes of the static KV cache `model_static_cache` keeps on ``model`` (0 when none): the next call of another
    shape frees it before allocating its own, and one of the same shape reuses it, so it counts as free for a budget."""
    held = _unwrap(model).__dict__.get("_kevin_static_cache")
    layers = getattr(held[1], "layers", ()) if held is not None else ()
    return sum(t.numel() * t.element_size() for layer in layers
               for t in (getattr(layer, "keys", None), getattr(layer, "values", None)) if isinstance(t, torch.Tensor))


def release_static_memory(model: Any) -> int:
    """Free what `sample_static` keeps on ``model`` between calls: its static KV cache (`model_static_cache`) and
    the fused projections' weights (:func:`kevin.core.policy.engine.fused.release`); returns the bytes freed. The next
    call allocates both again, at new addresses, where the compiled decoding step's CUDA graphs are captured
    again. On CUDA the freed blocks go back to the device (``torch.cuda.empty_cache``)."""
    model = _unwrap(model)
    freed = held_cache_bytes(model)
    model.__dict__.pop("_kevin_static_cache", None)
    freed += _fused.release(model)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return freed


def _full_attention_only(model: Any) -> bool:
    """Whether every layer attends causally to all earlier tokens (no sliding-window or chunked layers), so an
    unpadded prefill may attend without a mask."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(config, "sliding_window", None) or getattr(config, "attention_chunk_size", None):
        return False  # (Qwen2 sets sliding_window only when use_sliding_window is on)
    return all(t == "full_attention" for t in (getattr(config, "layer_types", None) or ["full_attention"]))


def _unwrap(model: Any) -> Any:
    """The transformers model inside a peft wrapper (its LoRA layers included), else the model itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def compiled_prefill(model: Any) -> Callable[..., Any]:
    """The model's ``__call__`` under ``torch.compile`` with dynamic shapes (no CUDA graphs), compiled once per
    model: one graph for every batch size and prompt length. It fuses the prefill's norms, rotary embedding and
    activations, which eagerly cost ~1.6 of a 6.8 s 7B prefill on an H200 (``benchmarks/profile_decode.py``;
    ``benchmarks/LOG.md``)."""
    held = model.__dict__.get("_kevin_compiled_prefill")
    if held is None or held[0] != id(model):  # a deepcopy of the model must not run the original's weights
        held = model.__dict__["_kevin_compiled_prefill"] = (id(model), torch.compile(model.__call__, dynamic=True))
    return held[1]


def compiled_forward(model: Any, fuse: bool = False) -> Callable[..., Any]:
    """The model's ``__call__`` under ``torch.compile`` with CUDA graphs (mode "reduce-overhead"), compiled once per
    model and ``fuse``.

    ``fuse``: compiled with :mod:`kevin.core.policy.engine.fused`'s dedupe pass, so that inside ``fused_projections`` q, k and v
    are one matmul and gate and up one. Without it, transformers' own compiled call (``get_compiled_call``),
    which ``generate`` with a static cache shares.
    """
    if not fuse:
        if hasattr(model, "get_compiled_call"):
            return model.get_compiled_call(None)
        return torch.compile(model.__call__, mode="reduce-overhead")
    held = model.__dict__.get("_kevin_compiled_step")
    if held is None or held[0] != id(model):  # a deepcopy of the model must not run the original's weights
        step = torch.compile(model.__call__, dynamic=False, options=_fused.compile_options(cuda_graphs=True))
        held = model.__dict__["_kevin_compiled_step"] = (id(model), step)
    return held[1]


LAST_POSITION_MODELS = ("llama", "mistral", "qwen2", "qwen3")
"""``config.model_type``s whose decoder layer is ``h += o_proj(attention(...)); h += mlp(norm(h))`` with nothing
after the attention that mixes positions, so the last layer's ``o_proj`` and ``mlp`` may run on one position."""

_LAST_POSITION_ONLY = False  # set by `_last_position_prefill`; read inside compiled graphs (Dynamo guards on it)


def _keep_last_position(module: Any, args: tuple) -> tuple | None:
    """Forward pre-hook: inside `_last_position_prefill`, the input [B, Q, F] cut to its last position [B, 1, F]."""
    if not _LAST_POSITION_ONLY or not args or args[0].dim() != 3:
        return None
    return (args[0][:, -1:], *args[1:])


def _last_layer_parts(model: Any) -> tuple[Any, Any] | None:
    """(``self_attn.o_proj``, ``mlp``) of the last decoder layer the forward runs, when ``model`` is one of
    `LAST_POSITION_MODELS`; else None."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(config, "model_type", None) not in LAST_POSITION_MODELS or not hasattr(model, "get_decoder"):
        return None
    layers = getattr(model.get_decoder(), "layers", None)
    n = getattr(config, "num_hidden_layers", None)
    if layers is None or not n or len(layers) < n:
        return None
    parts = getattr(getattr(layers[n - 1], "self_attn", None), "o_proj", None), getattr(layers[n - 1], "mlp", None)
    return parts if all(isinstance(m, torch.nn.Module) for m in parts) else None


def _install_last_position_hooks(model: Any) -> bool:
    """Put `_keep_last_position` on the last decoder layer's ``self_attn.o_proj`` and ``mlp``; returns whether the
    model has them. Done once (hooks added after the prefill's first compile make it recompile); checked at every
    call, so that a model whose last layer changed (layers added or removed) moves the hooks to its new last layer.

    Why: a prefill that keeps the logits of the last position only (``logits_to_keep=1``) needs every layer's
    keys and values at every position, but the last layer's attention output, ``o_proj`` and MLP only at the last
    one. Cut there, the residual sums broadcast ([B, Q, D] + [B, 1, D]): the last position holds the last layer's
    hidden state (up to the matmuls' blocking: B rows are multiplied instead of B x Q), and the others, which
    nothing reads, hold finite filler. For a 7B model that is 1/28 of the prefill's o_proj and MLP matmuls, by
    arithmetic about 0.17 s of a 128 x 2,048-token prefill on an H200.
    """
    parts = _last_layer_parts(model)
    held = model.__dict__.get("_kevin_last_position_hooks")  # the modules hooked, or None
    if held is not None and (parts is None or any(a is not b for a, b in zip(held, parts))):
        for module in held:  # no longer the last layer's: unhook
            for key in [k for k, hook in module._forward_pre_hooks.items() if hook is _keep_last_position]:
                del module._forward_pre_hooks[key]
        held = model.__dict__["_kevin_last_position_hooks"] = None
    if held is None and parts is not None:
        for module in parts:
            module.register_forward_pre_hook(_keep_last_position)
        held = model.__dict__["_kevin_last_position_hooks"] = parts
    return held is not None


@contextlib.contextmanager
def _last_position_prefill() -> Any:
    """Inside: the last decoder layer's ``o_proj`` and ``mlp`` see the last position only (see
    `_install_last_position_hooks`). Only around a forward whose caller reads nothing but the last position's logits.

    A process-wide flag, like `kevin.core.policy.engine.attention.fresh_prefill`'s: no other thread may run a forward of a
    hooked model meanwhile."""
    global _LAST_POSITION_ONLY
    saved, _LAST_POSITION_ONLY = _LAST_POSITION_ONLY, True
    try:
        yield
    finally:
        _LAST_POSITION_ONLY = saved


PREFILL_ROTARY = True
"""Whether a compiled prefill computes the rotary (cos, sin) once (`sample_static`'s ``prefill_rotary``)."""


RECOMPILE_LIMIT = 64
"""Compiled entries allowed per code object while sampling (torch's default is 8): the compiled prefill and each
(rows, cache length) of the decoding step are entries of one code object (``model.__call__``)."""


@contextlib.contextmanager
def _recompile_limit(limit: int) -> Any:
    """Dynamo's per-code-object recompile limit raised to at least ``limit`` inside the block."""
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    with config.patch(**{name: max(getattr(config, name), limit)}):
        yield


RERECORD_LIMIT = 1 << 16
"""CUDA-graph recordings allowed per compiled decoding step while sampling (torch 2.11's default is 128, and past
it the step silently runs without CUDA graphs). Each `release_static_memory` moves the cache and the fused weights,
and the next call records the step's graphs once more; torch 2.11 may count those recordings."""


@contextlib.contextmanager
def _rerecord_limit(limit: int) -> Any:
    """Inductor's CUDA-graph re-recording limit raised to at least ``limit`` inside the block."""
    import torch._inductor.config as inductor

    current = inductor.triton.cudagraph_unexpected_rerecord_limit
    with inductor.patch({"triton.cudagraph_unexpected_rerecord_limit": max(current, limit)}):
        yield


@contextlib.contextmanager
def _own_precision(model: Any, device: torch.device) -> Any:
    """Inside the block the model runs in its own dtype: autocast off, and a forward that ``accelerate.prepare``
    wrapped in autocast (it keeps the original as ``_original_forward``) swapped back to the original."""
    wrapped = model.__dict__.get("forward") if "_original_forward" in model.__dict__ else None
    if wrapped is not None:
        model.forward = model.__dict__["_original_forward"]
    try:
        with torch.autocast(device.type, enabled=False):
            yield
    finally:
        if wrapped is not None:
            model.forward = wrapped


DECODE_BLAS = "cublaslt"
"""torch's BLAS library for the decoding loop on CUDA. At 128 rows cuBLASLt runs a 7B step's linears in 4.04 ms
against 4.13 ms with cuBLAS (the down projection 0.0434 against 0.0467 ms), and no faster in the prefill (4.96
against 4.94 s), so the prefill keeps the default (``benchmarks/blas_preference.py``; ``benchmarks/README.md``)."""


@contextlib.contextmanager
def _blas_preference(device: torch.device, library: str) -> Any:
    """torch's preferred BLAS library set to ``library`` inside the block on a CUDA device, restored after.

    The preference is process-wide while the block lasts (a decoding loop: no other matmul runs in between);
    a no-op on other devices and builds without CUDA."""
    if device.type != "cuda" or torch.version.cuda is None:
        yield
        return
    saved = torch.backends.cuda.preferred_blas_library()
    torch.backends.cuda.preferred_blas_library(library)
    try:
        yield
    finally:
        torch.backends.cuda.preferred_blas_library(saved)


def _sampling_contexts(fn: Callable[..., Sampled]) -> Callable[..., Sampled]:
    """``fn(model, input_ids, ...)`` run inside `_own_precision`, `_recompile_limit` (`RECOMPILE_LIMIT`) and
    `_rerecord_limit` (`RERECORD_LIMIT`)."""
    @functools.wraps(fn)
    def wrapper(model: Any, input_ids: torch.Tensor, *args: Any, **kwargs: Any) -> Sampled:
        with (_own_precision(_unwrap(model), input_ids.device), _recompile_limit(RECOMPILE_LIMIT),
              _rerecord_limit(RERECORD_LIMIT)):
            return fn(model, input_ids, *args, **kwargs)

    return wrapper


def _hand_over(tokens: torch.Tensor, logprobs: torch.Tensor, done: torch.Tensor, told: torch.Tensor, n: int,
               on_row: Callable[[int, list[int], list[float]], None]) -> torch.Tensor:
    """Each row ``done`` but not ``told`` to ``on_row`` with its first ``n`` tokens and log-probs [B, >=n]; returns
    the rows told so far. One read of the stopped rows' indices, and of their tokens when there are any."""
    fresh = done & ~told
    rows = fresh.nonzero().flatten().tolist()
    for i, ids, lps in zip(rows, tokens[rows, :n].tolist(), logprobs[rows, :n].tolist()):
        on_row(i, ids, lps)
    return told | fresh


@_sampling_contexts
@torch.no_grad()
def sample_static(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    cache_length: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    stop_token_ids: Sequence[int] = (),
    cache: Any = None,
    compile: bool | None = None,
    compile_prefill: bool | None = None,
    fuse_projections: bool | None = None,
    prefill_rotary: bool | None = None,
    check_every: int = 16,
    wait_rows: int | None = None,
    on_row: Callable[[int, list[int], list[float]], None] | None = None,
    between: Callable[[], Any] | None = None,
) -> Sampled:
    """Sample ``max_new_tokens`` tokens per row of a left-padded batch with a static cache of ``cache_length`` slots.

    input_ids, attention_mask [B, P] (1 = real token, 0 = left padding). ``cache``: a `new_static_cache` of
    [B, cache_length] (reset here), or None for the model's own (`model_static_cache`). ``compile`` (default:
    on CUDA) runs the decoding step through :func:`compiled_forward` and the sampling through
    :func:`compiled_sampler`; ``compile_prefill`` (default: as ``compile``) the prefill through
    :func:`compiled_prefill`; ``fuse_projections`` (default: as ``compile``) the compiled decoding step with one
    matmul for q, k and v and one for gate and up (:mod:`kevin.core.policy.engine.fused`; ignored without ``compile``);
    ``prefill_rotary`` (default: `PREFILL_ROTARY`) the compiled prefill's rotary (cos, sin) computed once, by
    :func:`kevin.core.policy.engine.attention.rotary_cos_sin`, not inside every layer's kernel (once set on a model, it
    stays). Stops
    early only when every row has produced a stop token (checked every ``check_every`` steps); with ``wait_rows``,
    when the first ``wait_rows`` rows have (the others are batch padding, whose tokens nobody reads).
    ``on_row(i, tokens, logprobs)``: at those checks, each real row that has stopped since, with its tokens so far
    (the caller cuts them at the stop), so that its response can be used before the longest row ends.
    ``between()``: called after every step (at a check, after the device was read, and not once every row has
    stopped); the caller may block in it, e.g. while a kernel is timed on this device, and should return at once
    otherwise.

    The model samples in its own dtype: autocast is off inside, also the autocast that ``accelerate.prepare``
    wraps a model's forward in (a full fine-tune kept in fp32 under bf16 mixed precision). Under autocast the
    static cache (the model's dtype) would receive values of another dtype, and the fused projections would
    not be deduped. Dynamo's recompile limit is raised to `RECOMPILE_LIMIT` inside: each new (rows, cache
    length) is one more compiled decoding step, and past torch's default of 8 the step silently ran eagerly.
    """
    from kevin.core.policy.engine.attention import LIVE_SLOTS, fresh_prefill, install_prefill_rotary, interface_name

    b, p = input_ids.shape
    if p + max_new_tokens > cache_length:
        raise ValueError(f"cache of {cache_length} slots is too short for {p} prompt + {max_new_tokens} new tokens")
    device = input_ids.device
    if compile is None:
        compile = device.type == "cuda"
    if compile_prefill is None:
        compile_prefill = compile
    fuse = bool(compile) and fuse_projections is not False
    model = _unwrap(model)  # peft: the LoRA layers stay in the unwrapped model
    cache_kw = _cache_keyword(model)
    if cache is None:
        cache = model_static_cache(model, b, cache_length)
    cache.reset()
    if fuse:
        _fused.install(model)  # before the prefill: swapping the linears' class later would recompile it
    trim = _install_last_position_hooks(model)  # the last layer's o_proj and MLP at the last position only
    if compile_prefill and (PREFILL_ROTARY if prefill_rotary is None else prefill_rotary):
        install_prefill_rotary(model)  # before compiling: the prefill's layers read one (cos, sin), computed once

    mask = torch.ones(b, cache_length, dtype=torch.long, device=device)  # [B, S]: only left pads are 0
    mask[:, :p] = attention_mask
    positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)  # [B, P]
    prefill = compiled_prefill(model) if compile_prefill else model
    with (fresh_prefill(padded=bool((attention_mask == 0).any()) or not _full_attention_only(model)),
          _last_position_prefill() if trim else contextlib.nullcontext()):
        out = prefill(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                      logits_to_keep=1, **{cache_kw: cache})
    logits = out.logits[:, -1]  # [B, V]
    del out

    step = compiled_forward(model, fuse=fuse) if compile else model
    sample = compiled_sampler() if compile else sample_logits
    tokens = torch.empty(b, max_new_tokens, dtype=torch.long, device=device)
    logprobs = torch.empty(b, max_new_tokens, dtype=torch.float32, device=device)
    stop = torch.tensor(sorted(set(int(i) for i in stop_token_ids)), dtype=torch.long, device=device)
    done = torch.zeros(b, dtype=torch.bool, device=device)
    if wait_rows is not None:
        done[wait_rows:] = True  # padding rows never hold the loop back
    told = done.clone()  # rows handed to on_row (padding rows never are)
    broken = torch.zeros((), dtype=torch.bool, device=device)  # a non-finite log-prob: NaN or inf logits
    position = attention_mask.long().sum(-1, keepdim=True)  # [B, 1]: n_b, the first new token's position
    live = None  # [1] int32: slots written once this step's token is (the triton attention divides only those)
    if getattr(model.config, "_attn_implementation", None) == interface_name("triton"):
        live = torch.full((1,), p + 1, dtype=torch.int32, device=device)  # step 0 writes slot P
    n = max_new_tokens
    fusing = _fused.fused_projections(model) if fuse else contextlib.nullcontext()
    # refreshes the fused weights from the model's current ones; the step's matmuls (captured in its CUDA graphs
    # at the first call) through `DECODE_BLAS`
    with fusing, _blas_preference(device, DECODE_BLAS):
        for t in range(max_new_tokens):
            token, logprob = sample(logits, temperature, top_p)
            tokens[:, t] = token
            logprobs[:, t] = logprob
            broken |= ~torch.isfinite(logprob).all()
            if stop.numel():
                done |= torch.isin(token, stop)
                if (t + 1) % check_every == 0:
                    if on_row is not None and not bool(broken):  # (a broken call raises: nothing of it is told)
                        told = _hand_over(tokens, logprobs, done, told, t + 1, on_row)
                    if between is not None and not bool(done.all()):  # (at the last check the loop ends)
                        between()
                    if bool(done.all()):
                        n = t + 1
                        break
                elif between is not None:
                    between()
            del logits  # a CUDA-graph output: the next replay overwrites it
            if t + 1 == max_new_tokens:
                break
            if compile:
                torch.compiler.cudagraph_mark_step_begin()
            out = step(input_ids=token[:, None], attention_mask=mask, position_ids=position, use_cache=True,
                       logits_to_keep=1, **{cache_kw: cache}, **({LIVE_SLOTS: live} if live is not None else {}))
            logits = out.logits[:, -1]
            del out
            position = position + 1
            if live is not None:
                live = live + 1
    if bool(broken):
        raise RuntimeError("the model produced NaN or infinite logits while sampling (a non-finite log-prob)")
    return Sampled(tokens[:, :n], logprobs[:, :n])
