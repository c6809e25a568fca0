"""`build_learner` under FSDP2 and `full_parameters` (kevin/core/run/learner.py), on two gloo processes.

Sampling runs as many forwards as its longest response: here process 0 decodes 2 tokens and process 1 decodes 7. A
sharded forward all-gathers its units, a collective that every process must join, so uneven sampling pairs one
process's all-gathers with whatever collective the other makes next (a hang, or on gloo silently mismatched
collectives). Inside `full_parameters` decoding makes no all-gather at all (counted at ``dist.all_gather_single``,
which FSDP2's collectives call), each process gets the greedy tokens of the unsharded initial model, and afterwards
the parameters are shards again, a sharded forward all-gathers as before and a training step (forward, backward,
the clipped norm, AdamW) runs.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = r'''
import json, sys, torch
from kevin.core.policy.models import load_model
from kevin.core.run.learner import accelerator, build_learner

import torch.distributed as dist
import kevin.core.policy.models as models

loaded_on, load_model = [], models.load_model


def recording_load_model(*args, **kwargs):  # where each process's model was made: "cpu" (weights read) or "meta"
    net, tokenizer = load_model(*args, **kwargs)
    loaded_on.append(next(net.parameters()).device.type)
    return net, tokenizer


models.load_model = recording_load_model

gathers, all_gather_single = [], dist.all_gather_single
dist.all_gather_single = lambda *args, **kwargs: (gathers.append(1), all_gather_single(*args, **kwargs))[1]
acc = accelerator(bf16=False, project_dir=sys.argv[1])
lrn = build_learner(acc, "tiny", seed=0, bf16=False, lora_rank=0, gradient_checkpointing=False, lr=1e-3,
                    weight_decay=0.0, warmup_steps=1, kl_reference=False)
initial, _ = load_model("tiny", device=torch.device("cpu"), seed=0, bf16=False)
rank, prompt = acc.process_index, torch.tensor([[5, 6, 7, 8]])
new_tokens = 2 + 5 * rank  # a different number of forwards on each process
lrn.model.eval()
with torch.no_grad(), lrn.full_parameters():
    entered = len(gathers)
    inside = dict(lrn.net.named_parameters())
    whole = all(type(inside[n]) is torch.nn.Parameter and torch.equal(inside[n], p)
                for n, p in initial.named_parameters())
    sampled = lrn.net.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    while_sampling = len(gathers) - entered
    expected = initial.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
after = sorted({type(p).__name__ for p in lrn.net.parameters()})
before = len(gathers)
with torch.no_grad():  # as many forwards on both processes: sharded, it may all-gather
    lrn.net(input_ids=prompt)
sharded_forward = len(gathers) - before
lrn.model.train()
loss = lrn.model(input_ids=prompt).logits.float().pow(2).mean()
acc.backward(loss)
norm = acc.clip_grad_norm_(lrn.params, 1.0)
lrn.optimizer.step()
record = json.dumps({"rank": rank, "loaded_on": loaded_on, "sharded": lrn.sharded, "whole_inside": whole, "new": sampled.shape[1] - 4,
                  "same_tokens": sampled.tolist() == expected.tolist(), "after": after,
                  "while_sampling": while_sampling, "sharded_forward": sharded_forward,
                  "norm": float(norm)})
with open(f"{sys.argv[1]}/rank{rank}.json", "w") as f:
    f.write(record)
'''


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """The script's JSON record from each of 2 FSDP2 processes (environment as ``accelerate launch --config_file
    recipes/configs/accelerate/fsdp2.yaml`` sets it), each in its own file: lines that two processes print to one
    pipe can interleave."""
    tmp = tmp_path_factory.mktemp("fsdp_learner")
    (tmp / "script.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
           "FSDP_RESHARD_AFTER_FORWARD": "true", "FSDP_CPU_RAM_EFFICIENT_LOADING": "true",
           "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT"}
    with socket.socket() as s:  # a port that no one listens on now, for torchrun's rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
           str(tmp / "script.py"), str(tmp)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((tmp / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def test_each_process_samples_its_own_number_of_tokens_with_the_whole_models_greedy_choices(two_processes):
    assert [(r["sharded"], r["new"], r["same_tokens"]) for r in two_processes] == [(True, 2, True), (True, 7, True)]


def test_decoding_inside_the_context_makes_no_all_gather_where_a_sharded_forward_makes_some(two_processes):
    assert [r["while_sampling"] for r in two_processes] == [0, 0]
    assert all(r["sharded_forward"] > 0 for r in two_processes)


def test_inside_the_context_every_parameter_is_the_whole_initial_weight(two_processes):
    assert [r["whole_inside"] for r in two_processes] == [True, True]


def test_after_sampling_the_parameters_are_shards_again_and_a_training_step_runs(two_processes):
    assert [r["after"] for r in two_processes] == [["DTensor"], ["DTensor"]]
    assert two_processes[0]["norm"] == two_processes[1]["norm"] > 0  # the one norm of the whole gradient


def test_only_the_main_process_makes_weights_the_others_build_on_the_meta_device(two_processes):
    # fsdp_cpu_ram_efficient_loading: process 1's weights come from process 0's in the broadcast while sharding (and
    # are then the whole initial model's: test_inside_the_context_every_parameter_is_the_whole_initial_weight)
    assert [r["loaded_on"] for r in two_processes] == [["cpu"], ["meta"]]
