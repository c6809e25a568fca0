"""FSDP2 on the CPU: two gloo processes launched as ``accelerate launch --config_file
recipes/configs/accelerate/fsdp2.yaml`` would launch them (the environment comes from accelerate's own launcher code)
give the loss and gradient norm of one replicated process, and a sharded run's checkpoint resumes to the same next
step.

The tiny random policy earns no reward, so its advantages and gradient are 0; `recipes/check_sharding.py` scores the
turns by a fixed function of their tokens instead, and the resumed run trains with a KL term and weight decay, which
move the weights (and so give step 2 a gradient) without any reward. The batches are uneven on purpose: 1 task x 3
trajectories on 2 processes, 1 and 2 trajectories each, in micro-batches of 2 (one process pads a micro-batch).

FSDP2's CPU offload (recipes/configs/accelerate/fsdp2_offload.yaml) is not run here: its shards are pinned host
memory (``_fsdp_param.py``: ``local_tensor.cpu().pin_memory()``), which torch 2.13 refuses without an accelerator.
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
CONFIGS = ROOT / "recipes" / "configs" / "accelerate"
UNEVEN = ["--model", "tiny", "--backend", "cpu", "--tasks_per_step", "1", "--n_trajectories", "3", "--n_turns", "2",
          "--max_new_tokens", "8", "--micro_batch_size", "2", "--keep_checkpoints", "0"]

pytestmark = pytest.mark.timeout(600)


def launch_env(config: str, processes: int) -> dict:
    """The environment ``accelerate launch --config_file <config> --num_processes <processes>`` gives its processes
    (accelerate's ``prepare_multi_gpu_env``), minus the rendezvous that torchrun sets itself."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    args = launch_command_parser().parse_args(["--config_file", str(CONFIGS / config), "--num_processes",
                                               str(processes), "recipes/train_multiturn.py"])
    env = prepare_multi_gpu_env(_validate_launch_command(args)[0])
    return {k: v for k, v in env.items() if k.startswith(("ACCELERATE_", "FSDP_"))}


def free_port() -> int:
    """A TCP port that no one listens on now (for torchrun's rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(script: str, processes: int, *args: str, config: str | None = None) -> subprocess.CompletedProcess:
    """``recipes/<script>`` on ``processes`` gloo processes, with ``config``'s launch environment."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           **(launch_env(config, processes) if config else {})}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--master_port",
           str(free_port()), str(ROOT / "recipes" / script), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_the_shipped_fsdp_configs_launch_fsdp2_and_the_others_do_not():
    assert {name: launch_env(name, 2).get("FSDP_VERSION") for name in ("fsdp2.yaml", "fsdp2_offload.yaml")} == \
        {"fsdp2.yaml": "2", "fsdp2_offload.yaml": "2"}
    assert launch_env("fsdp2_offload.yaml", 2)["FSDP_OFFLOAD_PARAMS"] == "true"
    assert launch_env("fsdp2.yaml", 2)["FSDP_OFFLOAD_PARAMS"] == "false"
    from accelerate.commands.config.config_args import load_config_from_file

    assert {name: str(load_config_from_file(str(CONFIGS / name)).distributed_type) for name in
            ("single_gpu.yaml", "ddp.yaml")} == {"single_gpu.yaml": "DistributedType.NO",
                                                 "ddp.yaml": "DistributedType.MULTI_GPU"}


@pytest.fixture(scope="module")
def rollout_file(tmp_path_factory, in_process):
    """A saved rollout of 1 task x 3 trajectories x 2 turns (one step of the tiny policy, one process)."""
    out = tmp_path_factory.mktemp("rollout")
    proc = in_process("train_multiturn.py", *UNEVEN, "--steps", "1", "--output_dir", str(out / "run"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out / "run" / "rollouts" / "step_000001.jsonl.gz"


def _debug(proc: subprocess.CompletedProcess) -> list[dict]:
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"debug/')]


@pytest.mark.parametrize("lora", [[], ["--lora", "--lora_rank", "4"]], ids=["full", "lora"])
def test_two_fsdp2_processes_give_the_loss_and_gradient_norm_of_one_replicated_process(rollout_file, tmp_path,
                                                                                       in_process, lora):
    fixed = [*UNEVEN, *lora, "--rollout_file", str(rollout_file), "--output_dir", str(tmp_path / "check")]
    [one] = _debug(in_process("check_sharding.py", *fixed))
    two = _debug(torchrun("check_sharding.py", 2, *fixed, config="fsdp2.yaml"))
    assert [(r["debug/processes"], r["debug/sharded"], r["debug/samples"]) for r in [one, *two]] == \
        [(1, False, 6), (2, True, 2), (2, True, 4)]  # 3 trajectories x 2 turns, dealt 1 + 2
    for key in ("debug/loss", "debug/logprob_mean", "debug/grad_norm"):
        assert two[0][key] == two[1][key]
        assert two[0][key] == pytest.approx(one[key], rel=1e-5, abs=1e-7), key
    assert one["debug/grad_norm"] > 0  # a real gradient, not 0 == 0


@pytest.fixture(scope="module")
def sharded_run(tmp_path_factory):
    """Two steps under FSDP2 on 2 processes, with a KL term to the initial model and weight decay (a gradient from
    step 2 on without any reward)."""
    out = tmp_path_factory.mktemp("fsdp") / "run"
    proc = torchrun("train_multiturn.py", 2, *UNEVEN, "--steps", "2", "--kl_coef", "0.5", "--weight_decay",
                    "0.5", "--lr", "0.01", "--output_dir", str(out), config="fsdp2.yaml")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def test_a_sharded_checkpoint_holds_every_process_shards_and_the_other_states_once(sharded_run):
    step = sharded_run / "checkpoints" / "step_000001"
    meta = json.loads((step / "meta.json").read_text())
    assert meta["sharded"] == {"processes": 2, "states": ["model", "optimizer"]}
    assert meta["states"] == ["scheduler", "sampler", "rng", "trainer"]
    assert sorted(p.name for p in (step / "sharded").glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]


def test_a_sharded_checkpoint_resumes_to_the_same_next_step(sharded_run, tmp_path):
    import shutil

    resumed = shutil.copytree(sharded_run, tmp_path / "resumed")  # as if the run had stopped after step 1
    shutil.rmtree(resumed / "checkpoints" / "step_000002")
    proc = torchrun("train_multiturn.py", 2, "--resume", "latest", "--output_dir", str(resumed),
                    config="fsdp2.yaml")  # the run's own options, from its config.json
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"resumed from {resumed / 'checkpoints' / 'step_000001'} at step 1" in proc.stdout
    original = load_rollout(sharded_run / "rollouts" / "step_000002.jsonl.gz")
    again = load_rollout(resumed / "rollouts" / "step_000002.jsonl.gz")
    assert [u.response_ids for t in again for u in t.turns] == [u.response_ids for t in original for u in t.turns]
    a, b = (read_jsonl(d / "metrics.jsonl")[-1] for d in (sharded_run, resumed))
    assert a["train/grad_norm"] > 0  # the KL to the initial model, which step 1's weight decay moved away from
    keys = ("loss/policy", "loss/kl", "train/grad_norm", "train/lr", "train/tokens")
    assert {k: b[k] for k in keys} == {k: a[k] for k in keys}
    import torch

    from kevin.core.run.rundir import RunDir

    weights = [RunDir(d).trained_model(d / "checkpoints" / "step_000002", device=torch.device("cpu"))[0].state_dict()
               for d in (sharded_run, resumed)]
    assert all(weights[0][k].equal(weights[1][k]) for k in weights[0])


def test_a_sharded_checkpoint_does_not_resume_in_a_replicated_run(sharded_run, tmp_path, in_process):
    proc = in_process("train_multiturn.py", *UNEVEN, "--steps", "2", "--output_dir", str(tmp_path / "one"),
                      "--resume", str(sharded_run / "checkpoints" / "step_000001"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "holds model and optimizer shards of 2 FSDP processes: resume it under FSDP with 2 processes" in proc.stderr
