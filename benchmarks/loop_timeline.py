"""Where a pipelined training step's time went: the policy's generate calls, the waits between them, and what the
judged kernels spent their time on.

    python benchmarks/loop_timeline.py RUN_LOG [ROLLOUTS_DIR]

RUN_LOG is the log of `recipes/train_multiturn.py` (the ``kevin.core.rollout`` lines, time-stamped to the second);
ROLLOUTS_DIR its ``rollouts/`` folder (``step_*.jsonl.gz``). Per step it prints the rollout's wall time, the generate
calls (seconds, rows), and the seconds the policy sat idle, split into the set-up before its first call, the wait
for verdicts before its second call (the first turn's kernels judged), the waits between later calls, and the tail
after its last call (the last turn's kernels judged, which nothing can overlap inside one on-policy step). Per step,
for the kernels judged afresh (not a twin's reused verdict), the mean and the maximum seconds of each phase of the
sandbox, and the kernels' timing holds of the device: the seconds from a correct kernel's outputs compared to its
hold (the wait for the device, and before it, on CUDA, the check of the built library's symbols; its "correctness"
phase counts both),
and the seconds it held the device, which no other timing overlaps (nor, until "shared" in its timeline, when the
worker reported its timed loop over and its memory freed, a generate call or a correctness run: the "alone" part).
The references' own timings also hold the device alone and are not counted here: the sum is a lower bound on the
step's held time. Last, the milliseconds of a decoding step in each generate call: its seconds over its longest
response's tokens (a call's responses are told apart by their seconds per token, equal within a call: `decode_steps`),
less the seconds the call stepped aside for timings (shown with each call, "aside", and counted as idle).
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

# (searched, not matched: a progress bar may share the line)
GENERATED = re.compile(r"(\d\d):(\d\d):(\d\d) \S*kevin\.core\.rollout: turn [\d,]+/\d+: (\d+) responses .*? in "
                       r"([\d.]+)s after ([\d.]+)s waiting(?:.*?stepped aside ([\d.]+)s)?")
ENDED = re.compile(r"(\d\d):(\d\d):(\d\d) \S*kevin\.core\.rollout: rollout in ([\d.]+)s")
PHASES = ("queue", "compile", "golden", "correctness", "timing")


def _clock(h: str, m: str, s: str) -> int:
    return int(h) * 3600 + int(m) * 60 + int(s)


def rollouts_in_log(text: str) -> list[dict]:
    """Each rollout's generate calls as (end second, seconds, waited, rows, seconds stepped aside for timings) and
    its end and wall seconds."""
    out, calls, last, days = [], [], 0, 0

    def clock(h: str, m: str, s: str) -> int:
        """Seconds since the log's first midnight: a time of day earlier than the last one read is the next day."""
        nonlocal last, days
        t = _clock(h, m, s) + days * 86400
        if t < last:
            days += 1
            t += 86400
        last = t
        return t

    for line in re.split(r"[\r\n]+", text):
        if g := GENERATED.search(line):
            calls.append((clock(*g.group(1, 2, 3)), float(g.group(5)), float(g.group(6)), int(g.group(4)),
                          float(g.group(7) or 0.0)))
        elif e := ENDED.search(line):
            out.append({"calls": calls, "end": clock(*e.group(1, 2, 3)), "wall": float(e.group(4))})
            calls = []
    return out


def waits(rollout: dict) -> dict[str, float]:
    """The policy's idle seconds (to the second): before its first call (prompts built), before its second (the first
    turn's kernels judged), between later calls, after its last, and stepped aside inside its calls for timings."""
    start = rollout["end"] - rollout["wall"]
    spans = [(end - seconds, end) for end, seconds, *_ in rollout["calls"]]  # (the device wait counts as idle)
    gaps = [max(0.0, b[0] - a[1]) for a, b in zip(spans, spans[1:])]
    return {"setup": max(0.0, spans[0][0] - start) if spans else rollout["wall"],
            "first turn": gaps[0] if gaps else 0.0, "between": sum(gaps[1:]),
            "tail": max(0.0, rollout["end"] - spans[-1][1]) if spans else 0.0,
            "aside": sum(call[4] for call in rollout["calls"])}


def kernel_phases(path: Path) -> tuple[dict[str, list[float]], int, int]:
    """Phase seconds of the step's kernels judged afresh, and how many were judged afresh and reused. Three more lists
    for the kernels that were timed: "hold wait" (compared -> timing in the judge's timeline), "held" (timing ->
    rechecked, or -> timed for a timing that ended in a crash) and "alone" (timing -> shared, else as "held"); two for
    the alone part around the timed loop: "before loop" (timing -> timing_begin) and "after loop" (timing_end -> shared)."""
    phases: dict[str, list[float]] = defaultdict(list)
    fresh = reused = 0
    with gzip.open(path, "rt") as f:
        for line in f:
            for turn in json.loads(line)["turns"]:
                details = turn["result"].get("details") or {}
                static = turn["result"]["status"] == "format_error" and "timeline" not in details
                if "phase_seconds" not in details or static:
                    continue  # never reached the sandbox, or stopped by its static checks
                if details.get("reused"):
                    reused += 1
                    continue
                fresh += 1
                for phase in PHASES:
                    phases[phase].append(float(details["phase_seconds"].get(phase, 0.0)))
                marks = details.get("timeline") or {}
                end = marks.get("rechecked", marks.get("timed"))
                if "compared" in marks and "timing" in marks and end is not None:
                    phases["hold wait"].append(marks["timing"] - marks["compared"])
                    phases["held"].append(end - marks["timing"])
                    phases["alone"].append(marks.get("shared", end) - marks["timing"])
                    if "timing_begin" in marks and "timing_end" in marks:
                        phases["before loop"].append(marks["timing_begin"] - marks["timing"])
                        phases["after loop"].append(marks.get("shared", end) - marks["timing_end"])
    return phases, fresh, reused


def decode_steps(path: Path) -> list[tuple[float, int, int]]:
    """Each generate call of the step as (seconds, rows, longest response in tokens), longest call first. A turn's
    ``generation_s`` is its call's seconds shared in proportion to tokens, so seconds per token is one number a call
    (two calls with equal numbers would merge: rare with seconds measured to the nanosecond)."""
    calls: dict[float, list[int]] = defaultdict(list)
    with gzip.open(path, "rt") as f:
        for line in f:
            for turn in json.loads(line)["turns"]:
                if n := len(turn["response_ids"]):
                    calls[round(turn["generation_s"] / n, 9)].append(n)
    return sorted(((rate * sum(ns), len(ns), max(ns)) for rate, ns in calls.items()), reverse=True)


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit(__doc__)
    steps = rollouts_in_log(Path(argv[0]).read_text(errors="replace"))
    files = sorted(Path(argv[1]).glob("step_*.jsonl.gz")) if len(argv) > 1 else []
    for k, rollout in enumerate(steps, 1):
        w = waits(rollout)
        calls = ", ".join(f"{s:.1f}s/{rows}" + (f" ({aside:.1f}s aside)" if aside else "")
                          for _, s, _, rows, aside in rollout["calls"])
        idle = sum(w.values())
        print(f"step {k}: rollout {rollout['wall']:.1f}s; generate calls (s/rows) {calls}; policy idle {idle:.0f}s = "
              + ", ".join(f"{name} {v:.0f}" for name, v in w.items()))
        if k <= len(files):
            phases, fresh, reused = kernel_phases(files[k - 1])
            if fresh:
                held, wait, alone = phases.pop("held", []), phases.pop("hold wait", []), phases.pop("alone", [])
                before, after = phases.pop("before loop", []), phases.pop("after loop", [])
                print(f"  {fresh} kernels judged afresh, {reused} reused; phase seconds mean/max: " + ", ".join(
                    f"{p} {sum(v) / len(v):.1f}/{max(v):.1f}" for p, v in phases.items()))
                if held:
                    print(f"  {len(held)} timed: their holds of the device {sum(held):.1f}s in all (mean "
                          f"{sum(held) / len(held):.1f}s; alone {sum(alone):.1f}s, the rest shared after the "
                          f"timed loop), after {sum(wait) / len(wait):.1f}s on average from their outputs compared "
                          f"(max {max(wait):.1f}s)")
                if before:
                    print(f"  alone in a hold around its timed loop, mean/max: before {sum(before) / len(before):.2f}/"
                          f"{max(before):.2f}s, after {sum(after) / len(after):.2f}/{max(after):.2f}s")
            steps_ms = [f"{1000 * s / longest:.0f}" for s, _, longest in decode_steps(files[k - 1])]
            print(f"  ms a decoding step, per call (longest call first): {', '.join(steps_ms)}")


if __name__ == "__main__":
    main(sys.argv[1:])
