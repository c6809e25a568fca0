"""The shape of a candidate's timing loop, known to the worker that runs it and the parent that judges it.

Standard library only (the parent imports it). After the warm-up calls the timed calls are cut into
`N_SEGMENTS` segments, each led by `NULL_CALLS` calls of the same harness with a trusted null call in place of
the candidate's forward. The worker marks the start of every null block and every segment on its report pipe,
each just after a datagram of `mark_bytes` that the kernel stamps when it is sent (the parent's clock for them).
The null calls measure what the harness itself costs per call in that process at that moment, so the parent's
wall-clock check subtracts a figure taken under the same load.
The parent derives the segment sizes from the number of samples itself (`segment_sizes`), never from what the
worker says.
"""

from __future__ import annotations

N_SEGMENTS = 5
NULL_CALLS = 2
MARKS = ("null", "calls", "end")


def mark_bytes(event: object, index: object) -> bytes | None:
    """The exact datagram the harness sends for a mark; None for anything that is not a mark.

    >>> mark_bytes("calls", 2)
    b'calls 2'
    """
    if event not in MARKS or type(index) is not int or not 0 <= index <= N_SEGMENTS:
        return None
    return f"{event} {index}".encode()


def segment_sizes(n_calls: int, n_segments: int = N_SEGMENTS) -> list[int]:
    """Timed calls per segment: ``n_calls`` split as evenly as possible, larger segments first.

    >>> segment_sizes(12)
    [3, 3, 2, 2, 2]
    >>> segment_sizes(2)
    [1, 1]
    """
    if n_calls < 1:
        return []
    k = min(n_segments, n_calls)
    return [n_calls // k + (1 if s < n_calls % k else 0) for s in range(k)]
