"""The run directory: what a recipe writes there (config, metrics, report, checkpoints, rollouts), and the
refusal to mix a fresh run with an earlier one's files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from kevin.core.run.loggers import markdown_table, read_jsonl


REPORT_KEYS = ("step", "reward/score_mean", "reward/return_mean", "rollout/correct", "loss/policy", "train/grad_norm",
               "time/generation", "time/sandbox", "time/train")


def write_run_report(out_dir: str | os.PathLike, *, title: str, summary: str, checkpoint: Any = None,
                     keys: Iterable[str] = REPORT_KEYS) -> Path:
    """Write ``out_dir/report.md``: a title, a summary line and one table row per step of ``metrics.jsonl``.

    Only step records (those with ``loss/policy``) are tabulated. When no step earned any reward, the report
    says so, since a table of zeros otherwise reads like a bug.
    """
    out = Path(out_dir)
    records = [r for r in read_jsonl(out / "metrics.jsonl") if "loss/policy" in r]
    lines = [f"# {title}: {out}", "", f"{len(records)} steps; {summary}", "", markdown_table(records, keys), ""]
    if records and all(not r.get("reward/score_max") for r in records):
        lines += ["Every reward was 0: no kernel was correct. That is expected of the tiny model and of randomly",
                  "initialised models, whose output never parses; recipes/teach_credit_assignment.py shows learning",
                  "on the CPU.", ""]
    lines += [f"Latest checkpoint: {checkpoint}", "",
              "Files: config.json, metrics.jsonl, rollouts/step_*.jsonl.gz, checkpoints/step_*/"]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


RUN_FILES = ("config.json", "metrics.jsonl", "report.md", "turns.png", "equal_budget.png", "checkpoints", "rollouts",
             "evaluation")
"""What a recipe writes into its output directory (files and folders; ``evaluation``: evaluate.py's default output
for a training run)."""


def earlier_run(out_dir: str | os.PathLike, names: Iterable[str] = RUN_FILES) -> list[str]:
    """The ``names`` (default `RUN_FILES`) that ``out_dir`` holds already: an earlier run's, which a fresh run would
    overwrite or mix with its own."""
    out = Path(out_dir)
    return [name for name in names if (out / name).exists() or (out / name).is_symlink()]


def delete_earlier_run(out_dir: str | os.PathLike, names: Iterable[str] = RUN_FILES) -> list[str]:
    """Delete an earlier run's ``names`` (default `RUN_FILES`) from ``out_dir`` (nothing else in it) and return those
    it held."""
    import shutil

    out = Path(out_dir)
    names = earlier_run(out, names)
    for name in sorted(names, key=lambda n: n == "config.json"):  # the config last: a failure leaves it
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()  # a file, or a link (to a scratch disk, say): the link goes, what it points to stays
    return names


def earlier_run_message(out_dir: str | os.PathLike, names: list[str], *, resumable: bool) -> str:
    """What a recipe says when it refuses to start a fresh run over an earlier one."""
    how = "--resume latest to continue it, " if resumable else ""
    return (f"{out_dir} holds an earlier run ({', '.join(names)}); use {how}--overwrite to delete it and start "
            f"afresh, or another --output_dir")


def claim_output_dir(accelerator: Any, out_dir: str | os.PathLike, *, fresh: bool, overwrite: bool,
                     broadcast: Any) -> None:
    """Before a fresh run (``fresh``) writes into ``out_dir``: exit with `earlier_run_message` when it holds an earlier
    run, or with ``overwrite`` delete that run's files (the main process). The main process looks and decides for every
    process (``broadcast``: accelerate's ``broadcast_object_list``, passed in so that this module imports no
    accelerate), so that all of them exit or go on together; all wait until the files are gone."""
    main = accelerator.is_main_process
    earlier = broadcast([earlier_run(out_dir) if fresh and main else []])[0]
    if earlier and not overwrite:  # a fresh run would mix with it
        raise SystemExit(earlier_run_message(out_dir, earlier, resumable=True))
    if earlier and main:
        accelerator.print(f"--overwrite: deleted {', '.join(delete_earlier_run(out_dir))} of the earlier run in {out_dir}")
    accelerator.wait_for_everyone()
