"""The per-kernel score of the paper (Kevin, arXiv 2507.11948, section 3.2)."""

from __future__ import annotations

import math


def kernel_score(
    correct: bool,
    speedup: float | None,
    *,
    correctness_weight: float = 0.3,
    speedup_cap: float | None = None,
) -> float:
    """Score one kernel: ``S = w * 1{correct} + speedup * 1{correct}``.

    ``speedup`` is T_baseline / T_kernel against PyTorch eager. An incorrect kernel scores 0 whatever its
    speedup. A correct kernel whose speedup was not measured (``None``) earns the correctness part only.
    ``speedup_cap`` (none in the paper) clips the speedup to ``min(speedup, cap)`` so that one outlier, or
    an undetected hack, cannot dominate a group's advantages (Dr. Kernel caps at 3).

    >>> kernel_score(True, 1.06)            # 0.3 + 1.06
    1.36
    >>> kernel_score(False, 9.0)            # incorrect: 0 whatever the speedup
    0.0
    >>> kernel_score(True, 9.0, speedup_cap=3.0)
    3.3
    """
    if correctness_weight < 0:
        raise ValueError(f"correctness_weight must be >= 0, got {correctness_weight}")
    if speedup_cap is not None and speedup_cap <= 0:
        raise ValueError(f"speedup_cap must be > 0 or None, got {speedup_cap}")
    if not correct:
        return 0.0
    if speedup is None:
        return float(correctness_weight)
    if not math.isfinite(speedup) or speedup < 0:
        raise ValueError(f"speedup must be a finite, non-negative number, got {speedup}")
    if speedup_cap is not None:
        speedup = min(speedup, speedup_cap)
    return correctness_weight + speedup
