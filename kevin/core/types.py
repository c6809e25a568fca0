"""Frozen records passed between the stages of a Kevin step.

Dimensions legend, used in every docstring and shape comment of ``kevin``:

    B  tasks in a step              (paper: 8)
    G  trajectories per task        (paper: 16, "m")
    T  turns per trajectory         (paper: 4 in training, 8 at test time, "n")
    N  samples = B * G * T          (one per turn)
    L  tokens (padded response length in a batch)
    V  vocabulary size

The flow is ``rollout -> list[Trajectory]`` (each a tuple of ``Turn``), then scores, returns and
advantages are computed from the turns' ``EvalResult``s by pure functions, and
``split_trajectories`` turns every ``Turn`` into one training ``Sample``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kevin.sandbox.result import EvalResult


def _optional_int(x: Any) -> int | None:
    return None if x is None else int(x)


@dataclass(frozen=True)
class Turn:
    """One refinement turn of one trajectory, kept exactly as it happened.

    ``prompt_ids`` and ``response_ids`` are the token ids the policy saw and sampled (never
    re-tokenized). ``response_logprobs`` are the sampling log-probs of ``response_ids`` when the backend
    reports them, else None. ``truncated`` is True when generation hit the token limit. ``result`` is the
    sandbox verdict (a parse failure is a ``format_error`` result). Costs: seconds of generation and of
    evaluation attributed to this turn, and the token counts a backend without token ids reported
    (``reported_prompt_tokens``, ``reported_generated_tokens``: an API's ``usage``), which
    ``prompt_tokens`` and ``generated_tokens`` fall back to. ``replica``: a copy of another trajectory's
    turn made by beam search (``kevin.core.eval.beam``); budgets count the original only.
    """

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    response_text: str
    result: EvalResult
    thought: str | None = None
    code: str | None = None
    summary: str | None = None
    response_logprobs: tuple[float, ...] | None = None
    truncated: bool = False
    generation_s: float = 0.0
    evaluation_s: float = 0.0
    reported_prompt_tokens: int | None = None
    reported_generated_tokens: int | None = None
    replica: bool = False

    @property
    def prompt_tokens(self) -> int:
        """len(prompt_ids), or the backend's reported count when it gave no ids."""
        return len(self.prompt_ids) or (self.reported_prompt_tokens or 0)

    @property
    def generated_tokens(self) -> int:
        """len(response_ids), or the backend's reported count when it gave no ids."""
        return len(self.response_ids) or (self.reported_generated_tokens or 0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; ``replica`` only when True, so records without beam search keep their form."""
        return {
            "prompt_ids": list(self.prompt_ids),
            "response_ids": list(self.response_ids),
            "response_text": self.response_text,
            "result": self.result.to_dict(),
            "thought": self.thought,
            "code": self.code,
            "summary": self.summary,
            "response_logprobs": None if self.response_logprobs is None else list(self.response_logprobs),
            "truncated": self.truncated,
            "generation_s": self.generation_s,
            "evaluation_s": self.evaluation_s,
            "reported_prompt_tokens": self.reported_prompt_tokens,
            "reported_generated_tokens": self.reported_generated_tokens,
            **({"replica": True} if self.replica else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Turn":
        lp = d.get("response_logprobs")
        return cls(
            prompt_ids=tuple(d["prompt_ids"]),
            response_ids=tuple(d["response_ids"]),
            response_text=d["response_text"],
            result=EvalResult.from_dict(d["result"]),
            thought=d.get("thought"),
            code=d.get("code"),
            summary=d.get("summary"),
            response_logprobs=None if lp is None else tuple(float(x) for x in lp),
            truncated=bool(d.get("truncated", False)),
            generation_s=float(d.get("generation_s", 0.0)),
            evaluation_s=float(d.get("evaluation_s", 0.0)),
            reported_prompt_tokens=_optional_int(d.get("reported_prompt_tokens")),
            reported_generated_tokens=_optional_int(d.get("reported_generated_tokens")),
            replica=bool(d.get("replica", False)),
        )


@dataclass(frozen=True)
class Trajectory:
    """G of these per task: ``turns`` in order, all T of them (trajectories never stop early).

    ``pruned``: (turn position, turn) of every turn this trajectory's slot generated that beam search later
    replaced with another trajectory's history: generated and judged, so counted in budgets, but no longer on
    this path. Empty without beam search.
    """

    task_id: str
    task_index: int
    trajectory_index: int
    turns: tuple[Turn, ...]
    pruned: tuple[tuple[int, Turn], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; ``pruned`` only when not empty, so records without beam search keep their form."""
        return {
            "task_id": self.task_id,
            "task_index": self.task_index,
            "trajectory_index": self.trajectory_index,
            "turns": [t.to_dict() for t in self.turns],
            **({"pruned": [[i, t.to_dict()] for i, t in self.pruned]} if self.pruned else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trajectory":
        return cls(
            task_id=d["task_id"],
            task_index=int(d["task_index"]),
            trajectory_index=int(d["trajectory_index"]),
            turns=tuple(Turn.from_dict(t) for t in d["turns"]),
            pruned=tuple((int(i), Turn.from_dict(t)) for i, t in d.get("pruned", ())),
        )


@dataclass(frozen=True)
class Sample:
    """One training sample: one turn, with the return and advantage it is trained on.

    ``loss_mask[i] == 1`` iff ``response_ids[i]`` was sampled by the policy; prompt tokens (task,
    instructions, earlier kernels, sandbox feedback) are not part of ``response_ids`` at all.
    ``old_logprobs`` are the behaviour log-probs when the rollout recorded them.
    """

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    ret: float
    advantage: float
    task_id: str
    task_index: int
    trajectory_index: int
    turn_index: int
    old_logprobs: tuple[float, ...] | None = None
