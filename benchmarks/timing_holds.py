"""How long a correct kernel holds the device while it is timed, task by task.

Judges the corpus's correct answers (the slow and the fast kernel) of the given tasks with speed measured, one after
the other, and prints for each its status, its speedup, the timed loop's length (``timing_begin`` to ``timing_end``
in its timeline: the warm-up, the timed and the null calls with the harness's fresh inputs around each), how long it
held the device alone (``alone_s``: until the worker reported its timed loop over and its memory freed) and in
all (``held_s``: until its rechecks were compared), and where its time went. On a large input the harness's fresh
inputs, not the kernel, can set the hold (`benchmarks/README.md`).

    python benchmarks/timing_holds.py --tasks "builtin:AvgPool3d,GELU" --backend cuda --out holds.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from kevin.data.builtin import tasks_from_spec  # noqa: E402
from kevin.data.corpus import kernel_answers  # noqa: E402
from kevin.sandbox import Sandbox, SandboxConfig  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="builtin:AvgPool3d", help='"builtin:<name>,..." or a task file')
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--kinds", default="fast,slow", help="corpus answer kinds to judge (correct ones)")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args()

    kinds = set(args.kinds.split(","))
    sandbox = Sandbox("cuda" if args.backend == "cuda" else "cpu", SandboxConfig())
    rows = []
    for task in tasks_from_spec(args.tasks):
        for answer in kernel_answers(task, args.backend):
            if answer.kind not in kinds:
                continue
            result = sandbox.evaluate(task, answer.code)  # one at a time: no other timing or compile beside it
            timeline = result.details.get("timeline") or {}
            hold = (timeline["timing_end"] - timeline["timing_begin"]) if "timing_end" in timeline else None
            end = timeline.get("rechecked", timeline.get("timed"))
            alone = timeline.get("shared", end)  # the hold is shared from the worker's "released" on
            held = {k: round(v - timeline["timing"], 3) for k, v in (("alone_s", alone), ("held_s", end))
                    if "timing" in timeline and v is not None}
            speedup = None if result.speedup is None else round(result.speedup, 3)
            row = {"task": task.task_id, "kind": answer.kind, "status": result.status, "speedup": speedup,
                   "hold_s": None if hold is None else round(hold, 3), **held,
                   "runtime_ms": result.runtime_ms, "baseline_ms": result.baseline_ms,
                   "phase_seconds": result.details.get("phase_seconds")}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
