"""A tool, not training: one table over the training runs of an ablation (`kevin.core.eval.ablation`).

Give it the runs' output directories; it prints, per run, the config fields that differ between the runs and how
the correct share moved (first step, mean of the last two steps, the last turn's, the score). The reward ablations
of the paper on the CPU starter (recipes/README.md, "Reward ablations"):

    for g in 0 0.4 0.8; do python recipes/train_multiturn.py --gamma $g --output_dir runs/ablate/gamma_$g; done
    python recipes/ablation_table.py runs/ablate/gamma_*
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from kevin.core.eval.ablation import ablation_rows, markdown_table, read_run


def main(argv: list[str]) -> str:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="training runs' output directories")
    p.add_argument("--last", type=int, default=2, help="steps averaged at the end (default 2)")
    a = p.parse_args(argv)
    if a.last < 1:
        raise SystemExit("--last must be >= 1")
    for path in a.runs:
        if not Path(path).is_dir():  # a glob such as runs/ablate/gamma_* also matches the runs' log files
            print(f"skipping {path}: not a directory", file=sys.stderr)
    try:
        runs = {path: read_run(path) for path in a.runs if Path(path).is_dir()}
        if not runs:
            raise FileNotFoundError(f"no run directory among {a.runs}")
    except FileNotFoundError as exc:
        raise SystemExit(f"{Path(__file__).name}: {exc}") from None
    table = markdown_table(ablation_rows(runs, last=a.last))
    print(table)
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
