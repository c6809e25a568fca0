"""A batch with stragglers returns by its deadline: one candidate hangs while loading, one in its forward.

    python benchmarks/sandbox_deadline.py --device cuda --n 16 --deadline 120 --out OUT_DIR
    python benchmarks/sandbox_deadline.py --device cpu --n 6 --deadline 60 --out OUT_DIR

One `Sandbox.evaluate_many` batch of ``--n`` candidates for a ReLU task: ``n - 2`` honest kernels (distinct
sources, so each compiles), one that loops forever at import (the compile stage) and one whose forward never
returns. Prints and writes (``OUT_DIR/sandbox_deadline.json``) the batch's seconds against the deadline, every
status, and where each candidate spent its time (``details["phase_seconds"]``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "sandbox"))

from sandbox_cases import RELU_SOURCE, load_candidate  # noqa: E402

from kevin.data.task import Task  # noqa: E402
from kevin.sandbox import Sandbox, SandboxConfig  # noqa: E402

GPU_RELU = RELU_SOURCE.replace("batch_size = 64", "batch_size = 4096").replace("dim = 256", "dim = 4096")


def honest(device: str, tag: str) -> str:
    if device == "cuda":
        src = load_candidate("honest_relu_cuda")
        return src.replace('cuda_honest_source = r"""\n', f'cuda_honest_source = r"""\n// variant {tag}\n', 1)
    src = load_candidate("honest_relu_cpu")
    return src.replace('relu_cpp_source = r"""', f'relu_cpp_source = r"""\n// variant {tag}', 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--deadline", type=float, default=120.0)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    task = Task("relu", GPU_RELU if args.device == "cuda" else RELU_SOURCE)
    stamp = str(time.time_ns())
    jobs = [honest(args.device, f"{stamp}-{k}") for k in range(args.n - 2)]
    jobs.insert(1, honest(args.device, f"{stamp}-hang") + "\nwhile True:\n    pass\n")
    jobs.insert(3, load_candidate("crash_infinite_loop" if args.device == "cpu" else "honest_relu_cuda").replace(
        "return self.ext.relu_forward(x)", "while True:\n            pass"))
    config = SandboxConfig(workers=args.workers or SandboxConfig().workers, static_checks=False)
    sandbox = Sandbox(args.device, config)
    t0 = time.monotonic()
    results = sandbox.evaluate_many([(task, src) for src in jobs], deadline_s=args.deadline)
    seconds = time.monotonic() - t0
    rows = [{"status": r.status, "feedback": r.feedback.splitlines()[0][:160],
             "phase_seconds": r.details.get("phase_seconds")} for r in results]
    summary = {"device": args.device, "n": args.n, "deadline_s": args.deadline, "batch_seconds": round(seconds, 2),
               "over_deadline_s": round(seconds - args.deadline, 2),
               "statuses": {s: sum(r["status"] == s for r in rows) for s in sorted({r["status"] for r in rows})},
               "rows": rows}
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=2))
    for k, r in enumerate(rows):
        print(k, r["status"], r["phase_seconds"], r["feedback"])
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "sandbox_deadline.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
