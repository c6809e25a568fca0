"""What a run's advantages said to each turn: per step, the mean advantage of correct and of failed samples by turn.

    python benchmarks/advantage_by_turn.py ROLLOUTS_DIR [--baseline task] [--gamma 0.4]

ROLLOUTS_DIR is a training run's ``rollouts/`` folder (``step_*.jsonl.gz``). Each step's trajectories go through
`kevin.rewards.samples.rewarded_samples`, the recipe's own reward path, with the chosen ``--baseline`` (any of
``BASELINES``, so a saved run can be read under the baseline it did not use). With the paper's ``task`` group a
turn's return holds fewer discounted later scores the later the turn, so a correct last turn can sit below the
group's mean; this prints how far.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, kevin not installed


def by_turn(trajectories: list, **reward_options) -> dict[tuple[int, bool], list[float]]:
    """{(turn number from 1, correct): [advantage of each such sample]} of one step's trajectories."""
    from kevin.rewards.samples import rewarded_samples

    out = rewarded_samples(trajectories, **reward_options)
    groups: dict[tuple[int, bool], list[float]] = defaultdict(list)
    n_turns = len(trajectories[0].turns)
    for i, (sample, advantage) in enumerate(zip(out.samples, out.advantages.tolist())):
        turn = trajectories[i // n_turns].turns[sample.turn_index]  # sample j * T + t is turn t of trajectory j
        groups[(sample.turn_index + 1, turn.result.status == "correct")].append(advantage)
    return groups


def main() -> None:
    from kevin.core.records import load_rollout
    from kevin.rewards.samples import BASELINES

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rollouts")
    p.add_argument("--baseline", default="task", choices=BASELINES)
    p.add_argument("--gamma", type=float, default=0.4)
    a = p.parse_args()
    files = sorted(Path(a.rollouts).glob("step_*.jsonl.gz"))
    if not files:
        sys.exit(f"{a.rollouts}: no step_*.jsonl.gz files")
    for path in files:
        groups = by_turn(load_rollout(path), baseline=a.baseline, gamma=a.gamma)
        cells = [f"turn {t} {'correct' if ok else 'failed'} {sum(v) / len(v):+.2f} ({len(v)})"
                 for (t, ok), v in sorted(groups.items())]
        print(f"{path.name}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
