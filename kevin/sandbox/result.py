"""The sandbox's one result type. Standard library only, so that records can be read anywhere."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

STATUSES = ("format_error", "compile_error", "runtime_error", "timeout", "incorrect", "correct")


@dataclass(frozen=True)
class EvalResult:
    """What the sandbox decided about one candidate kernel.

    ``status`` is one of :data:`STATUSES`. ``feedback`` is the one short message the model is shown on
    its next turn. Measurements are ``None`` when they were not taken (for example ``runtime_ms`` of an
    incorrect kernel). ``details`` holds JSON-serialisable extras: static-check violations, the trimmed
    compile log, per-input-set errors, timing samples.

    >>> r = EvalResult("correct", "Correct; speedup 2.00x.", runtime_ms=0.5, baseline_ms=1.0)
    >>> r.correct, r.speedup
    (True, 2.0)
    """

    status: str
    feedback: str
    runtime_ms: float | None = None
    baseline_ms: float | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    details: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)
    baselines_ms: dict[str, float] = field(default_factory=dict, hash=False, compare=True)
    """every reference timing taken, by name ("eager", "tf32", "compile"); ``baseline_ms`` is the configured one"""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; expected one of {STATUSES}")

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    @property
    def speedup(self) -> float | None:
        """baseline_ms / runtime_ms for a correct kernel; None when either time was not measured."""
        if not self.correct or self.runtime_ms is None or self.baseline_ms is None or self.runtime_ms <= 0:
            return None
        return self.baseline_ms / self.runtime_ms

    def speedup_vs(self, baseline: str) -> float | None:
        """The speedup against one of ``baselines_ms`` (None when it was not timed or the kernel is not correct)."""
        ms = self.baselines_ms.get(baseline)
        if not self.correct or self.runtime_ms is None or ms is None or self.runtime_ms <= 0:
            return None
        return ms / self.runtime_ms

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EvalResult":
        d = dict(d)  # records written before ``baselines_ms`` existed load with it empty
        d["baselines_ms"] = {str(k): float(v) for k, v in (d.get("baselines_ms") or {}).items()}
        return cls(**d)
