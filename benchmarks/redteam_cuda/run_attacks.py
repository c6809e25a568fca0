"""Evaluate the CUDA red-team candidates on a GPU: two batches (default config; dynamic gate alone).

Run from the repository root on the GPU machine, with this folder copied into the repo:
    python3 <this folder>/run_attacks.py --out $OUT/redteam_cuda.json
Candidates are the rt*.py files next to this script (their task, relu or matmul, is in tasks.json); the honest
tests/sandbox/candidates/honest_{relu,matmul}_cuda.py are the reference speedups.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = Path.cwd()
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "sandbox"))

from kevin.data.task import Task  # noqa: E402
from kevin.sandbox import Sandbox, SandboxConfig  # noqa: E402

try:
    from test_gpu import MATMUL_SOURCE, RELU_GPU_SOURCE  # noqa: E402
except Exception as exc:  # pytest missing: the same task sources
    print(f"(test_gpu not importable: {exc!r}; using embedded copies)")
    MATMUL_SOURCE = ("import torch\nimport torch.nn as nn\n\nN = 2048\n\n\nclass Model(nn.Module):\n"
                     "    def __init__(self):\n        super().__init__()\n\n    def forward(self, a, b):\n"
                     "        return torch.matmul(a, b)\n\n\ndef get_inputs():\n"
                     "    return [torch.randn(N, N), torch.randn(N, N)]\n\n\ndef get_init_inputs():\n    return []\n")
    RELU_GPU_SOURCE = ("import torch\nimport torch.nn as nn\n\nrows = 2048\ncols = 4096\n\n\nclass Model(nn.Module):\n"
                       "    def __init__(self):\n        super().__init__()\n\n    def forward(self, x):\n"
                       "        return torch.relu(x)\n\n\ndef get_inputs():\n    return [torch.randn(rows, cols)]\n\n\n"
                       "def get_init_inputs():\n    return []\n")
from sandbox_cases import load_candidate  # noqa: E402

TASKS = {"matmul": Task("gpu_matmul", MATMUL_SOURCE, level=1, name="Square matmul 2048"),
         "relu": Task("gpu_relu", RELU_GPU_SOURCE, level=1, name="ReLU 2048x4096")}


def jobs(only: list[str]) -> list[tuple[str, str, str]]:
    """(label, task key, source)."""
    kinds = json.loads((HERE / "tasks.json").read_text())
    out = [("honest_relu_cuda.py", "relu", load_candidate("honest_relu_cuda")),
           ("honest_matmul_cuda.py", "matmul", load_candidate("honest_matmul_cuda"))]
    for fname, task in sorted(kinds.items()):
        if only and not any(o in fname for o in only):
            continue
        out.append((fname, task, (HERE / fname).read_text()))
    return out


def summary(label: str, config_name: str, task: str, r) -> dict:
    d = r.details or {}
    timing = d.get("timing") or {}
    wall = d.get("wall_check") or {}
    return {
        "file": label, "config": config_name, "task": task, "status": r.status,
        "speedup": r.speedup, "runtime_ms": r.runtime_ms, "baseline_ms": r.baseline_ms,
        "baselines_ms": r.baselines_ms, "max_rel_error": r.max_rel_error,
        "feedback": r.feedback,
        "timing": {k: timing.get(k) for k in ("median_ms", "wall_median_ms", "n_trials", "n_tail", "n_waited",
                                               "n_late", "tail_limit_ms", "late_limit_ms", "launch_p90_ms")},
        "wall_check": wall, "violations": d.get("violations"), "symbol_check": d.get("symbol_check"),
        "phase_seconds": d.get("phase_seconds"), "log_tail": (d.get("log_tail") or "")[-1500:],
        "traceback": (d.get("traceback") or "")[-1500:],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*", default=[], help="substrings of candidate file names to run")
    ap.add_argument("--configs", nargs="*", default=["default", "dynamic"], choices=["default", "dynamic"])
    ap.add_argument("--deadline", type=float, default=230.0, help="per-batch deadline, seconds")
    ap.add_argument("--workers", type=int, default=16)
    args = ap.parse_args()

    todo = jobs(args.only)
    configs = {"default": dict(workers=args.workers),
               "dynamic": dict(workers=args.workers, static_checks=False, kernel_inventory=True)}
    rows: list[dict] = []
    t_all = time.monotonic()
    for name in args.configs:
        t0 = time.monotonic()
        sb = Sandbox("cuda", SandboxConfig(**configs[name]))
        results = sb.evaluate_many([(TASKS[t], src) for _, t, src in todo], deadline_s=args.deadline)
        for (label, task, _), r in zip(todo, results):
            rows.append(summary(label, name, task, r))
        print(f"[{name}] batch of {len(todo)} in {time.monotonic() - t0:.0f} s", flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, indent=1, default=str))  # after each batch: partial results

    print(f"\n{'file':44s} {'config':8s} {'status':12s} {'speedup':>8s} {'ms':>9s}  feedback")
    for row in rows:
        sp = f"{row['speedup']:.2f}" if row["speedup"] is not None else "-"
        ms = f"{row['runtime_ms']:.4f}" if row["runtime_ms"] is not None else "-"
        fb = (row["feedback"] or "").strip().splitlines()[0][:110] if row["feedback"] else ""
        print(f"{row['file']:44s} {row['config']:8s} {row['status']:12s} {sp:>8s} {ms:>9s}  {fb}")
    print("\nwall check (implied_ms / limit_ms of the best segment; n_tail):")
    for row in rows:
        w = row["wall_check"] or {}
        print(f"  {row['file']:44s} {row['config']:8s} implied={w.get('implied_ms')} reported={w.get('reported_ms')} "
              f"ok={w.get('ok')} n_tail={row['timing'].get('n_tail')}")
    Path(args.out).write_text(json.dumps(rows, indent=1, default=str))
    print(f"\nwrote {args.out} ({time.monotonic() - t_all:.0f} s)")


if __name__ == "__main__":
    main()
