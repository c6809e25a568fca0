"""The policy protocol and what every backend shares: `Generation`, `Policy`, stop-token cutting, padding.

Conventions shared by the backends that return token ids:

- ``token_ids`` end with the stop token (EOS) when the model emitted one: the model sampled it, so it is
  trained on (loss mask 1) like any other response token. Nothing after it (batch padding) is kept.
  ``text`` is the decoded response without that stop token.
- ``truncated`` is True when ``max_new_tokens`` ran out before a stop token.
- ``logprobs[i]`` is log pi(token_ids[i]) under the distribution the token was actually drawn from: the
  log-softmax of the *processed* scores, i.e. the logits divided by the temperature with top-p's removed
  tokens at -inf (renormalised over the kept ones). With ``temperature=1, top_p=1`` that is the model's own
  log-probability; otherwise a trainer that recomputes log-probs must apply the same temperature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

@dataclass(frozen=True)
class Generation:
    """One sampled response: the prompt ids the policy saw, the ids it sampled, their log-probs, the text.

    ``token_ids`` are as sampled (never re-tokenized), ending with the stop token when one was emitted;
    ``logprobs`` has one entry per token id, or is None when the backend does not report them; ``text``
    is the decoded response without the stop token; ``truncated`` means max_new_tokens ran out first.
    ``reported_prompt_tokens`` and ``reported_generated_tokens``: the token counts a backend without token ids
    reports (an API's ``usage``), else None. ``in_thought``: the prompt ended with an open ``<think>`` (QwQ's
    chat template puts it in the generation prompt), so ``text`` starts inside the thought; a response that
    then never writes ``</think>`` has no answer, even when it ended with the stop token.
    """

    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None
    text: str
    truncated: bool
    reported_prompt_tokens: int | None = None
    reported_generated_tokens: int | None = None
    in_thought: bool = False

    def __post_init__(self) -> None:
        if self.logprobs is not None and len(self.logprobs) != len(self.token_ids):
            raise ValueError(f"{len(self.logprobs)} logprobs for {len(self.token_ids)} token ids")


_THINK_TAIL = 8  # prompt tokens decoded to see whether the generation prompt opened a thought


def opens_thought(prompt_text: str) -> bool:
    """Whether a rendered prompt ends with an open ``<think>`` (after trailing whitespace): the response then
    starts inside the thought (`Generation.in_thought`)."""
    return prompt_text.rstrip().endswith("<think>")


@runtime_checkable
class Policy(Protocol):
    """Anything that samples one response per conversation and can count tokens of a text.

    A ``generate`` may also take a keyword ``on_done(i, generation)``, called with response i as soon as it is
    finished, before the call returns (`TransformersPolicy` does): the pipelined rollout then judges its kernel
    while the longer responses are still sampled."""

    def generate(self, conversations: Sequence[list[dict]]) -> list[Generation]: ...

    def count_tokens(self, text: str) -> int: ...


# ----------------------------------------------------------------------------------------------------------
# Pure helpers


def cut_at_stop(
    token_ids: Sequence[int], logprobs: Sequence[float] | None, stop_ids: frozenset[int] | set[int]
) -> tuple[tuple[int, ...], tuple[float, ...] | None, bool]:
    """Keep ``token_ids`` up to and including the first stop id; returns (ids, logprobs, stopped).

    >>> cut_at_stop([5, 7, 2, 0, 0], [-1.0, -2.0, -0.5, 0.0, 0.0], {2, 0})
    ((5, 7, 2), (-1.0, -2.0, -0.5), True)
    >>> cut_at_stop([5, 7], None, {2})
    ((5, 7), None, False)
    """
    end = len(token_ids)
    stopped = False
    for i, t in enumerate(token_ids):
        if int(t) in stop_ids:
            end, stopped = i + 1, True
            break
    ids = tuple(int(t) for t in token_ids[:end])
    lps = None if logprobs is None else tuple(float(x) for x in logprobs[:end])
    return ids, lps, stopped


def round_up(n: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is >= n (n >= 1). round_up(1025, 256) = 1280."""
    return max(multiple, -(-n // multiple) * multiple)


def kv_bytes_per_token(config: object, itemsize: int) -> int:
    """KV-cache bytes of one token of one row: 2 (K and V) x layers x KV heads x head dim x ``itemsize``.

    A 7B Qwen2.5 (28 layers, 4 KV heads, head dim 128) in bf16: 2 x 28 x 4 x 128 x 2 = 57,344 bytes.
    """
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * int(config.num_hidden_layers) * int(heads) * int(head_dim) * int(itemsize)


def rows_in_budget(budget_bytes: int, tokens_per_row: int, bytes_per_token: int) -> int:
    """How many rows of ``tokens_per_row`` cache slots fit in ``budget_bytes``: floor(budget / (tokens x bytes)).

    40 GiB for a 7B's rows of 16,384 + 2,048 slots: 42,949,672,960 // (18,432 x 57,344) = 40.

    >>> rows_in_budget(40 * 2**30, 16384 + 2048, 57344)
    40
    """
    return int(budget_bytes) // (int(tokens_per_row) * int(bytes_per_token))


def left_pad(prompts: Sequence[Sequence[int]], length: int, pad_id: int) -> tuple[list[list[int]], list[list[int]]]:
    """Left-pad every prompt to ``length``; returns (input_ids, attention_mask), both [B][length].

    >>> left_pad([[7, 8], [9]], 3, 0)
    ([[0, 7, 8], [0, 0, 9]], [[0, 1, 1], [0, 0, 1]])
    """
    ids, mask = [], []
    for p in prompts:
        n = len(p)
        if n > length:
            raise ValueError(f"prompt of {n} tokens does not fit in {length}")
        ids.append([pad_id] * (length - n) + [int(t) for t in p])
        mask.append([0] * (length - n) + [1] * n)
    return ids, mask


