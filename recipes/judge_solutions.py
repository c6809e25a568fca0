"""Judge a folder of KernelBench-format solutions under a rule set: one table of verdicts and speedups.

A solution is a Python file defining ``ModelNew``, written for one task. It is matched to its task by
KernelBench's naming: ``level_{L}_problem_{P}_sample_{S}_kernel.py`` (problem P of level L, any sample S), a
name like the task's own file (``{P}_{Name}.py``), or the task id (``kb-L1-19.py``, ``kevin-L1-ReLU.py``). A
file that matches no task is listed as ``unmatched``, never dropped. Every matched solution is judged in one
`Sandbox.evaluate_many` batch (parallel compiles; timings alone on their device), under ``--rules`` (kevin or
kernelbench, ``kevin.sandbox.config.RULES``), with speedups against every reference timing the sandbox takes
(eager, TF32 allowed and torch.compile on CUDA; eager on the CPU), ``--baseline`` being the headline one.

Writes ``judged.jsonl`` (one row per file: task, file, status, speedup per baseline, runtime, max errors, the
first line of feedback) and ``judged.md`` (the same as a table, with a summary line) into ``output_dir``.

    python recipes/judge_solutions.py --tasks path/to/KernelBench/level1 --solutions runs/kb_l1 --rules kernelbench
    python recipes/judge_solutions.py --tasks builtin --solutions my_kernels --device cpu --rules kevin
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kevin.core.run.cli import ConfigError, log_to_stderr, parse_config
from kevin.data import builtin_tasks, load_tasks
from kevin.sandbox import Sandbox, SandboxConfig

BASELINE_ORDER = ("eager", "tf32", "compile")
SAMPLE_FILE = re.compile(r"level_(\d+)_problem_(\d+)_sample_\d+_kernel")
TASK_FILE = re.compile(r"(\d+)_(.+)")


@dataclass(frozen=True)
class Config:
    tasks: str | None = None
    """the tasks the solutions were written for: a KernelBench level folder (or checkout), a JSONL file of tasks,
    or 'builtin' (kevin's built-in suite)"""
    solutions: str | None = None
    """the folder of solution files (*.py, each defining ModelNew)"""
    rules: Literal["kevin", "kernelbench"] = "kernelbench"
    """the sandbox's rule set: 'kernelbench' (torch.nn modules may hold weights, tolerance 1e-2) or 'kevin'"""
    baseline: Literal["eager", "tf32", "compile"] = "eager"
    """the reference timing of the headline speedup and fast_1 (the others are shown beside it)"""
    device: str | None = None
    """'cuda' (every visible GPU), 'cuda:N' or 'cpu' (default: cuda when available)"""
    output_dir: str | None = None
    """where judged.jsonl and judged.md go (default: runs/judge_solutions/<solutions folder name>)"""


def read_tasks(spec: str) -> list:
    """The tasks that ``--tasks`` names; a one-line error when it names none."""
    if spec == "builtin":
        return builtin_tasks()
    if not Path(spec).exists():
        raise SystemExit(f"--tasks {spec}: no such file or folder (a KernelBench folder, a JSONL file or 'builtin')")
    try:
        tasks = load_tasks(spec)
    except (ValueError, OSError) as exc:
        raise SystemExit(f"--tasks {spec}: {exc}") from None
    if not tasks:
        raise SystemExit(f"--tasks {spec}: holds no tasks")
    return tasks


def match(stem: str, tasks: list) -> tuple[object | None, str]:
    """(the task a solution file named ``stem`` is for, or None with the reason)."""
    found = [t for t in tasks if t.task_id == stem]
    if not found and (m := SAMPLE_FILE.fullmatch(stem)):
        found = [t for t in tasks if t.level == int(m[1]) and t.metadata.get("problem_id") == int(m[2])]
    elif not found and (m := TASK_FILE.fullmatch(stem)):
        found = [t for t in tasks if t.metadata.get("problem_id") == int(m[1]) and t.name == m[2]]
    if len(found) == 1:
        return found[0], ""
    if found:
        return None, f"ambiguous: {', '.join(t.task_id for t in found)}"
    return None, "no task of --tasks has this file's name (level_L_problem_P_sample_S_kernel, P_Name or a task id)"


def judge_with_progress(sandbox: Sandbox, jobs: list) -> list:
    """``sandbox.evaluate_many(jobs)``, with a line on stderr that shows the batch's elapsed time meanwhile."""
    done = threading.Event()

    def tick() -> None:  # on a terminal one line rewritten every second, else a line every 30 s
        start, tty = time.monotonic(), sys.stderr.isatty()
        while not done.wait(1.0 if tty else 30.0):
            print(f"{chr(13) if tty else ''}judging {len(jobs)} solutions: {time.monotonic() - start:.0f} s",
                  end="" if tty else "\n", file=sys.stderr)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        return sandbox.evaluate_many(jobs)
    finally:
        done.set()
        ticker.join()
        print(file=sys.stderr)


def row_of(path: Path, task, result, baseline: str) -> dict:
    """One JSONL row: the verdict of the solution at ``path`` for ``task``."""
    names = [b for b in BASELINE_ORDER if b in result.baselines_ms or b == baseline]
    speedup = {b: result.speedup_vs(b) if b in result.baselines_ms else result.speedup for b in names}
    return {"task": task.task_id, "file": path.name, "status": result.status, "speedup": speedup,
            "runtime_ms": result.runtime_ms, "baselines_ms": result.baselines_ms or {baseline: result.baseline_ms},
            "max_abs_error": result.max_abs_error, "max_rel_error": result.max_rel_error,
            "feedback": (result.feedback.strip().splitlines() or [""])[0][:200]}


def summary_line(rows: list[dict], cfg: Config) -> str:
    """Correct share and fast_1 (correct and at least as fast as the baseline) over the judged solutions."""
    judged = [r for r in rows if r["status"] != "unmatched"]
    n = max(len(judged), 1)
    correct = sum(r["status"] == "correct" for r in judged)
    fast = {b: sum((r["speedup"].get(b) or 0.0) >= 1.0 for r in judged) for b in BASELINE_ORDER
            if any(b in r["speedup"] for r in judged)}
    fast_text = ", ".join(f"{b}{' (headline)' if b == cfg.baseline else ''} {100 * k / n:.1f}%"
                          for b, k in fast.items())
    return (f"{len(judged)} solutions judged under the {cfg.rules} rules: correct {correct}/{len(judged)} "
            f"({100 * correct / n:.1f}%); fast_1 vs {fast_text or cfg.baseline + ' 0.0%'}; "
            f"{len(rows) - len(judged)} unmatched")


def markdown(rows: list[dict], summary: str, cfg: Config) -> str:
    names = [b for b in BASELINE_ORDER if any(b in r["speedup"] for r in rows)] or [cfg.baseline]
    fmt = lambda x, spec: "" if x is None else format(x, spec)  # noqa: E731
    lines = [f"# Solutions in {cfg.solutions} (tasks: {cfg.tasks}, rules: {cfg.rules}, device: {cfg.device})", "",
             summary, "", "| task | file | status | " + " | ".join(f"speedup vs {b}" for b in names)
             + " | runtime ms | max abs error | feedback |", "|---" * (len(names) + 6) + "|"]
    for r in rows:
        cells = [r["task"] or "", r["file"], r["status"], *(fmt(r["speedup"].get(b), ".2f") for b in names),
                 fmt(r.get("runtime_ms"), ".4g"), fmt(r.get("max_abs_error"), ".2e"), r["feedback"].replace("|", "\\|")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> Path:
    cfg = parse_config(Config, argv)
    if not cfg.tasks or not cfg.solutions:
        raise SystemExit("both --tasks and --solutions are needed")
    folder = Path(cfg.solutions)
    if not folder.is_dir():
        raise SystemExit(f"--solutions {folder}: not a folder")
    files = sorted(folder.glob("*.py"))
    if not files:
        raise SystemExit(f"--solutions {folder}: holds no .py solution files")
    tasks = read_tasks(cfg.tasks)
    if cfg.device is None:
        import torch

        cfg = dataclasses.replace(cfg, device="cuda" if torch.cuda.is_available() else "cpu")
    out = Path(cfg.output_dir or Path("runs/judge_solutions") / folder.resolve().name)

    pairs = [(path, *match(path.stem, tasks)) for path in files]
    matched = [(path, task) for path, task, _ in pairs if task is not None]
    for path, _, why in pairs:
        if why:
            print(f"unmatched: {path.name}: {why}", file=sys.stderr)
    print(f"{len(matched)} of {len(files)} solution files matched {len(tasks)} tasks; judging on {cfg.device} "
          f"under the {cfg.rules} rules", file=sys.stderr)

    sandbox = Sandbox(cfg.device, SandboxConfig(rules=cfg.rules, baseline=cfg.baseline))
    results = iter(judge_with_progress(sandbox, [(task, path.read_text()) for path, task in matched]))
    rows = [row_of(path, task, next(results), cfg.baseline) if task is not None else
            {"task": None, "file": path.name, "status": "unmatched", "speedup": {}, "feedback": why}
            for path, task, why in pairs]

    out.mkdir(parents=True, exist_ok=True)
    with open(out / "judged.jsonl", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    summary = summary_line(rows, cfg)
    (out / "judged.md").write_text(markdown(rows, summary, cfg))
    print((out / "judged.md").read_text())
    return out


if __name__ == "__main__":
    log_to_stderr()
    try:
        main(sys.argv[1:])
    except ConfigError as exc:  # a mistyped option: say so, without a traceback
        raise SystemExit(f"{Path(__file__).name}: {exc}") from None
