"""`TransformersPolicy`: a transformers causal LM (optionally peft-wrapped) as a `Policy`.

Token ids are kept exactly as sampled and the sampling log-probs are recorded. ``mode`` picks the
generation engine (see the class docstring); ``"auto"`` takes the fastest exact-sampling one measured on an
H200 (``benchmarks/README.md``) when the model is on CUDA and plain ``generate`` elsewhere.
``transformers`` is imported lazily, inside the methods.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Sequence

from kevin.core.policy.base import (_THINK_TAIL, Generation, cut_at_stop, kv_bytes_per_token, left_pad, opens_thought,
                                    round_up, rows_in_budget)

logger = logging.getLogger(__name__)

MODES = ("auto", "generate", "static", "continuous")


class _attention_implementation:
    """Context manager: switch a transformers model to ``name`` for the duration, then switch back."""

    def __init__(self, model: Any, name: str | None) -> None:
        self.model, self.name, self.saved = model, name, None

    def __enter__(self) -> None:
        config = getattr(self.model, "config", None)
        current = getattr(config, "_attn_implementation", None)
        if self.name is None or current is None or current == self.name or not hasattr(self.model, "set_attn_implementation"):
            return
        self.saved = current
        self.model.set_attn_implementation(self.name)

    def __exit__(self, *exc: Any) -> None:
        if self.saved is not None:
            self.model.set_attn_implementation(self.saved)


def _logprob_recorder_class():
    """A ``LogitsProcessor`` that records log pi(sampled token) from the final processed scores.

    It must be the last processor. At step k it sees the scores the k-th token will be drawn from, and the
    input ids that end with token k-1: so it stores log_softmax(scores_k) [B, V] until the next call, when
    it gathers the row entry of the token that was drawn. ``finish(sequences)`` gathers the last one.
    Memory: one [B, V] fp32 buffer, not one per step (``output_scores`` would keep B*L*V floats).
    """
    import torch
    from transformers import LogitsProcessor

    class LogprobRecorder(LogitsProcessor):
        def __init__(self) -> None:
            self.prev: torch.Tensor | None = None  # [B, V] log-probs the latest token was drawn from
            self.steps: list[torch.Tensor] = []  # each [B]

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            if self.prev is not None:
                self.steps.append(self.prev.gather(1, input_ids[:, -1:]).squeeze(1))
            self.prev = torch.log_softmax(scores.float(), dim=-1)
            return scores

        def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
            """new_tokens [B, n] (the generated part of the sequences) -> logprobs [B, n]."""
            n = new_tokens.shape[1]
            steps = self.steps[:n]
            if len(steps) < n and self.prev is not None:
                steps.append(self.prev.gather(1, new_tokens[:, len(steps) : len(steps) + 1]).squeeze(1))
            assert len(steps) == n, (len(steps), n)
            return torch.stack(steps, dim=1) if steps else new_tokens.new_zeros((new_tokens.shape[0], 0), dtype=torch.float32)

    return LogprobRecorder


def _finished_rows_class():
    """A ``StoppingCriteria`` that stops nothing: it hands each row to ``on_row(i, ids, logprobs)`` once the row has
    sampled a stop token, while ``generate`` goes on with the longer rows.

    Called after each step with the ids ending in the token just sampled; the recorder (the last logits processor)
    then holds that token's distribution in ``prev`` and every earlier token's log-prob in ``steps``. It reads the
    device every ``every`` steps only (one small read, beside generate's own stop check); a row that
    stopped in between is handed over at the next read (its ids up to the current step, cut at the stop by the
    caller). Rows at or past ``n_real`` (batch padding) are never handed over. ``between(sync)``, when given, is
    called after every step (`TransformersPolicy.generate`'s ``between_steps``), but at a read that finds every row
    stopped (``generate`` ends there).
    """
    import torch
    from transformers import StoppingCriteria

    class FinishedRows(StoppingCriteria):
        def __init__(self, prompt_len: int, stop_ids: Sequence[int], recorder: Any, n_real: int, on_row: Any,
                     every: int = 8, between: Any = None) -> None:
            self.prompt_len, self.recorder, self.n_real = prompt_len, recorder, n_real
            self.on_row, self.every, self.between = on_row, every, between
            self.stop_ids = sorted(set(int(t) for t in stop_ids))
            self.done: torch.Tensor | None = None  # [B] bool: sampled a stop token
            self.told: torch.Tensor | None = None  # [B] bool: handed to on_row
            self.calls = 0

        def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
            b = input_ids.shape[0]
            if self.done is None:
                self.done = torch.zeros(b, dtype=torch.bool, device=input_ids.device)
                self.told = torch.zeros(b, dtype=torch.bool, device=input_ids.device)
                self.told[self.n_real:] = True
                self.stop = torch.tensor(self.stop_ids, dtype=torch.long, device=input_ids.device)
            self.done |= torch.isin(input_ids[:, -1], self.stop)
            self.calls += 1
            if self.calls % self.every == 0:
                self.hand_over(input_ids)
                if self.between is not None and not bool(self.done[: self.n_real].all()):  # (else generate ends)
                    self.between(_synchronizer(input_ids.device))
            elif self.between is not None:  # no read of the device: a timing at the gate goes in one step later
                self.between(_synchronizer(input_ids.device))
            return torch.zeros(b, dtype=torch.bool, device=input_ids.device)

        def hand_over(self, input_ids: torch.Tensor) -> None:
            """Every row that stopped and was not handed over yet, to ``on_row`` (one read of the device)."""
            fresh = self.done & ~self.told
            rows = fresh.nonzero().flatten().tolist()
            if not rows:
                return
            self.told |= fresh
            new = input_ids[rows, self.prompt_len:]  # [r, n]
            n = new.shape[1]
            earlier = torch.stack(self.recorder.steps[: n - 1], 1)[rows] if n > 1 else new.new_zeros((len(rows), 0))
            last = self.recorder.prev[rows].gather(1, new[:, -1:])  # the newest token's log-prob [r, 1]
            logprobs = torch.cat([earlier.float(), last.float()], 1).tolist()
            for i, ids, lps in zip(rows, new.tolist(), logprobs):
                self.on_row(i, ids, lps)

    return FinishedRows


def _synchronizer(device: Any) -> Callable[[], None]:
    """What finishes the work this process queued on ``device`` (nothing to do off CUDA)."""
    import torch

    device = torch.device(device)
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def cache_budget_from_free_memory(device: Any, fraction: float = 0.5) -> int | None:
    """``fraction`` of the memory ``device`` could still give: the free bytes plus what PyTorch's allocator holds
    unused. None off CUDA (no bound). Measured when called: a recipe calls it before every rollout, after the
    training phase freed what it could."""
    import torch

    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    device = torch.device(device)
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return int(fraction * (free + unused))


class TransformersPolicy:
    """A ``transformers`` causal LM (plain or ``peft``-wrapped) as a :class:`Policy`.

    Args:
        model: a causal LM (``Qwen2ForCausalLM``, a ``PeftModel`` around one, ...), already on its device.
        tokenizer: its tokenizer, with a chat template; prompts are
            ``apply_chat_template(messages, add_generation_prompt=True)``.
        max_new_tokens: response budget per turn.
        temperature, top_p: sampling; exact multinomial sampling from softmax(logits / T) restricted to the
            top-p nucleus. No other warper is applied: the model's own generation defaults (Qwen ships
            ``top_k=20``, a repetition penalty) are overridden to neutral values. In ``"static"`` mode a top-p
            below 1 sorts each row eagerly, outside the compiled sampler: about 3 ms per token step for 128 rows of
            a 152k vocabulary on an H200, against 0.18 ms at top-p 1 (``benchmarks/results/generation_h200.md``).
        mode: the generation engine.
            ``"generate"``: ``model.generate`` with the default dynamic cache, left padding, one batch. On the
            CPU an ``sdpa`` model decodes with ``decode_attention`` for the duration of the call, as in "static".
            ``"static"``: our own sampling loop (:func:`kevin.core.policy.engine.decoding.sample_static`) over a static KV
            cache whose size is rounded up to a multiple of ``cache_bucket`` (so successive calls reuse one
            compiled graph); on CUDA the decoding forward is compiled (``torch.compile``, CUDA graphs) and the
            host never waits for a step before queuing the next. Batches are padded to a multiple of 8 rows
            for the same reason (padding rows are dropped). An ``sdpa`` model decodes with
            ``decode_attention`` for the duration of the call. ``generate_kwargs`` do not apply.
            ``"continuous"``: ``model.generate_batch`` (continuous batching, paged KV cache).
            ``"auto"``: ``"static"`` when the model is on CUDA (the fastest exact path measured, see
            ``benchmarks/results/generation_h200.md``), ``"generate"`` elsewhere.
        batch_size: most conversations per ``generate`` call (None: all at once). In mode "static" a shorter last
            chunk is padded to the rows of the others, so the KV cache and the compiled graphs keep one shape.
        cache_budget_bytes: the most KV cache a call may hold (None: no bound): the conversations are generated
            in waves of as many rows as fit (`rows_in_budget`, each row sized for the longest prompt plus
            ``max_new_tokens``; in mode "static" the cache length and a multiple of 8 rows), so a rollout of any
            size fits; `cache_budget_from_free_memory` derives one from the free GPU memory.
        memory_fraction: without ``cache_budget_bytes``, the budget of each call is this share of the device's
            memory still available when the call starts (`cache_budget_from_free_memory`; no bound off CUDA), the
            static cache the last call left counted as available. By default 0.9, so the recipes' rollouts fit
            whatever their size; None: no bound (one wave, or out of memory).
        stop_token_ids: token ids that end a response (default: the tokenizer's EOS and pad ids).
        chat_template_kwargs: extra arguments of ``apply_chat_template`` (e.g. ``enable_thinking``).
        generate_kwargs: extra arguments of ``model.generate`` (e.g. ``min_new_tokens`` in benchmarks).
        continuous_batching_config: a ``transformers.ContinuousBatchingConfig`` for mode "continuous".
        decode_attention: in mode "static" (and "generate" on the CPU), the attention an ``sdpa`` model decodes
            with, one of ``kevin.core.policy.engine.attention.IMPLEMENTATIONS`` (see that module; all compute the
            same function up to rounding), or None to keep transformers' sdpa, which copies the KV cache once per
            query head at every step. The default, ``"triton"``, was the fastest on an H200 (13.4 ms per 7B
            decoding step against 15.3 for ``"grouped"``); it is ``"grouped"`` wherever Triton or CUDA is missing.
        compile_prefill: in mode "static", run the prefill through ``torch.compile`` with dynamic shapes (one
            compile for all prompt lengths; fuses the norms and activations). None: on CUDA only.
        fuse_projections: in mode "static", decode with one matmul for q, k and v and one for gate and up
            (:mod:`kevin.core.policy.engine.fused`; the same numbers, read from a fused copy of those weights, refreshed each
            call: about 8 GiB more memory for a 7B model). None: wherever the decoding step is compiled (CUDA).

    Every response carries its sampling log-probs (see the module docstring for their exact meaning).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_new_tokens: int = 4096,
        temperature: float = 0.9,
        top_p: float = 1.0,
        mode: str = "auto",
        batch_size: int | None = None,
        cache_budget_bytes: int | None = None,
        memory_fraction: float | None = 0.9,
        stop_token_ids: Sequence[int] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        generate_kwargs: dict[str, Any] | None = None,
        cache_bucket: int = 1024,
        continuous_batching_config: Any = None,
        decode_attention: str | None = "triton",
        compile_prefill: bool | None = None,
        fuse_projections: bool | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
        if temperature <= 0:
            raise ValueError("temperature must be > 0 (sampling); greedy decoding is not a policy for RL")
        if not 0 < top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if int(max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if batch_size is not None and int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1 or None (all at once), got {batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.mode = mode
        if cache_budget_bytes is not None and int(cache_budget_bytes) < 1:
            raise ValueError(f"cache_budget_bytes must be >= 1 or None (no bound), got {cache_budget_bytes}")
        self.batch_size = batch_size
        if memory_fraction is not None and not 0 < memory_fraction <= 1:
            raise ValueError(f"memory_fraction must be in (0, 1] or None, got {memory_fraction}")
        self.cache_budget_bytes = cache_budget_bytes
        self.memory_fraction = memory_fraction
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.generate_kwargs = dict(generate_kwargs or {})
        self.cache_bucket = int(cache_bucket)
        self.continuous_batching_config = continuous_batching_config
        from kevin.core.policy.engine.attention import IMPLEMENTATIONS

        if decode_attention is not None and decode_attention not in IMPLEMENTATIONS:
            raise ValueError(f"unknown decode_attention {decode_attention!r}; expected one of {IMPLEMENTATIONS} or None")
        self.decode_attention = decode_attention
        if stop_token_ids is None:
            stop_token_ids = [i for i in (tokenizer.eos_token_id, tokenizer.pad_token_id) if i is not None]
        self.stop_token_ids = tuple(dict.fromkeys(int(i) for i in stop_token_ids))
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (
            self.stop_token_ids[0] if self.stop_token_ids else 0
        )
        # With no stop ids, generation must not stop at the model's own default EOS either: give transformers
        # an id no token can have (the vocabulary size).
        self._never_id = int(getattr(getattr(model, "config", None), "vocab_size", 2**31 - 1))
        self._cache_len = 0  # static mode: the KV-cache length in use (only grows)
        self.compile_prefill = compile_prefill
        self.fuse_projections = fuse_projections

    # -- protocol ------------------------------------------------------------------------------------------

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def release_memory(self) -> int:
        """Free what static mode keeps on the model between calls, e.g. for a training phase: the static KV cache
        and the fused projections' weights (by arithmetic about 21 and 8 GiB for a 7B at 16 rows and 24k slots);
        returns the bytes freed. The next call allocates them again and captures the decoding step's CUDA graphs
        again, without recompiling (`kevin.core.policy.engine.decoding.release_static_memory`). Measured on an H200 for a
        7B at 16 rows and 3,072 slots: 10.57 GiB freed, the next call 6.51 s against 6.49 s
        (``benchmarks/README.md``)."""
        from kevin.core.policy.engine.decoding import release_static_memory

        return release_static_memory(self.model)

    def encode_conversation(self, messages: list[dict]) -> list[int]:
        """Prompt token ids: the chat template with the assistant's generation prompt, no extra specials."""
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs
        )
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, conversations: Sequence[list[dict]], *,
                 on_done: Callable[[int, Generation], None] | None = None,
                 between_steps: Callable[[Callable[[], None]], Any] | None = None) -> list[Generation]:
        prompts = [self.encode_conversation(m) for m in conversations]
        return self.generate_from_ids(prompts, on_done=on_done, between_steps=between_steps)

    # -- engines -------------------------------------------------------------------------------------------

    @property
    def device(self) -> Any:
        dev = getattr(self.model, "device", None)
        if dev is None:
            dev = next(self.model.parameters()).device
        return dev

    def resolved_mode(self) -> str:
        """The engine ``mode`` stands for on this model's device."""
        if self.mode != "auto":
            return self.mode
        return "static" if getattr(self.device, "type", str(self.device)) == "cuda" else "generate"

    def generate_from_ids(self, prompts: Sequence[Sequence[int]], *,
                          on_done: Callable[[int, Generation], None] | None = None,
                          between_steps: Callable[[Callable[[], None]], Any] | None = None) -> list[Generation]:
        """Sample one response per prompt (token ids already templated); order is kept.

        ``on_done(i, generation)``: told of response i, once, before the call returns, so that its kernel can be
        judged meanwhile (the same ``Generation`` the call returns): in modes "generate" and "static" at the first
        read of the stop flags after it sampled a stop token (every few steps) while its batch goes on with longer
        responses, and, when a cache budget or ``batch_size`` splits the call into batches, every response of a
        batch not told yet once that batch ends (a response run to the token limit among them). Responses of the
        last batch that were not told by then come only with the return.
        ``between_steps(sync)``: called after every decoding step (with ``on_done`` and stop tokens, in modes
        "generate" and "static"), ``sync()`` finishing the steps queued so far; it may block, e.g. while a kernel is
        timed on this device (`kevin.sandbox.sandbox.DevicesInUse.step_aside`), and should return at once otherwise.
        The model samples in eval mode (no dropout, e.g. LoRA dropout) and is put back in the mode it was in.
        """
        if not prompts:
            return []
        mode = self.resolved_mode()
        size = min(self.batch_size or len(prompts), self.rows_per_wave(prompts, mode))
        out: list[Generation] = []
        was_training = bool(getattr(self.model, "training", False))
        self.model.eval()
        told: set[int] = set()
        try:
            for start in range(0, len(prompts), size):
                chunk = [list(p) for p in prompts[start : start + size]]
                on_row = None
                if on_done is not None:
                    def on_row(i: int, ids: list[int], lps: list[float], start: int = start,
                               chunk: list[list[int]] = chunk) -> None:
                        told.add(start + i)
                        on_done(start + i, self._finish(chunk[i], ids, lps))
                if mode == "continuous":
                    raw = self._continuous(chunk)
                else:
                    # several chunks: the last one is padded to the others' rows, so that the static KV cache and
                    # the compiled graphs keep one shape (a new row count reallocates the cache and recaptures)
                    raw = self._generate(chunk, static=(mode == "static"), rows=size if len(prompts) > size else None,
                                         on_row=on_row, between=between_steps if on_row is not None else None)
                for prompt, (ids, lps) in zip(chunk, raw):
                    out.append(self._finish(prompt, ids, lps))
                if on_done is not None and start + size < len(prompts):  # later batches to go: tell the rest now
                    for i in range(start, len(out)):
                        if i not in told:
                            told.add(i)
                            on_done(i, out[i])
        finally:
            if was_training:
                self.model.train()
        return out

    def rows_per_wave(self, prompts: Sequence[Sequence[int]], mode: str) -> int:
        """The most rows one call generates at once within ``cache_budget_bytes`` (all of them without a budget);
        ValueError when not even the smallest batch of the engine fits."""
        budget = self.cache_budget_bytes
        if budget is None and self.memory_fraction is not None:
            budget = cache_budget_from_free_memory(self.device, self.memory_fraction)
            if budget is not None and mode == "static":  # the last call's static cache: this one reuses or frees it
                from kevin.core.policy.engine.decoding import held_cache_bytes

                budget += int(self.memory_fraction * held_cache_bytes(self.model))
        if budget is None:
            return len(prompts)
        length = max(len(p) for p in prompts) + self.max_new_tokens
        smallest = 1
        if mode == "static":  # the static cache only grows, and its rows are a multiple of 8
            length, smallest = max(self._cache_len, round_up(length, self.cache_bucket)), 8
        per_token = kv_bytes_per_token(self.model.config, next(self.model.parameters()).element_size())
        rows = rows_in_budget(budget, length, per_token)
        rows = rows // smallest * smallest
        if rows < 1:
            raise ValueError(f"a KV-cache budget of {budget:,} bytes holds no batch of {smallest} "
                             f"row(s) of {length:,} tokens ({per_token:,} bytes per token); raise it or shorten "
                             "max_new_tokens")
        return rows

    def _finish(self, prompt: Sequence[int], ids: Sequence[int], lps: Sequence[float] | None) -> Generation:
        token_ids, logprobs, stopped = cut_at_stop(ids, lps, frozenset(self.stop_token_ids))
        body = token_ids[:-1] if stopped else token_ids
        text = self.tokenizer.decode(list(body), skip_special_tokens=True)
        return Generation(
            prompt_ids=tuple(int(t) for t in prompt),
            token_ids=token_ids,
            logprobs=logprobs,
            text=text,
            truncated=not stopped and len(token_ids) >= self.max_new_tokens,
            in_thought=opens_thought(self.tokenizer.decode(list(prompt[-_THINK_TAIL:]))),
        )

    def _generation_config(self, **extra: Any) -> Any:
        """Explicit sampling settings; temperature / top-p are applied by our own processors (see _generate)."""
        from transformers import GenerationConfig

        return GenerationConfig(
            do_sample=True,
            max_new_tokens=self.max_new_tokens,
            # neutral values so that nothing from the model's own generation_config adds a warper
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            typical_p=1.0,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            num_beams=1,
            num_return_sequences=1,
            eos_token_id=list(self.stop_token_ids) or [self._never_id],
            pad_token_id=self.pad_token_id,
            **extra,
        )

    def _generate(self, prompts: list[list[int]], *, static: bool, rows: int | None = None,
                  on_row: Callable[[int, list[int], list[float]], None] | None = None,
                  between: Callable[[Callable[[], None]], Any] | None = None
                  ) -> list[tuple[list[int], list[float]]]:
        """One left-padded batch through our static-cache loop or HF ``generate``; per-row (ids, logprobs), padding kept.

        Static: the batch gets ``max(len(prompts), rows)`` rows rounded up to a multiple of 8 (dummy rows, which the
        loop does not wait for). ``on_row(i, ids, logprobs)``: row i as soon as it stopped (ids up to then)."""
        import torch
        from transformers import LogitsProcessorList, StoppingCriteriaList, TemperatureLogitsWarper, TopPLogitsWarper

        n_real = len(prompts)
        longest = max(len(p) for p in prompts)
        attention = None
        impl = getattr(getattr(self.model, "config", None), "_attn_implementation", None)
        if static:
            rows = round_up(max(n_real, rows or 0), 8)
            prompts = prompts + [prompts[0]] * (rows - n_real)  # dummy rows keep the batch shape stable
            # The cache length only grows, so later calls with shorter prompts reuse the compiled graphs.
            self._cache_len = max(self._cache_len, round_up(longest + self.max_new_tokens, self.cache_bucket))
            if impl not in (None, "eager"):
                # sdpa: our decode attention. Others (flash-attention-2, flex) are not exact over a static
                # cache's unwritten tail (flex was off by 0.1 in log-prob on the CPU; flash drops a full-length
                # all-ones mask): the static loop runs them as sdpa, or our decode attention.
                from kevin.core.policy.engine.attention import register

                attention = register(self.decode_attention) if self.decode_attention else "sdpa"
                attention = None if attention == impl else attention
        elif impl == "sdpa" and self.decode_attention and getattr(self.device, "type", str(self.device)) == "cpu":
            # generate's dynamic cache has the same copy: sdpa with a (padding) mask repeats K and V per query head
            from kevin.core.policy.engine.attention import register

            attention = register(self.decode_attention)
        ids, mask = left_pad(prompts, longest, self.pad_token_id)
        device = self.device
        input_ids = torch.tensor(ids, dtype=torch.long, device=device)  # [B, P]
        attention_mask = torch.tensor(mask, dtype=torch.long, device=device)  # [B, P]

        if static:
            from kevin.core.policy.engine.decoding import sample_static

            if self.generate_kwargs:
                logger.warning("mode 'static' does not use generate_kwargs %s", sorted(self.generate_kwargs))

            with _attention_implementation(self.model, attention):
                sampled = sample_static(
                    self.model, input_ids, attention_mask, max_new_tokens=self.max_new_tokens,
                    cache_length=self._cache_len, temperature=self.temperature, top_p=self.top_p,
                    stop_token_ids=self.stop_token_ids, compile_prefill=self.compile_prefill,
                    fuse_projections=self.fuse_projections, wait_rows=n_real, on_row=on_row,
                    between=(lambda: between(_synchronizer(device))) if between is not None else None,
                )
            return list(zip(sampled.tokens[:n_real].tolist(), sampled.logprobs[:n_real].tolist()))

        recorder = _logprob_recorder_class()()
        processors = []
        if self.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(self.temperature))
        if self.top_p < 1.0:
            processors.append(TopPLogitsWarper(top_p=self.top_p, min_tokens_to_keep=1))
        processors.append(recorder)  # last: sees exactly the scores the token is drawn from
        criteria = {}
        if on_row is not None and self.stop_token_ids:
            finished = _finished_rows_class()(input_ids.shape[1], self.stop_token_ids, recorder, n_real, on_row,
                                              between=between)
            criteria = {"stopping_criteria": StoppingCriteriaList([finished])}

        with torch.no_grad(), _attention_implementation(self.model, attention):
            sequences = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                generation_config=self._generation_config(),
                logits_processor=LogitsProcessorList(processors),
                **criteria,
                **self.generate_kwargs,
            )
        new_tokens = sequences[:, input_ids.shape[1] :]  # [B, n]
        logprobs = recorder.finish(new_tokens)  # [B, n]
        new_list = new_tokens[:n_real].tolist()
        lp_list = logprobs[:n_real].tolist()
        return list(zip(new_list, lp_list))

    def _continuous(self, prompts: list[list[int]]) -> list[tuple[list[int], list[float] | None]]:
        """``generate_batch`` (continuous batching); results are matched back to prompts by their ids."""
        from transformers import GenerationConfig

        try:
            from transformers import ContinuousBatchingConfig
        except ImportError:  # pragma: no cover - older transformers
            from transformers.generation.configuration_utils import ContinuousBatchingConfig

        cb = self.continuous_batching_config
        if cb is None:
            cb = ContinuousBatchingConfig(return_logprobs=True)
        else:
            cb = dataclasses.replace(cb, return_logprobs=True) if dataclasses.is_dataclass(cb) else cb
        gen_config = GenerationConfig(
            do_sample=True,
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=0,
            eos_token_id=list(self.stop_token_ids) or [self._never_id],
            pad_token_id=self.pad_token_id,
            **self.generate_kwargs,
        )
        results = self.model.generate_batch(
            inputs=prompts, generation_config=gen_config, continuous_batching_config=cb, progress_bar=False
        )
        by_prompt: dict[tuple[int, ...], list[Any]] = {}
        for res in results.values():
            if getattr(res, "error", None):
                raise RuntimeError(f"generate_batch request {res.request_id} failed: {res.error}")
            by_prompt.setdefault(tuple(res.prompt_ids), []).append(res)
        out = []
        for p in prompts:
            res = by_prompt[tuple(p)].pop()  # identical prompts are exchangeable
            lps = list(res.logprobs) if res.logprobs else None
            out.append((list(res.generated_tokens), lps))
        return out


