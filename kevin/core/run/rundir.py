"""The run directory: `RunDir`, what a recipe writes there (config, metrics, rollouts, checkpoints, report), the
refusal to mix a fresh run with an earlier one's files, resuming from a checkpoint, and rebuilding a trained model.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from kevin.core.eval.plots import PLOT_FILES
from kevin.core.run.checkpoint import (SHARDED, checkpoint_path, latest_checkpoint, load_checkpoint,
                                       load_sharded_state, load_sharded_weights, prune_checkpoints,
                                       restore_training_state, rng_state, save_checkpoint, save_sharded_checkpoint,
                                       training_state)
from kevin.core.run.loggers import (AccelerateLogger, JsonlLogger, MultiLogger, NullLogger, drop_records_from,
                                    markdown_table, read_jsonl)


REPORT_KEYS = ("step", "reward/score_mean", "reward/return_mean", "rollout/correct", "loss/policy", "train/grad_norm",
               "time/generation", "time/sandbox", "time/sandbox_alone", "time/train")


def write_run_report(out_dir: str | os.PathLike, *, title: str, summary: str, checkpoint: Any = None,
                     keys: Iterable[str] = REPORT_KEYS) -> Path:
    """Write ``out_dir/report.md``: a title, a summary line, one table row per step of ``metrics.jsonl`` and the
    plots over the steps (`kevin.core.eval.plots`: PNGs beside it, each embedded).

    Only step records (those with ``loss/policy``) are tabulated and plotted. When no step earned any reward, the
    report says so, since a table of zeros otherwise reads like a bug. The report names the panels it had nothing
    to draw in; a plot file of an earlier report that this one does not draw is deleted, so the
    directory holds exactly the plots the report embeds.
    """
    out = Path(out_dir)
    records = [r for r in read_jsonl(out / "metrics.jsonl") if "loss/policy" in r]
    lines = [f"# {title}: {out}", "", f"{len(records)} steps; {summary}", "", markdown_table(records, keys), ""]
    if records and all(not r.get("reward/score_max") for r in records):
        lines += ["Every reward was 0: no kernel was correct. That is expected of the tiny model and of randomly",
                  "initialised models, whose output never parses; recipes/teach_credit_assignment.py shows learning",
                  "on the CPU.", ""]
    lines += _plot_lines(records, out)
    lines += [f"Latest checkpoint: {checkpoint}", "",
              "Files: config.json, metrics.jsonl, plot_*.png, rollouts/step_*.jsonl.gz, checkpoints/step_*/"]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _plot_lines(records: list[dict[str, Any]], out: Path) -> list[str]:
    """Draw the step plots into ``out`` and return the report's lines that embed them (a plotting failure is
    reported there rather than raised: the run's results are already saved)."""
    from kevin.core.eval.plots import PANELS, write_step_plots

    if not records:
        written, problem = [], ""
    else:
        try:
            written, problem = write_step_plots(records, out), ""
        except ImportError as exc:
            written, problem = [], f"Plots not drawn: {exc} (install the train extra for matplotlib)."
        except Exception as exc:  # noqa: BLE001 - the report of a finished run is written whatever the plots do
            written, problem = [], f"Plots not drawn: {type(exc).__name__}: {exc}"
    names = {path.name for _, path in written}
    for name in PLOT_FILES:
        if name not in names and (out / name).is_file():
            (out / name).unlink()
    lines = ["## Over the steps", ""] if written else []
    for panel, path in written:
        lines += [f"![{panel.title}]({path.name})", ""]
    drawn = {panel.name for panel, _ in written}
    missing = [title for name, (title, _) in PANELS.items() if name not in drawn]
    if records and not problem and missing:
        lines += [f"Not plotted, nothing to draw in any step (not logged, or no correct kernel for the speedup): "
                  f"{'; '.join(missing)}.", ""]
    return lines + ([problem, ""] if problem else [])


RUN_FILES = ("config.json", "metrics.jsonl", "report.md", "turns.png", "equal_budget.png", "checkpoints", "rollouts",
             "evaluation", *PLOT_FILES)
"""What a recipe writes into its output directory (files and folders; ``evaluation``: evaluate.py's default output
for a training run; the ``plot_*.png`` of `write_run_report`)."""


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


def earlier_run_message(out_dir: str | os.PathLike, names: list[str], *, resume: str = "--resume latest") -> str:
    """What a recipe says when it refuses to start a fresh run over an earlier one; ``resume``: its option that
    continues the run instead."""
    how = f"{resume} to continue it, " if resume else ""
    return (f"{out_dir} holds an earlier run ({', '.join(names)}); use {how}--overwrite to delete it and start "
            f"afresh, or another --output_dir")


def check_same_settings(saved: str | os.PathLike, settings: dict, *, ignore: tuple[str, ...] = ()) -> None:
    """Exit, naming each difference, unless the settings in the JSON file ``saved`` equal ``settings`` (except the
    keys in ``ignore``): a run continued with other settings would mix two runs' turns."""
    before = json.loads(Path(saved).read_text())
    differ = sorted(k for k in set(before) | set(settings) if k not in ignore and before.get(k) != settings.get(k))
    if differ:
        raise SystemExit(f"{saved}: the stopped run had other settings, so it cannot be continued with these: " +
                         "; ".join(f"{k} {before.get(k)!r} then, {settings.get(k)!r} now" for k in differ))


@dataclass(frozen=True)
class RunConfig:
    """The options of a training run's directory (`RunDir`): a training recipe's ``Config`` extends it."""

    output_dir: str = "runs/run"
    """metrics.jsonl, config.json, rollouts/, checkpoints/, report.md go here"""
    resume: str = ""
    """"" fresh run; "latest" the newest checkpoint in output_dir; or a checkpoint directory"""
    overwrite: bool = False
    """delete an earlier run's files in output_dir and start afresh (without it the recipe refuses to mix them)"""
    checkpoint_every: int = 1
    """save a checkpoint every this many steps (and after the last); 0: never (the run cannot be resumed)"""
    keep_checkpoints: int = 2
    """how many recent checkpoints to keep (0: all)"""
    tracker: str = "none"
    """also log to this accelerate tracker: none, tensorboard, trackio, wandb, ..."""
    peak_flops: float = 989e12
    """peak bf16 FLOP/s of one device, for the MFU estimate (H100/H200 dense: 989e12)"""


class RunDir:
    """One run's output directory, and everything a recipe does with it.

    ``config.json`` (the resolved config), ``metrics.jsonl`` (the config at step 0, then one record per step, also
    sent to an accelerate tracker), ``rollouts/step_N.jsonl.gz``, ``checkpoints/step_N/`` (`training_state`, written
    atomically) and ``report.md``. With an ``accelerator`` every process calls every method: the main process looks,
    decides and writes, the others follow (``files`` are the names an earlier run is recognised by, `RUN_FILES`).
    """

    def __init__(self, path: str | os.PathLike, accelerator: Any = None, *, files: Iterable[str] = RUN_FILES):
        self.path, self.acc, self.files = Path(path), accelerator, tuple(files)
        self.is_main = accelerator is None or accelerator.is_main_process
        self.checkpoints = self.path / "checkpoints"
        self._logger: Any = NullLogger()

    def _print(self, text: str) -> None:
        if self.is_main:
            print(text, flush=True)

    def _wait(self) -> None:
        if self.acc is not None:
            self.acc.wait_for_everyone()

    def claim(self, *, fresh: bool, overwrite: bool, resume: str = "--resume latest") -> None:
        """Before a ``fresh`` run writes here: exit with `earlier_run_message` when the directory holds an earlier run,
        or, with ``overwrite``, delete that run's files first. Every process exits or goes on alike."""
        earlier = earlier_run(self.path, self.files) if fresh and self.is_main else []
        if self.acc is not None:
            from accelerate.utils import broadcast_object_list
            earlier = broadcast_object_list([earlier])[0]
        if earlier and not overwrite:
            raise SystemExit(earlier_run_message(self.path, earlier, resume=resume))
        if earlier and self.is_main:
            self._print(f"--overwrite: deleted {', '.join(delete_earlier_run(self.path, self.files))} of the earlier "
                        f"run in {self.path}")
        self._wait()

    def resume(self, resume: str, *, model: Any, optimizer: Any, scheduler: Any, sampler: Any) -> int:
        """Load the checkpoint ``resume`` names ("latest": the newest here; else a checkpoint directory) INTO the given
        objects (`restore_training_state`, this process's RNG included) and return its step; 0 when ``resume`` is ""."""
        if not resume:
            return 0
        where = latest_checkpoint(self.checkpoints) if resume == "latest" else Path(resume)
        if where is None:
            raise SystemExit(f"--resume latest: no checkpoint under {self.checkpoints}")
        rank = 0 if self.acc is None else self.acc.process_index
        state = load_checkpoint(where)
        sharded = self._check_sharding(where, state["meta"].get(SHARDED))
        if sharded:
            load_sharded_state(where, model=model, optimizer=optimizer)
        step = restore_training_state(state, model=None if sharded else model, optimizer=None if sharded else optimizer,
                                      scheduler=scheduler, sampler=sampler, rank=rank)
        self._print(f"resumed from {where} at step {step}")
        return step

    def _sharded(self) -> bool:
        """Whether this run's model is sharded (FSDP), so its checkpoints are `save_sharded_checkpoint`'s."""
        from kevin.core.run.learner import is_sharded

        return self.acc is not None and is_sharded(self.acc)

    def _check_sharding(self, where: Path, sharded: dict | None) -> bool:
        """Whether the checkpoint at ``where`` (its meta's ``sharded`` entry) is sharded; exits when this run cannot
        resume it: a sharded one resumes with as many processes as wrote it, under FSDP; a replicated one not under
        FSDP."""
        world = 1 if self.acc is None else self.acc.num_processes
        if sharded and (not self._sharded() or sharded["processes"] != world):
            raise SystemExit(f"{where} holds model and optimizer shards of {sharded['processes']} FSDP processes: "
                             f"resume it under FSDP with {sharded['processes']} processes (this run: {world}"
                             f"{', FSDP' if self._sharded() else ', not sharded'})")
        if not sharded and self._sharded():
            raise SystemExit(f"{where} is a checkpoint of a replicated run (one process or DDP): it does not resume "
                             "under FSDP")
        return bool(sharded)

    def start(self, config: Any, *, step: int = 0, tracker: str = "none", project: str = "kevin") -> None:
        """Open the run for logging after ``step`` (0: a fresh run): write ``config.json`` (a resumed run prints the
        options changed since), drop the records after ``step`` from ``metrics.jsonl`` (a crashed run's), log the
        config at step 0 of a fresh run, and start the accelerate ``tracker`` unless "none"."""
        values = dataclasses.asdict(config)
        if self.is_main:
            saved_path = self.path / "config.json"
            if step and saved_path.is_file():
                saved = json.loads(saved_path.read_text())
                changed = {k: (saved[k], v) for k, v in values.items() if k in saved and saved[k] != v}
                self._print(f"options changed since (old, new): {changed}")
            self.path.mkdir(parents=True, exist_ok=True)
            saved_path.write_text(json.dumps(values, indent=1))
            if step:
                drop_records_from(self.path / "metrics.jsonl", step + 1)
            trackers = [AccelerateLogger(self.acc)] if tracker != "none" else []
            self._logger = MultiLogger([JsonlLogger(self.path / "metrics.jsonl"), *trackers])
            if not step:
                self.log({"config": values}, step=0)
        if tracker != "none":
            self.acc.init_trackers(project, config={k: str(v) for k, v in values.items()})

    def log(self, metrics: dict[str, Any], step: int) -> None:
        """One record of ``metrics`` at ``step`` (the main process's; the others' are dropped)."""
        self._logger.log(metrics, step=step)

    def log_step(self, step: int, trajectories: list, everything: list, rewarded: Any, updates: list[dict], *,
                 started: float, rolled_out: float, trained: float, n_params: int, peak_flops: float) -> None:
        """Save a training step's rollout (``everything``: every process's trajectories, as
        `kevin.core.run.shards.gather_trajectories` gives them on every process) and log its record: `metrics_dict` of
        the rollout; each update's statistics averaged over the updates and the processes; the scores and returns
        (``rewarded``: `kevin.rewards.samples.RewardedRollout` of ``everything``); samples and tokens; the seconds of
        generation, sandbox (summed over this process's ``trajectories``' turns), rollout and training (``started``,
        ``rolled_out``, ``trained``: ``time.perf_counter()`` readings; the slowest process's), the seconds in which both
        worked (``time/overlap``, `kevin.core.rollout.overlap_seconds`) and in which the rollout waited on the sandbox
        alone (``time/sandbox_alone``: rollout minus generation), and the throughput. Every process calls it."""
        import torch

        from kevin.core.eval.metrics import metrics_dict
        from kevin.core.rollout import overlap_seconds
        from kevin.rewards.telemetry import rejection_shares

        acc, dev = self.acc, self.acc.device
        losses = {k: acc.reduce(torch.stack([u[k] for u in updates]).mean().to(dev), "mean").item() for k in updates[0]}
        seconds = acc.reduce(torch.tensor([sum(u.generation_s for t in trajectories for u in t.turns),
                                           sum(u.evaluation_s for t in trajectories for u in t.turns),
                                           rolled_out - started, trained - rolled_out], device=dev), "max").tolist()
        tokens = float(sum(len(s.prompt_ids) + len(s.response_ids) for s in rewarded.samples))
        scores, returns = rewarded.scores.float(), rewarded.returns.float()
        self.save_rollout(everything, step)
        self.log({**metrics_dict(everything), **rejection_shares(t.result for tr in everything for t in tr.turns), **losses,
                  "reward/score_mean": scores.mean().item(), "reward/score_max": scores.max().item(),
                  "reward/return_mean": returns.mean().item(), "reward/return_std": returns.std().item(),
                  "train/samples": float(scores.numel()), "train/tokens": tokens,
                  "time/generation": seconds[0], "time/sandbox": seconds[1], "time/rollout": seconds[2],
                  "time/overlap": overlap_seconds(*seconds[:3]), "time/sandbox_alone": max(0.0, seconds[2] - seconds[0]),
                  "time/train": seconds[3], "time/step": time.perf_counter() - started,
                  "perf/train_tokens_per_s": tokens / seconds[3],
                  "perf/mfu": 6 * n_params * tokens / seconds[3] / (peak_flops * acc.num_processes),
                  **({"perf/peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30}
                     if torch.cuda.is_available() else {})}, step=step)

    def save_rollout(self, trajectories: Any, step: int) -> Path:
        """``rollouts/step_<step>.jsonl.gz``: every trajectory with every verdict (re-scorable, `kevin.rewards.rescore`)."""
        from kevin.core.records import save_rollout

        path = self.path / "rollouts" / f"step_{step:06d}.jsonl.gz"
        return save_rollout(trajectories, path) if self.is_main else path

    def checkpoint(self, step: int, *, keep: int, model: Any, optimizer: Any, scheduler: Any, sampler: Any) -> None:
        """Save `training_state` (trainable weights, optimizer, scheduler, sampler, every process's RNG) as
        ``checkpoints/step_<step>`` and keep the newest ``keep`` (0: all). Under FSDP the weights and optimizer are
        every process's shards (`save_sharded_checkpoint`)."""
        rngs = [rng_state()]
        if self.acc is not None:
            from accelerate.utils import gather_object
            rngs = gather_object(rngs)
        if self._sharded():  # every process writes its shards
            rest = {"scheduler": scheduler.state_dict(), "sampler": sampler.state_dict(), "rng": rngs,
                    "trainer": {"step": int(step)}}
            save_sharded_checkpoint(checkpoint_path(self.checkpoints, step), rest, model=model, optimizer=optimizer,
                                    is_main=self.is_main, processes=self.acc.num_processes, meta={"step": step})
            if self.is_main:
                prune_checkpoints(self.checkpoints, keep)
        elif self.is_main:
            state = training_state(model=model, optimizer=optimizer, scheduler=scheduler, sampler=sampler, rngs=rngs,
                                   step=step)
            save_checkpoint(checkpoint_path(self.checkpoints, step), state, meta={"step": step})
            prune_checkpoints(self.checkpoints, keep)
        self._wait()

    def report(self, *, title: str, summary: str) -> Path:
        """Write ``report.md`` (`write_run_report`) and return its path."""
        path = self.path / "report.md"
        if self.is_main:
            write_run_report(self.path, title=title, summary=summary, checkpoint=latest_checkpoint(self.checkpoints))
        return path

    def close(self) -> None:
        """Close the loggers and, in a launch of several processes, the process group (a process that exits with one
        open can abort while its communication threads are torn down). A single process leaves alone any group it
        has: vLLM's engine creates one of its own in this process and keeps using it."""
        self._logger.close()
        if self.acc is not None and self.acc.num_processes > 1:
            self.acc.state.destroy_process_group()

    # ------------------------------------------------------------------ a finished run, read back

    @classmethod
    def find(cls, name: str | os.PathLike) -> tuple["RunDir", Path] | None:
        """(run, checkpoint) when ``name`` is a training run's directory (its latest checkpoint) or one of its
        ``checkpoints/step_N`` directories; None otherwise (a hub id, a ``from_pretrained`` directory)."""
        path = Path(name)
        ckpt = latest_checkpoint(path / "checkpoints") if (path / "checkpoints").is_dir() else path
        if ckpt is None or not (ckpt / "meta.json").is_file() or not (ckpt.parent.parent / "config.json").is_file():
            return None
        return cls(ckpt.parent.parent), ckpt

    def config(self) -> dict[str, Any]:
        """The run's saved ``config.json``."""
        return json.loads((self.path / "config.json").read_text())

    def trained_model(self, checkpoint: str | os.PathLike, *, device: Any, merge: bool = True) -> tuple[Any, Any]:
        """(model, tokenizer) of ``checkpoint``: the run's model rebuilt by `kevin.core.policy.models.load_model` from
        its ``config.json`` (LoRA-wrapped when it was trained so), the checkpoint's trained weights loaded on top and
        LoRA merged (without ``merge``: the peft model, whose adapter `kevin.core.run.export` saves); in eval mode,
        without gradients."""
        from kevin.core.policy.models import load_model

        saved = self.config()
        model, tokenizer = load_model(saved["model"], device=device, seed=saved.get("seed", 0),
                                      bf16=saved.get("bf16", True),
                                      lora_rank=saved.get("lora_rank", 0) if saved.get("lora") else 0)
        sharded = SHARDED in load_checkpoint(checkpoint, names=[])["meta"]
        weights = (load_sharded_weights(checkpoint, model) if sharded
                   else load_checkpoint(checkpoint, names=["model"])["model"])
        missing = [n for n, p in model.named_parameters() if p.requires_grad and n not in weights]
        if missing:
            raise ValueError(f"{checkpoint} lacks trained weights {missing[:3]} of the model its run's config.json "
                             "describes")
        model.load_state_dict(weights, strict=False)
        model = model.merge_and_unload() if saved.get("lora") and merge else model
        return model.requires_grad_(False).eval(), tokenizer
