"""One short message per status, what the model reads on its next turn (the paper's five categories).

Format/parse error, compile error (the first compiler errors, trimmed), runtime error, incorrect (with
the max error), correct (with the speedup), plus timeout. Standard library only.

>>> correct_feedback(0.5, 1.0)
'Correct. Your kernel took 0.5 ms against 1 ms for the PyTorch reference: a speedup of 2.00x.'
"""

from __future__ import annotations

import re
from typing import Sequence

MAX_CHARS = 1200
_NOT_COMPILER = ("Error building extension", "CalledProcessError")
_ERROR_LINE = re.compile(r"(\berror\b|Error:|undefined reference|fatal)", re.IGNORECASE)


def trim(text: str, limit: int = MAX_CHARS) -> str:
    """At most ``limit`` characters: the head, a marker, nothing else."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 15].rstrip() + "\n[... trimmed]"


def first_compiler_errors(log: str, *, max_errors: int = 3, context: int = 2) -> str:
    """The first ``max_errors`` compiler error lines of a build log, each with ``context`` lines after it.

    >>> first_compiler_errors("c++ -O3 x.cpp\\nx.cpp:3:5: error: 'y' was not declared\\n    y = 1;\\n")
    "x.cpp:3:5: error: 'y' was not declared\\n    y = 1;"
    """
    lines = log.splitlines()
    picked: list[str] = []
    n = 0
    i = 0
    while i < len(lines) and n < max_errors:
        line = lines[i]
        noise = line.lstrip().startswith(("FAILED:", "ninja:", "[")) or any(s in line for s in _NOT_COMPILER)
        if _ERROR_LINE.search(line) and not noise:
            block = [line] + lines[i + 1 : i + 1 + context]
            picked.extend(block)
            n += 1
            i += 1 + context
            continue
        i += 1
    return "\n".join(picked).strip() if picked else log.strip()[-MAX_CHARS:]


def format_error_feedback(violations: Sequence[str]) -> str:
    body = "\n".join(f"- {v}" for v in violations[:8])
    more = f"\n(and {len(violations) - 8} more)" if len(violations) > 8 else ""
    return trim(f"Format error: your program was rejected before compiling.\n{body}{more}")


def compile_error_feedback(log: str) -> str:
    return trim(f"Compilation failed. The first errors:\n{first_compiler_errors(log)}")


def runtime_error_feedback(message: str) -> str:
    return trim(f"Runtime error: {message.strip()}")


def timeout_feedback(phase: str, seconds: float) -> str:
    return f"Timeout: {phase} did not finish within {seconds:g} s (an infinite loop, a deadlock or far too slow)."


def incorrect_feedback(reason: str, max_abs_error: float | None = None, max_rel_error: float | None = None) -> str:
    tail = ""
    if max_rel_error is not None and "max rel error" not in reason:
        tail = f" (max rel error {max_rel_error:.2g})"  # no abs error: it gives a golden value back (compare.py)
    return trim(f"Incorrect: {reason}{tail}.")


def correct_feedback(runtime_ms: float | None, baseline_ms: float | None) -> str:
    if runtime_ms is None or baseline_ms is None or runtime_ms <= 0:
        return "Correct. (Speed was not measured.)"
    return (
        f"Correct. Your kernel took {runtime_ms:.4g} ms against {baseline_ms:.4g} ms for the PyTorch reference: "
        f"a speedup of {baseline_ms / runtime_ms:.2f}x."
    )
