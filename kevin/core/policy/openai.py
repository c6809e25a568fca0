"""`OpenAIPolicy`: any OpenAI-compatible ``/v1/chat/completions`` endpoint, over ``urllib``.

Evaluates API models under the same harness (no token ids, no log-probs).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from kevin.core.policy.base import Generation

logger = logging.getLogger(__name__)


def _count(x: Any) -> int | None:
    """A token count from a reply's ``usage``: a non-negative int, else None (absent or malformed)."""
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else None


class OpenAIError(RuntimeError):
    """A chat-completions request failed for good (a 4xx, or retries exhausted)."""


_CONTEXT_TOO_LONG = re.compile(r"context_length_exceeded|maximum context length", re.I)


class _ContextTooLong(Exception):
    """An HTTP 400 that says the prompt does not fit the model's context."""


_TOO_LONG = Generation((), (), None, "", truncated=True)  # `OpenAIPolicy._one`'s answer to a prompt that does not fit


REASONING_MODELS = re.compile(r"^(?:.*/)?(?:o\d|gpt-5)")
"""Model names that OpenAI serves as reasoning models (o1, o3-mini, o4-mini, gpt-5, with or without a
``provider/`` prefix): they reject ``max_tokens`` (their limit is ``max_completion_tokens``) and any temperature
or top-p but the default."""

MAX_RETRY_AFTER_S = 120.0  # the longest a server's Retry-After is waited


class OpenAIPolicy:
    """An OpenAI-compatible ``/chat/completions`` endpoint as a :class:`Policy` (standard library only).

    ``base_url`` is the API root (``https://api.openai.com/v1``, ``http://127.0.0.1:8000/v1``);
    ``api_key`` defaults to the ``OPENAI_API_KEY`` environment variable (none is sent when neither is set).
    Requests run ``concurrency`` at a time. 429, 5xx, connection errors, timeouts and a reply that is not JSON are
    retried up to ``max_retries`` times, waiting ``backoff_s * 2**attempt`` seconds (or the server's
    ``Retry-After``, at most `MAX_RETRY_AFTER_S`); any other 4xx raises :class:`OpenAIError` at once with the
    server's message, except a prompt longer than the model's context: that one response comes back empty and
    ``truncated`` (the turn scores 0 and its trajectory goes on, as for any truncated response).

    ``max_tokens`` (or its alias ``max_new_tokens``, the other backends' name) caps the response. ``reasoning``
    (default: the model's name matches `REASONING_MODELS`) sends it as ``max_completion_tokens`` and sends no
    temperature or top-p, which such models reject; otherwise it is sent as ``max_tokens`` with ``temperature``
    and ``top_p``.

    Token ids are not available: ``prompt_ids`` and ``token_ids`` are empty and ``logprobs`` is None, so
    these generations are for evaluation, not training. The reply's ``usage`` counts (``prompt_tokens``,
    ``completion_tokens``, reasoning tokens included) are kept as ``reported_prompt_tokens`` and
    ``reported_generated_tokens``, for the report's compute table. A response the server cut at ``max_tokens``
    (``finish_reason == "length"``) is ``truncated``. A server's separate reasoning text
    (``reasoning_content``, as vLLM and DeepSeek return it) is put back in front as ``<think>...</think>``.
    ``count_tokens`` is an approximation, ceil(characters / 4) (typical of BPE tokenizers on English and
    code); it only sizes the prompt budget.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        max_tokens: int | None = None,
        max_new_tokens: int | None = None,
        temperature: float = 0.9,
        top_p: float | None = None,
        reasoning: bool | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 5,
        backoff_s: float = 2.0,
        concurrency: int = 8,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if max_tokens is not None and max_new_tokens is not None and max_tokens != max_new_tokens:
            raise ValueError(f"max_tokens={max_tokens} and max_new_tokens={max_new_tokens} disagree; give one")
        limit = max_tokens if max_tokens is not None else (max_new_tokens if max_new_tokens is not None else 4096)
        if limit < 1:
            raise ValueError(f"max_tokens must be >= 1, got {limit}")
        self.model = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.max_tokens = limit
        self.temperature = temperature
        self.top_p = top_p
        self.reasoning = bool(REASONING_MODELS.match(model)) if reasoning is None else reasoning
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.concurrency = max(1, int(concurrency))
        self.extra_body = dict(extra_body or {})
        if self.reasoning and (temperature != 1.0 or top_p is not None):
            logger.info("%s is a reasoning model: temperature %s and top_p %s are not sent (it accepts only the "
                        "defaults)", model, temperature, top_p)

    def count_tokens(self, text: str) -> int:
        return math.ceil(len(text) / 4)

    def generate(self, conversations: Sequence[list[dict]]) -> list[Generation]:
        if self.concurrency == 1 or len(conversations) <= 1:
            out = [self._one(m) for m in conversations]
        else:
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(conversations))) as pool:
                out = list(pool.map(self._one, conversations))
        if out and all(g is _TOO_LONG for g in out):
            raise OpenAIError(f"every prompt of the batch is longer than {self.model}'s context allows with "
                              f"max_tokens={self.max_tokens}: is max_tokens above the model's context?")
        return [Generation((), (), None, "", truncated=True) if g is _TOO_LONG else g for g in out]

    def body(self, messages: list[dict]) -> dict[str, Any]:
        """The request body for one conversation."""
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.reasoning:
            body["max_completion_tokens"] = self.max_tokens
        else:
            body["max_tokens"] = self.max_tokens
            body["temperature"] = self.temperature
            if self.top_p is not None:
                body["top_p"] = self.top_p
        body.update(self.extra_body)
        return body

    def _one(self, messages: list[dict]) -> Generation:
        """The generation for one conversation, or `_TOO_LONG` when the prompt does not fit the context."""
        try:
            reply = self._post(self.body(messages))
        except _ContextTooLong as e:
            logger.warning("the prompt is longer than %s's context; the response is empty and truncated (%s)",
                           self.model, str(e)[:300])
            return _TOO_LONG
        try:
            choice = reply["choices"][0]
            message = choice["message"]
            text = message.get("content") or ""
        except (KeyError, IndexError, TypeError) as e:
            raise OpenAIError(f"malformed chat-completions reply from {self.url}: {str(reply)[:300]}") from e
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if reasoning:
            text = f"<think>\n{reasoning}\n</think>\n{text}"
        usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
        return Generation((), (), None, text, truncated=choice.get("finish_reason") == "length",
                          reported_prompt_tokens=_count(usage.get("prompt_tokens")),
                          reported_generated_tokens=_count(usage.get("completion_tokens")))

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last: str = ""
        for attempt in range(self.max_retries + 1):
            wait = self.backoff_s * (2**attempt)
            request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                    raw = resp.read().decode(errors="replace")
                try:
                    return json.loads(raw)
                except json.JSONDecodeError:  # a proxy's error page, say: retried like a server error
                    last = f"a reply that is not JSON: {raw[:200]!r}"
            except urllib.error.HTTPError as e:
                detail = e.read().decode(errors="replace")[:500]
                if e.code == 400 and _CONTEXT_TOO_LONG.search(detail):
                    raise _ContextTooLong(detail) from e
                if e.code != 429 and e.code < 500:
                    raise OpenAIError(f"HTTP {e.code} from {self.url}: {detail}") from e
                last = f"HTTP {e.code}: {detail}"
                retry_after = e.headers.get("Retry-After") if e.headers else None
                if retry_after:
                    try:
                        wait = min(max(float(retry_after), 0.0), MAX_RETRY_AFTER_S)
                    except ValueError:
                        pass
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                last = f"{type(e).__name__}: {e}"
            if attempt < self.max_retries:
                logger.warning("chat-completions attempt %d failed (%s); retrying in %.1fs", attempt + 1, last, wait)
                time.sleep(wait)
        raise OpenAIError(f"{self.url}: gave up after {self.max_retries + 1} attempts; last error {last}")
