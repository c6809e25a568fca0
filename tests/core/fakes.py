"""Test doubles for the rollout: a scripted policy (fixed responses) and a sandbox with fixed verdicts.

The scripted policy is a real :class:`kevin.core.policy.Policy`: it records every conversation it is
given and answers with the next scripted response for that turn, tokenized by a toy tokenizer (one id per
character) so that prompt and response ids are real data the loss mask can be checked against.
"""

from __future__ import annotations

from typing import Callable, Sequence

from kevin.core.policy import Generation
from kevin.sandbox.result import EvalResult


def char_ids(text: str) -> tuple[int, ...]:
    """One token per character: the id is the code point (a toy tokenizer; exact and reversible)."""
    return tuple(ord(c) for c in text)


def conversation_text(messages: list[dict]) -> str:
    return "".join(f"<{m['role']}>{m['content']}" for m in messages)


class ScriptedPolicy:
    """Answers turn t (the t-th ``generate`` call) with ``responses[t]``.

    ``responses[t]`` is either one string for every conversation of the turn, or a function
    ``(index_in_batch) -> str``. ``truncate`` (optional): a predicate ``(turn, index) -> bool`` marking a
    response as cut at the token limit. ``in_thought``: every generation's prompt opened the thought (as the
    tiny and QwQ chat templates do). Log-probs are a fixed -0.5 per token.
    """

    def __init__(
        self,
        responses: Sequence[str | Callable[[int], str]],
        truncate: Callable[[int, int], bool] | None = None,
        in_thought: bool = False,
    ) -> None:
        self.responses = list(responses)
        self.truncate = truncate
        self.in_thought = in_thought
        self.calls: list[list[list[dict]]] = []  # every generate call: its conversations

    def count_tokens(self, text: str) -> int:
        return len(text)

    def generate(self, conversations: Sequence[list[dict]]) -> list[Generation]:
        turn = len(self.calls)
        self.calls.append([list(c) for c in conversations])
        script = self.responses[min(turn, len(self.responses) - 1)]
        out = []
        for i, messages in enumerate(conversations):
            text = script(i) if callable(script) else script
            ids = char_ids(text)
            out.append(
                Generation(
                    prompt_ids=char_ids(conversation_text(messages)),
                    token_ids=ids,
                    logprobs=tuple(-0.5 for _ in ids),
                    text=text,
                    truncated=bool(self.truncate and self.truncate(turn, i)),
                    in_thought=self.in_thought,
                )
            )
        return out


class VerdictSandbox:
    """A stand-in sandbox for loop-logic tests: ``verdict(task, code) -> EvalResult``; records every batch."""

    def __init__(self, verdict: Callable[[object, str], EvalResult]) -> None:
        self.verdict = verdict
        self.batches: list[list[tuple[object, str]]] = []

    def evaluate_many(self, jobs):
        self.batches.append(list(jobs))
        return [self.verdict(task, code) for task, code in jobs]


def response(thought: str, code: str, summary: str) -> str:
    """A well-formed response, as the tiny chat template leaves it (``<think>`` is in the prompt)."""
    return f"{thought}\n</think>\n```python\n{code}```\n{summary}"
