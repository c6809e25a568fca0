"""Smoke tests: each training recipe runs two steps in a subprocess and writes what it promises.

The runs use the tiny random policy, the CPU sandbox and built-in tasks, shrunk further by overrides
(2 tasks x 2 trajectories x 2 turns, 8 new tokens). The tiny policy's answers never parse, so every
kernel is a format error and the reward is 0: these tests check the plumbing (metrics, rollouts,
checkpoints, report, exact resumption), and tests/recipes/test_learning.py checks that learning happens.

A command line as a user types it runs in a subprocess: both recipes' two-step runs (``two_steps``, which several
tests read), the resumption from their checkpoint, the two-process check under torchrun and a mistyped option. The
other runs and refusals run the recipe as a script inside the test process (``in_process``, tests/recipes/conftest.py),
which saves each one the imports of a fresh interpreter.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kevin.core.records import load_rollout
from kevin.core.run.loggers import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--model", "tiny", "--backend", "cpu", "--tasks_per_step", "2", "--n_trajectories", "2",
         "--max_new_tokens", "8", "--keep_checkpoints", "0"]
TURNS = {"train_multiturn.py": 2, "train_singleturn.py": 1}  # the single-turn recipe keeps its own default
# one task x 2 trajectories x 1 turn, for runs whose property does not depend on the batch's shape
SMALLEST = ["--model", "tiny", "--backend", "cpu", "--tasks_per_step", "1", "--n_trajectories", "2", "--n_turns", "1",
            "--max_new_tokens", "8", "--keep_checkpoints", "0"]

pytestmark = pytest.mark.timeout(600)  # a run in this process has no subprocess timeout to stop it


def run_recipe(name: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    turns = [] if name == "train_singleturn.py" else ["--n_turns", "2"]
    cmd = [sys.executable, str(ROOT / "recipes" / name), *SMALL, *turns, "--output_dir", str(out), *extra]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


@pytest.fixture(scope="module", params=["train_multiturn.py", "train_singleturn.py"])
def two_steps(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param.removesuffix(".py"))
    run_recipe(request.param, out, "--steps", "2")
    return request.param, out


def test_metrics_have_the_config_at_step_0_and_namespaced_metrics_for_each_step(two_steps):
    _, out = two_steps
    records = read_jsonl(out / "metrics.jsonl")
    assert records[0]["step"] == 0 and records[0]["config"]["steps"] == 2
    steps = [r for r in records if "loss/policy" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        for key in ("reward/score_mean", "reward/return_mean", "loss/policy", "train/grad_norm", "train/lr",
                    "rollout/correct", "time/generation", "time/sandbox", "time/train", "perf/train_tokens_per_s"):
            assert key in r, key
        assert r["time/generation"] > 0 and r["train/tokens"] > 0
        # the rollout's wait on the sandbox alone, and the seconds both worked at once (generation + sandbox - rollout)
        assert r["time/sandbox_alone"] == pytest.approx(max(0.0, r["time/rollout"] - r["time/generation"]))
        assert r["time/overlap"] == pytest.approx(max(0.0, r["time/generation"] + r["time/sandbox"] - r["time/rollout"]))


def test_every_step_saves_its_rollout_with_every_turn(two_steps):
    name, out = two_steps
    turns = TURNS[name]
    for step in (1, 2):
        trajectories = load_rollout(out / "rollouts" / f"step_{step:06d}.jsonl.gz")
        assert len(trajectories) == 2 * 2  # tasks x trajectories
        assert all(len(t.turns) == turns for t in trajectories)
        assert len({t.task_id for t in trajectories}) == 2


def test_resolved_config_checkpoints_and_report_are_written(two_steps):
    _, out = two_steps
    config = json.loads((out / "config.json").read_text())
    assert config["backend"] == "cpu" and config["max_new_tokens"] == 8
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert names == ["step_000001", "step_000002"]
    meta = json.loads((out / "checkpoints" / "step_000002" / "meta.json").read_text())
    assert set(meta["states"]) == {"model", "optimizer", "scheduler", "sampler", "rng", "trainer"}
    assert "| step |" in (out / "report.md").read_text()


@pytest.mark.parametrize("two_steps", ["train_multiturn.py"], indirect=True)  # same code in both recipes
def test_resume_from_step_1_repeats_step_2_exactly(two_steps, tmp_path):
    name, out = two_steps
    resumed = tmp_path / "resumed"
    run_recipe(name, resumed, "--steps", "2", "--resume", str(out / "checkpoints" / "step_000001"))
    original = load_rollout(out / "rollouts" / "step_000002.jsonl.gz")
    again = load_rollout(resumed / "rollouts" / "step_000002.jsonl.gz")
    # the same next batch of tasks, and (RNG restored) the very same sampled tokens
    assert [t.task_id for t in again] == [t.task_id for t in original]
    assert [u.response_ids for t in again for u in t.turns] == [u.response_ids for t in original for u in t.turns]
    a = [r for r in read_jsonl(out / "metrics.jsonl") if r["step"] == 2][0]
    b = [r for r in read_jsonl(resumed / "metrics.jsonl") if r["step"] == 2][0]
    assert {k: a[k] for k in ("loss/policy", "train/tokens", "reward/return_mean")} == \
        {k: b[k] for k in ("loss/policy", "train/tokens", "reward/return_mean")}
    assert [r["step"] for r in read_jsonl(resumed / "metrics.jsonl")] == [2]  # step 1 is not re-run


def _debug_lines(proc: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"debug/')]


@pytest.mark.parametrize("two_steps", ["train_multiturn.py"], indirect=True)
def test_two_processes_shard_the_tasks_and_give_the_loss_and_gradient_of_one(two_steps, tmp_path, in_process):
    # The same saved batch (2 tasks) evaluated by 1 process and by 2 (torchrun, gloo on the CPU): recipes/check_sharding.py
    _, out = two_steps
    fixed = ["--rollout_file", str(out / "rollouts" / "step_000001.jsonl.gz")]
    proc = in_process("check_sharding.py", *SMALL, "--n_turns", "2", "--output_dir", str(tmp_path / "one"), *fixed)
    assert proc.returncode == 0, proc.stderr[-4000:]
    one = _debug_lines(proc)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29731",
           str(ROOT / "recipes" / "check_sharding.py"), *SMALL, "--n_turns", "2", "--output_dir", str(tmp_path / "two"),
           *fixed]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    two = _debug_lines(proc)
    assert [r["debug/processes"] for r in one + two] == [1, 2, 2]
    assert [len(r["debug/tasks"]) for r in two] == [1, 1]  # one task per process
    assert set(two[0]["debug/tasks"]) | set(two[1]["debug/tasks"]) == set(one[0]["debug/tasks"])
    for key in ("debug/loss", "debug/logprob_mean", "debug/grad_norm"):
        assert two[0][key] == pytest.approx(one[0][key], rel=1e-4, abs=1e-6), key
    assert one[0]["debug/grad_norm"] > 0  # a real gradient, not 0 == 0
    assert not (tmp_path / "one").exists() and not (tmp_path / "two").exists()  # a check writes no run


def load_recipe(name: str):
    """The recipe module ``recipes/<name>`` (imported, not run)."""
    import importlib

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(f"recipes.{name.removesuffix('.py')}")


@pytest.mark.parametrize("name", ["train_multiturn.py", "train_singleturn.py", "check_sharding.py"])
def test_every_config_field_has_a_docstring_and_a_command_line_override(name):
    import dataclasses

    from kevin.core.run.cli import field_docs, parse_config

    module = load_recipe(name)
    docs = field_docs(module.Config)
    assert [f for f, d in docs.items() if not d] == []
    fields = dataclasses.fields(module.Config)  # each default, written back as text, parses to itself
    argv = [a for f in fields for a in (f"--{f.name}", "none" if f.default is None else str(f.default))]
    cfg = parse_config(module.Config, argv)
    for field in fields:
        assert getattr(cfg, field.name) == field.default, field.name


def test_the_paper_defaults_are_the_config_defaults():
    module = load_recipe("train_multiturn.py")
    c = module.Config()
    assert (c.tasks_per_step, c.n_trajectories, c.n_turns) == (8, 16, 4)
    assert (c.gamma, c.reward_mode, c.correctness_weight, c.kl_coef) == (0.4, "sum", 0.3, 0.0)
    assert (c.clip_low, c.clip_high, c.temperature, c.lr, c.warmup_ratio) == (0.2, 0.28, 0.9, 2e-6, 0.03)
    assert (c.n_minibatches, c.grad_clip, c.advantage_baseline) == (2, 0.05, "task")  # one group per task
    # 16k per response, 22k after step 30: step 29 (0-based) is the 30th at 16k, step 30 the first at 22k
    assert [module.response_budget(c, s) for s in (0, 29, 30, 39)] == [16384, 16384, 22528, 22528]


def test_a_mistyped_option_stops_the_recipe_with_a_message_before_any_work(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "recipes" / "train_multiturn.py"), "--stepz", "2",
                           "--output_dir", str(tmp_path / "run")], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "unknown option --stepz" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()


TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {body}


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
'''


def test_a_loaded_task_that_a_constant_passes_is_dropped_before_training(tmp_path, in_process):
    level = tmp_path / "tasks" / "level1"
    level.mkdir(parents=True)
    (level / "1_Relu.py").write_text(TASK.format(body="torch.relu(x)"))
    # a softmax over a dimension of size 1 is all ones, whatever the input (a KernelBench level-2 pattern)
    (level / "2_Softmax_of_a_mean.py").write_text(TASK.format(body="torch.softmax(x.mean(1, keepdim=True), dim=1)"))
    proc = in_process("train_singleturn.py", *SMALLEST, "--output_dir", str(tmp_path / "out"), "--steps", "1",
                      "--tasks", str(tmp_path / "tasks"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "calibration: dropped 1 task(s) that a fake kernel passes: ['kb-L1-2']" in proc.stdout


@pytest.fixture(scope="module")
def static_raised(tmp_path_factory, in_process):
    """Two multi-turn steps sampled in static mode, the response budget raised from step 2 on by a --config file."""
    out = tmp_path_factory.mktemp("static_raised")
    (out / "raise.yaml").write_text("raise_max_new_tokens_by: 1.5\nraise_max_new_tokens_at: 1\n")
    proc = in_process("train_multiturn.py", *SMALL, "--n_turns", "2", "--output_dir", str(out / "out"), "--steps", "2",
                      "--generation_mode", "static", "--config", str(out / "raise.yaml"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc, out / "out"


def test_static_sampling_with_its_memory_released_after_each_rollout_trains_two_steps(static_raised):
    # step 2's rollout samples after step 1's release: the cache is allocated again (on the CPU: static mode,
    # no compiled step)
    proc, out = static_raised
    assert "MiB of sampling memory for training (after every rollout)" in proc.stdout
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line).get("step") for line in lines][-2:] == [1, 2]


def test_the_sampling_memory_is_kept_when_release_is_switched_off(tmp_path, in_process):
    proc = in_process("train_multiturn.py", *SMALLEST, "--output_dir", str(tmp_path / "out"), "--steps", "1",
                      "--generation_mode", "static", "--release_sampling_memory", "false")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "sampling memory" not in proc.stdout


def test_checkpoint_every_zero_writes_no_checkpoint_not_even_after_the_last_step(tmp_path, in_process):
    out = tmp_path / "out"
    proc = in_process("train_multiturn.py", *SMALLEST, "--output_dir", str(out), "--steps", "1",
                      "--checkpoint_every", "0")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert not list((out / "checkpoints").glob("step_*")) and (out / "report.md").is_file()


def test_the_response_budget_is_raised_after_the_given_step(static_raised):
    # 8 tokens in step 1, 8 * 1.5 = 12 from step 2 on; the tiny policy rarely stops, so most responses fill their budget
    # (the schedule comes from a --config file: the file's options reach the run)
    _, out = static_raised
    assert json.loads((out / "config.json").read_text())["raise_max_new_tokens_by"] == 1.5
    longest = [max(len(t.response_ids) for tr in load_rollout(out / "rollouts" / f"step_{k:06d}.jsonl.gz")
                   for t in tr.turns) for k in (1, 2)]
    assert longest == [8, 12]


def _recipe_raw(in_process, name: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """``name`` with the small options, in this process (tests/recipes/conftest.py); not checked for success."""
    return in_process(name, *SMALL, "--output_dir", str(out), *extra)


def test_a_fresh_run_into_an_earlier_runs_directory_is_refused_and_changes_nothing(two_steps, in_process):
    name, out = two_steps
    before = {p: p.read_bytes() for p in [out / "config.json", out / "metrics.jsonl"]}
    proc = _recipe_raw(in_process, name, out, "--steps", "1", "--seed", "7")
    assert proc.returncode != 0 and "holds an earlier run" in proc.stderr and "--overwrite" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_000001", "step_000002"]


@pytest.mark.parametrize("two_steps", ["train_multiturn.py"], indirect=True)
def test_overwrite_deletes_the_earlier_run_before_starting_afresh(two_steps, tmp_path, in_process):
    import shutil

    name, out = two_steps
    copy = shutil.copytree(out, tmp_path / "run")
    proc = in_process(name, *SMALLEST, "--output_dir", str(copy), "--steps", "1", "--overwrite")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert sorted(p.name for p in (copy / "checkpoints").iterdir()) == ["step_000001"]
    assert sorted(p.name for p in (copy / "rollouts").iterdir()) == ["step_000001.jsonl.gz"]
    assert [r["step"] for r in read_jsonl(copy / "metrics.jsonl")] == [0, 1]


def test_resume_latest_continues_with_the_runs_own_options(two_steps, tmp_path, in_process):
    import shutil

    name, out = two_steps
    copy = shutil.copytree(out, tmp_path / "run")
    saved = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**saved, "gamma": 0.2}))  # as if it had started with --gamma 0.2
    proc = _recipe_raw(in_process, name, copy, "--steps", "3", "--resume", "latest",
                       *(["--n_turns", "2"] if TURNS[name] == 2 else []))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "'steps': (2, 3)" in proc.stdout and "gamma" not in proc.stdout.split("options changed since")[1][:200]
    assert json.loads((copy / "config.json").read_text())["gamma"] == 0.2
    assert [r["step"] for r in read_jsonl(copy / "metrics.jsonl")][-1] == 3


def test_a_bad_reward_option_stops_the_recipe_before_any_work(tmp_path, in_process):
    for bad in (["--gamma", "1.5"], ["--loss_aggregation", "foo"], ["--micro_batch_size", "0"], ["--top_p", "0"]):
        proc = _recipe_raw(in_process, "train_multiturn.py", tmp_path / "run", *bad)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, (bad, proc.stderr[-2000:])
        assert not (tmp_path / "run").exists()
    assert "gamma must be in [0, 1], got 1.5" in _recipe_raw(in_process, "train_multiturn.py", tmp_path / "run",
                                                              "--gamma", "1.5").stderr


def test_help_lists_the_default_models_preset_and_the_field_docstrings(in_process):
    proc = in_process("train_multiturn.py", "--help")
    text = " ".join(proc.stdout.split())  # argparse wraps the lines
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "(default: runs/starter)" in text and "(default: cpu)" in text  # the starter's preset
    assert "discount of later turns' scores in a turn's return (paper: 0.4) (default: 0.4)" in text
    assert "--config FILE.yaml" in text


def test_an_empty_task_file_stops_training_with_a_message(tmp_path, in_process):
    (tmp_path / "empty.jsonl").write_text("")
    proc = _recipe_raw(in_process, "train_multiturn.py", tmp_path / "run", "--tasks", str(tmp_path / "empty.jsonl"))
    assert proc.returncode != 0 and "no tasks loaded" in proc.stderr and "Traceback" not in proc.stderr


def test_the_training_sandbox_times_each_kernel_within_the_recipes_timing_budget(tmp_path, in_process, monkeypatch):
    # a timing holds the device alone, on the rollout's critical path: the recipe's budget, not the sandbox's 10 s
    import kevin.sandbox

    configs, real = [], kevin.sandbox.Sandbox
    monkeypatch.setattr(kevin.sandbox, "Sandbox", lambda device, config: configs.append(config) or real(device, config))
    proc = in_process("train_multiturn.py", *SMALLEST, "--output_dir", str(tmp_path / "out"), "--steps", "1",
                      "--timing_budget_s", "0.25")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [c.timing_budget_s for c in configs] == [0.25]
