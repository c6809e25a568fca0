"""What a starter writes on the first turn, by the corpus kind it reproduces, at several temperatures: no sandbox.

A starter trained to a low loss mostly writes its corpus's answers verbatim, and every corpus answer carries the
status the sandbox gives it (`kevin.data.corpus.EXPECTED_STATUS`). So counting which answer each sample reproduces
says, in seconds and without compiling anything, how many first-turn kernels would be correct, how many distinct
programs it writes (a twin's verdict is reused, so few distinct programs mean little for RL to compare), and how
many are new text. Sampling the starter at temperature T draws what a starter sharpened by s would at T * s. The
model samples in float32 here (an RL run on CUDA samples under bf16 autocast: close, not the same numbers).

    python benchmarks/starter_first_turn.py --model DIR --backend cuda --tasks builtin --samples 16 \\
        --temperatures 1.0 0.77
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from kevin.core.policy.hf import TransformersPolicy  # noqa: E402
from kevin.core.policy.starter import load_starter_dir  # noqa: E402
from kevin.data.builtin import tasks_from_spec  # noqa: E402
from kevin.data.corpus import CORRECT_KINDS, kernel_answers  # noqa: E402
from kevin.data.parse import parse_response  # noqa: E402
from kevin.data.prompts import build_messages  # noqa: E402


def classify(code: str | None, answers: dict[str, str]) -> str:
    """The corpus kind whose code ``code`` is, "unparsed" for a response without one, "new" for other code."""
    if code is None:
        return "unparsed"
    return answers.get(code.strip(), "new")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a starter's directory (recipes/warmstart.py --output_dir)")
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--tasks", default="builtin", help='"builtin", "builtin:<name>,...", or a task file')
    parser.add_argument("--samples", type=int, default=16, help="first-turn responses per task and temperature")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0])
    parser.add_argument("--max_new_tokens", type=int, default=1024)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default=None, help="a JSON file for the counts")
    args = parser.parse_args()
    if args.samples < 1:
        parser.error("--samples must be >= 1")

    tasks = tasks_from_spec(args.tasks)
    if not tasks:
        parser.error(f"--tasks {args.tasks!r} names no task")
    model, tokenizer = load_starter_dir(args.model, device=args.device)
    results = {}
    for temperature in args.temperatures:
        policy = TransformersPolicy(model, tokenizer, max_new_tokens=args.max_new_tokens, temperature=temperature,
                                    mode="generate")
        kinds: collections.Counter = collections.Counter()
        distinct = 0
        start = time.monotonic()
        generations = policy.generate([build_messages(task, backend=args.backend)
                                       for task in tasks for _ in range(args.samples)])  # one call, task-major
        for b, task in enumerate(tasks):
            answers = {a.code.strip(): a.kind for a in kernel_answers(task, args.backend) if a.code}
            codes = [parse_response(g.text, in_thought=g.in_thought).code
                     for g in generations[b * args.samples:(b + 1) * args.samples]]
            kinds.update(classify(c, answers) for c in codes)
            distinct += len({c.strip() for c in codes if c is not None})
        n = len(tasks) * args.samples
        correct = sum(kinds[k] for k in CORRECT_KINDS)
        results[temperature] = {"responses": n, "kinds": dict(kinds), "correct_by_corpus": correct / n,
                                "distinct_programs": distinct, "seconds": round(time.monotonic() - start, 1)}
        print(f"T={temperature:g}: {n} responses, {correct / n:.2f} reproduce a correct corpus answer, "
              f"{distinct} distinct programs ({distinct / n:.2f} a response); {dict(kinds.most_common())}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
