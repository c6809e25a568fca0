"""The pipelined rollout with one group per task against one group per trajectory, in simulation (no GPU).

A stand-in policy and sandbox with the GPU loop's costs (benchmarks/README.md, "The loop on one GPU"): a generate
call takes about ``--call_s`` whatever its rows (decoding bound by latency), each response handed over when it stops
(a uniform share of the call); a kernel takes ``--reused_s`` with probability ``--reused`` (a verdict or a build the
sandbox already holds), else uniform in [``--fresh_lo``, ``--fresh_hi``] s (a new compile, the checks, a timing).
The real `kevin.core.rollout.rollout` schedules both, with ``--slots`` kernels in the sandbox at once. All seconds are
multiplied by ``--scale`` to run fast; the table gives them unscaled.

    python benchmarks/pipeline_groups.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kevin.core.policy.base import Generation  # noqa: E402
from kevin.core.rollout import rollout  # noqa: E402
from kevin.data.task import Task  # noqa: E402
from kevin.sandbox.result import EvalResult  # noqa: E402

CODE = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass  # {mark}\n"


class SimPolicy:
    """Each call lasts ``call_s``; response i stops at a uniform share of it and is handed over then (``on_done``)."""

    def __init__(self, call_s: float, rng: random.Random):
        self.call_s, self.rng, self.calls, self.n = call_s, rng, 0, 0

    def count_tokens(self, text: str) -> int:
        return len(text)

    def generate(self, conversations, on_done=None):
        self.calls += 1
        stops = sorted((self.rng.uniform(0.3, 1.0) * self.call_s, i) for i in range(len(conversations)))
        out: list = [None] * len(conversations)
        start = time.perf_counter()
        for stop, i in stops:
            time.sleep(max(0.0, start + stop - time.perf_counter()))
            self.n += 1
            text = f"t\n</think>\n```python\n{CODE.format(mark=self.n)}```\nsummary"
            out[i] = Generation((1,), tuple(range(200)), None, text, False)
            if on_done is not None:
                on_done(i, out[i])
        time.sleep(max(0.0, start + self.call_s - time.perf_counter()))
        return out


class SimSandbox:
    """Judges one kernel per call after its simulated seconds (drawn once per kernel, from the seed)."""

    def __init__(self, seconds):
        self.seconds = seconds

    def evaluate_many(self, jobs):
        out = []
        for task, code in jobs:
            time.sleep(self.seconds(code))
            out.append(EvalResult("incorrect", "max error 0.5", max_abs_error=0.5))
        return out


def run(groups: str, seed: int, args: argparse.Namespace) -> dict[str, float]:
    rng = random.Random(seed)
    draws: dict[str, float] = {}
    lock = threading.Lock()

    def seconds(code: str) -> float:
        with lock:  # one draw per kernel, in the order the kernels were written
            if code not in draws:
                fresh = rng.random() >= args.reused
                draws[code] = rng.uniform(args.fresh_lo, args.fresh_hi) if fresh else args.reused_s
            return draws[code] * args.scale

    tasks = [Task(f"t{b}", f"import torch\n\nclass Model(torch.nn.Module):\n    pass  # task {b}\n")
             for b in range(args.tasks)]
    policy = SimPolicy(args.call_s * args.scale, random.Random(seed + 1000))
    chunks = args.tasks if groups == "task" else args.tasks * args.trajectories
    start = time.perf_counter()
    trajs = rollout(policy, tasks, SimSandbox(seconds), n_trajectories=args.trajectories, n_turns=args.turns,
                    backend="cuda", progress=False, chunks=chunks, evaluation_slots=args.slots, stagger=args.stagger)
    wall = (time.perf_counter() - start) / args.scale
    gen = sum(t.generation_s for tr in trajs for t in tr.turns) / args.scale
    return {"wall": wall, "generation": gen, "alone": wall - gen, "calls": policy.calls}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--tasks", type=int, default=8)
    p.add_argument("--trajectories", type=int, default=8)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--stagger", type=int, default=4)
    p.add_argument("--slots", type=int, default=14)
    p.add_argument("--call_s", type=float, default=4.0)
    p.add_argument("--reused", type=float, default=0.78)
    p.add_argument("--reused_s", type=float, default=0.1)
    p.add_argument("--fresh_lo", type=float, default=2.0)
    p.add_argument("--fresh_hi", type=float, default=18.0)
    p.add_argument("--scale", type=float, default=0.1)
    args = p.parse_args()
    print("| groups | seed | rollout s | generation s | sandbox alone s | alone / rollout | generate calls |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    summary: dict[str, list[float]] = {}
    for seed in args.seeds:
        for groups in ("task", "trajectory"):
            r = run(groups, seed, args)
            summary.setdefault(groups, []).append(r["alone"] / r["wall"])
            print(f"| {groups} | {seed} | {r['wall']:.1f} | {r['generation']:.1f} | {r['alone']:.1f} | "
                  f"{r['alone'] / r['wall']:.3f} | {r['calls']} |", flush=True)
    for groups, shares in summary.items():
        print(f"{groups}: alone / rollout, mean over seeds {statistics.mean(shares):.3f}")


if __name__ == "__main__":
    main()
