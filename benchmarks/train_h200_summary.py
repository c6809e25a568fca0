"""Summarise the runs of train_h200.sh: per-step timings and throughput, and which process ran which task."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kevin.core.records import load_rollout  # noqa: E402

KEYS = ["time/generation", "time/sandbox", "time/rollout", "time/train", "time/step", "train/tokens",
        "perf/train_tokens_per_s", "perf/mfu", "perf/peak_memory_gib", "rollout/prompt_tokens",
        "rollout/response_tokens", "rollout/truncated", "rollout/status/format_error", "loss/policy", "train/grad_norm",
        "train/skipped_update"]
root = Path(sys.argv[1])
for run in ("one", "two", "seven"):
    path = root / run / "metrics.jsonl"
    if not path.exists():
        print(f"{run}: no metrics")
        continue
    for r in (json.loads(line) for line in path.read_text().splitlines()):
        if "time/step" in r:
            print(run, "step", r["step"], json.dumps({k: r.get(k) for k in KEYS}))
    for step_file in sorted((root / run / "rollouts").glob("*.jsonl.gz")):
        trajs = load_rollout(step_file)
        owners = sorted({(t.task_index, t.task_id) for t in trajs})
        print(run, step_file.name, "task_index (rank = index % processes), task_id:", owners, "trajectories:", len(trajs))
