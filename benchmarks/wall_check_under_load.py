"""The wall-clock cross-check of the CPU backend on a loaded host: the honest CPU ReLU of tests/sandbox, evaluated
once on an idle machine, then ``--runs`` times while ``--hogs`` busy-looping processes compete for the cores.

Prints, per evaluation, the verdict and ``details["wall_check"]``: the per-call time implied by the parent's wall
clock (``implied_wall_ms``) and by the candidate's CPU clock (``implied_cpu_ms``), of which the check takes the
lower (kevin/sandbox/_judge.py, ``wall_check``).

    python benchmarks/wall_check_under_load.py            # CPU only; builds the test extension once (~30 s)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "sandbox"))

from kevin.sandbox import Sandbox  # noqa: E402
from sandbox_cases import RELU_TASK, _config, load_candidate  # noqa: E402


def show(label: str, r) -> None:
    wall = {k: round(v, 4) if isinstance(v, float) else v for k, v in r.details.get("wall_check", {}).items() if k != "reason"}
    print(label, r.status, json.dumps(wall), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hogs", type=int, default=6)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    sandbox = Sandbox("cpu", _config(tempfile.mkdtemp(prefix="kevin-load-")))
    src = load_candidate("honest_relu_cpu")
    show("idle", sandbox.evaluate(RELU_TASK, src))
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.hogs)]
    try:
        time.sleep(1)
        for _ in range(a.runs):
            show(f"{a.hogs} hogs", sandbox.evaluate(RELU_TASK, src))
    finally:
        for h in hogs:
            h.kill()


if __name__ == "__main__":
    main()
