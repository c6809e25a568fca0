"""recipes/evaluate.py end to end: a tiny live run on the CPU, and a re-report of synthetic saved rollouts whose
numbers are computed by hand.

The tiny live run over every configuration is the command line as a user types it, in a subprocess; the other
tests run the recipe as a script inside the test process (the ``recipe`` fixture: tests/recipes/conftest.py, with
no GPU visible, as the subprocess's CUDA_VISIBLE_DEVICES="" has it), which saves each one a fresh interpreter's
imports."""

import contextlib
import dataclasses
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kevin.core.records import load_rollout, save_rollout
from kevin.core.types import Trajectory, Turn
from kevin.sandbox.result import EvalResult

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "evaluate.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


ENV = {"MPLBACKEND": "Agg", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def run_recipe(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """``python recipes/evaluate.py args...`` in a subprocess, with no GPU visible; it must succeed."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", **ENV}
    proc = subprocess.run([sys.executable, str(RECIPE), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"recipe failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture
def recipe(in_process):
    """``recipe(*args, check=True)``: recipes/evaluate.py run as a script in this process, with no GPU visible;
    with ``check`` it must succeed."""
    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = in_process(RECIPE, *args, env=ENV, hide_cuda=True)
        if check:
            assert proc.returncode == 0, f"recipe failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc
    return run


@pytest.fixture
def refused(recipe):
    """``refused(*args)``: the one line of stderr with which the recipe refuses ``args`` (no traceback)."""
    def run(*args: str) -> str:
        proc = recipe(*args, check=False)
        assert proc.returncode != 0
        assert "Traceback" not in proc.stderr  # one line, not a traceback
        return proc.stderr.strip().splitlines()[-1]
    return run


@contextlib.contextmanager
def _chat_server(answer):
    """A local chat-completions endpoint on 127.0.0.1; ``answer(body, n) -> (status, payload)`` for the n-th request
    (1-based). Yields its base URL."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    count = itertools.count(1)

    class ChatCompletions(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the http.server API
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, payload = answer(body, next(count))
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), ChatCompletions)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()


def _reply(text):
    return {"choices": [{"message": {"content": text}, "finish_reason": "stop"}]}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _turn(speedup=None, *, status="incorrect", prompt=100, generated=20):
    """A correct kernel with ``speedup`` (1 ms baseline), else a kernel with ``status``."""
    if speedup is not None:
        result = EvalResult("correct", "Correct.", runtime_ms=1.0 / speedup, baseline_ms=1.0)
    else:
        result = EvalResult(status, status)
    return Turn(prompt_ids=(1,) * prompt, response_ids=(2,) * generated, response_text="", result=result,
                generation_s=0.5, evaluation_s=0.25)


def _traj(task, index, turns):
    return Trajectory(f"task{task}", task, index, tuple(turns))


def test_from_rollouts_rereports_saved_rollouts_with_hand_computed_numbers(tmp_path, recipe):
    # Two tasks, 4 kernels each: 2 x 2 (serial) and 4 x 1 (parallel). Prompts grow in serial turn 2.
    serial = [_traj(0, 0, [_turn(), _turn(2.0, prompt=300)]), _traj(0, 1, [_turn(1.0), _turn(1.25, prompt=300)]),
              _traj(1, 0, [_turn(status="compile_error"), _turn(prompt=300)]),
              _traj(1, 1, [_turn(0.5), _turn(prompt=300)])]
    parallel = [_traj(0, g, [t]) for g, t in enumerate([_turn(1.5), _turn(), _turn(), _turn()])] + \
               [_traj(1, g, [t]) for g, t in enumerate([_turn(), _turn(0.8), _turn(), _turn()])]
    save_rollout(serial, tmp_path / "saved" / "rollouts" / "2x2.jsonl")
    save_rollout(parallel, tmp_path / "saved" / "rollouts" / "4x1.jsonl")
    out = tmp_path / "report"
    recipe("--from_rollouts", str(tmp_path / "saved"), "--output_dir", str(out), "--n_bootstrap", "200")

    records = read_jsonl(out / "metrics.jsonl")
    turns = [r for r in records if r["table"] == "turns"]
    budget = {r["config"]: r for r in records if r["table"] == "budget"}
    # Per turn budget from the most serial rollout (2x2), best@2 and avg@2:
    assert [r["turns"] for r in turns] == [1, 2] and turns[0]["rollout"] == "2x2"
    # t = 1: task 0 speedups (0, 1.0) -> best 1.0, avg 0.5; task 1 (0, 0.5) -> best 0.5, avg 0.25
    assert turns[0]["speedup/best@k"] == pytest.approx(0.75)  # (1.0 + 0.5) / 2
    assert turns[0]["speedup/avg@k"] == pytest.approx(0.375)  # (0.5 + 0.25) / 2
    assert turns[0]["correct/avg@k"] == pytest.approx(0.5)  # task 0: 1/2, task 1: 1/2
    # t = 2: task 0 (2.0, 1.25) -> best 2.0, avg 1.625; task 1 (0, 0.5) -> best 0.5, avg 0.25
    assert turns[1]["speedup/best@k"] == pytest.approx(1.25)  # (2.0 + 0.5) / 2
    assert turns[1]["speedup/avg@k"] == pytest.approx(0.9375)  # (1.625 + 0.25) / 2
    assert turns[1]["fast_1.5/best@k"] == pytest.approx(0.5)  # only task 0 reaches 1.5x
    # Table 2: 2x2 as at t = 2; 4x1: task 0 best 1.5, task 1 best 0.8 -> 1.15; both solved
    assert list(budget) == ["2x2", "4x1"]
    assert budget["2x2"]["speedup/best@k"] == pytest.approx(1.25)
    assert budget["4x1"]["speedup/best@k"] == pytest.approx(1.15)
    assert budget["4x1"]["correct/best@k"] == pytest.approx(1.0)
    assert budget["4x1"]["fast_1/best@k"] == pytest.approx(0.5)
    # Compute: 8 kernels each; serial prompts 4 * 100 + 4 * 300 = 1600, parallel 8 * 100 = 800
    assert budget["2x2"]["compute/prompt_tokens"] == 1600
    assert budget["4x1"]["compute/prompt_tokens"] == 800
    assert budget["2x2"]["compute/generated_tokens"] == budget["4x1"]["compute/generated_tokens"] == 160
    assert budget["2x2"]["compute/generation_s"] == pytest.approx(4.0)  # 8 * 0.5
    for r in records:
        for key in ("speedup/best@k", "correct/avg@k"):
            assert r[key + "_lo"] <= r[key] + 1e-12 and r[key] <= r[key + "_hi"] + 1e-12

    text = (out / "report.md").read_text()
    assert "| 2x2 | 4 | 1.25x" in text and "| 4x1 | 4 | 1.15x" in text
    assert "![turns](turns.png)" in text and "![equal_budget](equal_budget.png)" in text
    for name in ("turns.png", "equal_budget.png"):
        assert (out / name).read_bytes()[:8] == PNG_MAGIC


@pytest.mark.timeout(240)
def test_tiny_model_runs_every_configuration_on_the_cpu_and_writes_the_report(tmp_path):
    out = tmp_path / "eval"
    proc = run_recipe("--output_dir", str(out), "--configs", "1x2,2x1", "--max_tasks", "1", "--max_new_tokens", "8",
                      "--n_bootstrap", "100")
    assert "kevin.core.rollout: turn 2/2: 1 responses" in proc.stderr  # the rollout's line per turn is shown
    for label, (m, n) in {"1x2": (1, 2), "2x1": (2, 1)}.items():
        lines = (out / "rollouts" / f"{label}.jsonl").read_text().splitlines()
        assert len(lines) == m  # one task, m trajectories
        assert all(len(json.loads(line)["turns"]) == n for line in lines)
    records = read_jsonl(out / "metrics.jsonl")
    assert [r["table"] for r in records] == ["turns", "turns", "budget", "budget"]
    assert {r["config"] for r in records if r["table"] == "budget"} == {"1x2", "2x1"}
    for r in records:
        assert r["compute/kernels"] > 0 and r["compute/generated_tokens"] > 0
        assert 0.0 <= r["correct/best@k"] <= 1.0 and r["speedup/best@k"] >= 0.0
    text = (out / "report.md").read_text()
    assert "## Per turn budget" in text and "## Equal kernel budget" in text
    assert (out / "turns.png").read_bytes()[:8] == PNG_MAGIC
    assert (out / "equal_budget.png").read_bytes()[:8] == PNG_MAGIC
    assert json.loads((out / "config.json").read_text())["configs"] == "1x2,2x1"


@pytest.mark.timeout(240)
def test_a_saved_checkpoint_directory_is_evaluated_through_from_pretrained(tmp_path, recipe):
    from kevin.core.policy.tiny import build_tiny_model, build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    build_tiny_model(tokenizer).save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")
    out = tmp_path / "eval"
    recipe("--model", str(tmp_path / "ckpt"), "--output_dir", str(out), "--configs", "1x1",
           "--max_tasks", "1", "--max_new_tokens", "8", "--n_bootstrap", "50")
    trajectories = [json.loads(line) for line in (out / "rollouts" / "1x1.jsonl").read_text().splitlines()]
    assert len(trajectories) == 1 and len(trajectories[0]["turns"]) == 1
    assert 0 < len(trajectories[0]["turns"][0]["response_ids"]) <= 8
    records = read_jsonl(out / "metrics.jsonl")
    assert [(r["table"], r.get("config")) for r in records] == [("turns", None), ("budget", "1x1")]
    assert f"Evaluation of {tmp_path / 'ckpt'}" in (out / "report.md").read_text()


def test_a_training_run_is_rebuilt_from_its_config_and_evaluated_with_its_trained_weights(tmp_path):
    import dataclasses

    import torch

    from kevin.core.policy.tiny import build_tiny_model, build_tiny_tokenizer
    from kevin.core.run.checkpoint import checkpoint_path, save_checkpoint
    from kevin.core.run.rundir import RunDir

    sys.path.insert(0, str(ROOT))
    from recipes import evaluate, train_multiturn as train

    # a run of the tiny model (full fine-tuning) whose step-3 checkpoint moved every weight by +0.5
    trained = {n: p.detach() + 0.5 for n, p in build_tiny_model(build_tiny_tokenizer()).named_parameters()}
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(dataclasses.asdict(train.Config(model="tiny", lora=False))))
    save_checkpoint(checkpoint_path(run / "checkpoints", 1), {"model": {n: p - 0.5 for n, p in trained.items()}})
    save_checkpoint(checkpoint_path(run / "checkpoints", 3), {"model": trained})
    policy = evaluate.build_policy(evaluate.Config(model=str(run), max_new_tokens=8))  # run dir: latest step
    for name, param in policy.model.named_parameters():
        torch.testing.assert_close(param, trained[name], rtol=0, atol=0)
    assert RunDir.find(run / "checkpoints" / "step_000001")[1].name == "step_000001"
    assert RunDir.find(tmp_path) is None  # not a run: a hub id or from_pretrained dir


@pytest.mark.timeout(120)
def test_an_api_model_is_evaluated_through_an_openai_compatible_endpoint(tmp_path, recipe):
    requests = []
    out = tmp_path / "eval"
    reply = {**_reply("I cannot write this kernel."), "usage": {"prompt_tokens": 50, "completion_tokens": 7}}
    with _chat_server(lambda body, n: requests.append(body) or (200, reply)) as url:
        recipe("--api_model", "served-model", "--api_base_url", url,
               "--output_dir", str(out), "--configs", "2x2", "--max_tasks", "1", "--max_new_tokens", "100",
               "--n_bootstrap", "50", "--device", "cpu", "--rules", "kernelbench", "--baseline", "compile")
    assert len(requests) == 4  # 1 task x 2 trajectories x 2 turns
    assert {r["model"] for r in requests} == {"served-model"} and requests[0]["max_tokens"] == 100
    turns = [t for line in (out / "rollouts" / "2x2.jsonl").read_text().splitlines()
             for t in json.loads(line)["turns"]]
    assert [t["result"]["status"] for t in turns] == ["format_error"] * 4
    budget = [r for r in read_jsonl(out / "metrics.jsonl") if r["table"] == "budget"]
    assert budget[0]["correct/best@k"] == 0.0
    # the server's usage counts: 4 turns x 50 prompt and x 7 generated tokens
    assert (budget[0]["compute/prompt_tokens"], budget[0]["compute/generated_tokens"]) == (200, 28)
    text = (out / "report.md").read_text()
    assert "Evaluation of served-model" in text and "neither token ids" not in text
    assert "Rule set: kernelbench. Speedups divide by the compile baseline" in text
    assert json.loads((out / "config.json").read_text())["rules"] == "kernelbench"


@pytest.mark.parametrize("args, message", [
    (("--engine", "vlm"), "argument --engine: invalid choice: 'vlm' (choose from 'transformers', 'vllm')"),
    (("--engine", "vllm"), "--engine vllm needs a real model"),
    (("--api_model", "o4-mini", "--engine", "vllm"), "--engine vllm is for --model"),
    (("--n_turns", "3"), "unknown option --n_turns"),
    (("--max_tasks", "0"), "these options must be >= 1: {'max_tasks': 0}"),  # not "all tasks"
    (("--max_new_tokens", "0"), "these options must be >= 1: {'max_new_tokens': 0}"),  # not the default 64
    (("--alpha", "2"), "--alpha must be in (0, 1), got 2.0"),
    (("--rules", "kernelbnch"), "argument --rules: invalid choice: 'kernelbnch' (choose from 'kevin', 'kernelbench')"),
    (("--baseline", "tf16"), "argument --baseline: invalid choice: 'tf16' (choose from 'eager', 'tf32', 'compile')"),
    (("--beam_keep", "0"), "these options must be >= 1: {'beam_keep': 0}"),
    (("--strategy", "beam", "--configs", "3x2"), "each such m a multiple of --beam_keep 2; got 3x2"),
    (("--strategy", "beam", "--configs", "4x1"), "needs a configuration of more than --beam_every 1 turns"),
])
def test_a_wrong_option_is_one_line_naming_it(args, message, refused, tmp_path):
    # an output directory of the test's own: the --engine refusals come after the recipe has claimed and created it
    # (by default runs/evaluate under the working directory)
    assert message in refused(*args, "--output_dir", str(tmp_path / "eval"))


@pytest.mark.timeout(120)
def test_a_rollout_that_fails_midway_keeps_its_finished_turns_and_resume_continues_it(tmp_path, recipe):
    revoked = [True]

    def answer(body, n):  # turn 1 (2 trajectories) answered; turn 2 refused while the key is revoked
        return (200, _reply("no kernel")) if n <= 2 or not revoked[0] else (401, {"error": {"message": "key revoked"}})

    out = tmp_path / "eval"
    args = ("--api_model", "served-model", "--output_dir", str(out), "--configs", "2x2", "--max_tasks", "1",
            "--max_new_tokens", "100", "--device", "cpu", "--n_bootstrap", "50")
    with _chat_server(answer) as url:
        proc = recipe(*args, "--api_base_url", url, check=False)
        assert proc.returncode != 0 and "key revoked" in proc.stderr and "--resume continues it" in proc.stdout
        partial = load_rollout(out / "rollouts" / "2x2.partial.jsonl.gz")
        assert [len(tr.turns) for tr in partial] == [1, 1]  # turn 1 of both trajectories, kept
        assert not (out / "rollouts" / "2x2.jsonl").exists()
        revoked[0] = False
        recipe(*args, "--api_base_url", url, "--resume")
    done = load_rollout(out / "rollouts" / "2x2.jsonl")
    assert [len(tr.turns) for tr in done] == [2, 2] and [tr.turns[:1] for tr in done] == [tr.turns for tr in partial]
    assert not (out / "rollouts" / "2x2.partial.jsonl.gz").exists() and (out / "report.md").exists()


@pytest.mark.timeout(240)
def test_resume_goes_on_from_the_saved_turns_and_reads_finished_configurations_back(tmp_path, recipe):
    out = tmp_path / "eval"
    args = ("--output_dir", str(out), "--configs", "2x3,2x1", "--max_tasks", "1", "--max_new_tokens", "8",
            "--n_bootstrap", "50")
    recipe(*args)
    rollouts = out / "rollouts"
    one_turn = [dataclasses.replace(tr, turns=tr.turns[:1]) for tr in load_rollout(rollouts / "2x3.jsonl")]
    save_rollout(one_turn, rollouts / "2x3.partial.jsonl.gz")  # as if stopped after turn 1
    (rollouts / "2x3.jsonl").unlink()
    finished = (rollouts / "2x1.jsonl").read_bytes()
    proc = recipe(*args, "--resume")
    done = load_rollout(rollouts / "2x3.jsonl")
    assert [len(tr.turns) for tr in done] == [3, 3] and [tr.turns[:1] for tr in done] == [tr.turns for tr in one_turn]
    assert "turn 1/3" not in proc.stderr and "turn 2/3" in proc.stderr  # turn 1 was not generated again
    assert (rollouts / "2x1.jsonl").read_bytes() == finished  # read back, not run again


def test_resume_with_other_settings_or_nothing_to_continue_is_refused(tmp_path, recipe, refused):
    out = tmp_path / "eval"
    args = ("--output_dir", str(out), "--configs", "2x1", "--max_tasks", "1", "--max_new_tokens", "8",
            "--n_bootstrap", "50")
    assert "holds no evaluation to continue" in refused(*args, "--resume")
    recipe(*args)
    message = refused(*args, "--resume", "--seed", "1")  # refused on the options, before any model is built
    assert "cannot be continued with these" in message and "seed 0 then, 1 now" in message
    saved = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**saved, "model_fingerprint": "0123456789abcdef"}))  # other weights
    message = refused(*args, "--resume")
    assert "model_fingerprint '0123456789abcdef' then" in message
    assert "not with --from_rollouts or --overwrite" in refused(*args, "--resume", "--overwrite")


def test_an_empty_task_file_is_refused_before_any_rollout(tmp_path, refused):
    (tmp_path / "empty.jsonl").write_text("")
    assert "no tasks to evaluate" in refused("--tasks", str(tmp_path / "empty.jsonl"), "--output_dir",
                                             str(tmp_path / "out"))


def test_the_report_shows_speedups_against_every_baseline_the_rollouts_were_timed_against(tmp_path, recipe):
    def timed(runtime_ms):  # eager 1 ms, tf32 0.5 ms, compile 0.25 ms
        result = EvalResult("correct", "Correct.", runtime_ms=runtime_ms, baseline_ms=0.5,
                            baselines_ms={"eager": 1.0, "tf32": 0.5, "compile": 0.25})
        return Turn((1,), (2,), "", result)

    save_rollout([_traj(0, 0, [timed(0.5)]), _traj(1, 0, [_turn()])], tmp_path / "rollouts" / "1x1.jsonl")
    (tmp_path / "config.json").write_text(json.dumps({"model": "m", "configs": "1x1", "rules": "kernelbench",
                                                      "baseline": "tf32"}))
    recipe("--from_rollouts", str(tmp_path), "--n_bootstrap", "50")
    text = (tmp_path / "report.md").read_text()
    assert "Rule set: kernelbench. Speedups divide by the tf32 baseline" in text
    assert "| 1x1 | 1 | 0.50x" in text  # Table 2 divides by tf32: 0.5 / 0.5 = 1 on task 0, 0 on task 1
    assert "| 1x1 | eager | 2.00x | 50.0% | 1/1 |" in text and "| 1x1 | compile | 0.50x | 0.0% | 1/1 |" in text
    rows = [(r["baseline"], r["speedup/mean_correct"]) for r in read_jsonl(tmp_path / "metrics.jsonl")
            if r["table"] == "baselines"]
    assert rows == [("eager", 2.0), ("tf32", 1.0), ("compile", 0.5)]


def test_from_rollouts_reports_only_the_configurations_its_evaluation_made(tmp_path, recipe):
    # the folder also holds 4x1.jsonl from another evaluation; its config.json says it made 2x2 only
    serial = [_traj(0, 0, [_turn(), _turn(2.0)]), _traj(0, 1, [_turn(1.0), _turn()])]
    save_rollout(serial, tmp_path / "saved" / "rollouts" / "2x2.jsonl")
    save_rollout([_traj(0, g, [_turn(1.5)]) for g in range(4)], tmp_path / "saved" / "rollouts" / "4x1.jsonl")
    (tmp_path / "saved" / "config.json").write_text(json.dumps({"model": "m", "configs": "2x2"}))
    recipe("--from_rollouts", str(tmp_path / "saved"), "--n_bootstrap", "50")  # the report goes beside them
    budget = [r["config"] for r in read_jsonl(tmp_path / "saved" / "metrics.jsonl") if r["table"] == "budget"]
    assert budget == ["2x2"]


@pytest.mark.timeout(240)
def test_a_fresh_evaluation_over_an_earlier_one_is_refused_unless_overwrite(tmp_path, recipe, refused):
    out = tmp_path / "eval"
    save_rollout([_traj(0, 0, [_turn(1.5)])], out / "rollouts" / "1x1.jsonl")  # an earlier evaluation's
    before = (out / "rollouts" / "1x1.jsonl").read_bytes()
    small = ("--output_dir", str(out), "--configs", "2x1", "--max_tasks", "1", "--max_new_tokens", "8",
             "--n_bootstrap", "50")
    assert "holds an earlier run (rollouts)" in refused(*small)
    assert (out / "rollouts" / "1x1.jsonl").read_bytes() == before
    recipe(*small, "--overwrite")
    assert sorted(p.name for p in (out / "rollouts").iterdir()) == ["2x1.jsonl"]


def test_overwrite_never_deletes_a_training_run_or_a_models_config(tmp_path, refused):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"model": "tiny", "steps": 3}))
    assert "holds a training run" in refused("--output_dir", str(run), "--overwrite")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    assert "not an evaluation's" in refused("--output_dir", str(model), "--overwrite")
    assert (run / "config.json").exists() and (run / "checkpoints").is_dir() and (model / "config.json").exists()


def test_rereporting_a_rollouts_folder_with_overwrite_keeps_the_rollouts(tmp_path, recipe):
    saved = tmp_path / "evalA"
    save_rollout([_traj(0, 0, [_turn(1.5)]), _traj(0, 1, [_turn()])], saved / "rollouts" / "2x1.jsonl")
    recipe("--from_rollouts", str(saved / "rollouts"), "--output_dir", str(saved), "--overwrite",
           "--n_bootstrap", "50")
    assert (saved / "rollouts" / "2x1.jsonl").exists() and (saved / "report.md").exists()


@pytest.mark.timeout(240)
def test_beam_search_runs_beside_its_configuration_at_the_same_kernel_budget(tmp_path, recipe):
    out = tmp_path / "eval"
    recipe("--strategy", "beam", "--configs", "4x2", "--max_tasks", "1", "--max_new_tokens", "8",
           "--n_bootstrap", "50", "--output_dir", str(out))
    # the tiny model writes no kernel: every score is 0, so (ties to the lower index, keep 2 of 4) slots 0 and 1
    # survive turn 1, and slots 2 and 3 continue copies of them, their own first turns pruned
    beam = read_jsonl(out / "rollouts" / "4x2-beam.jsonl")
    assert [[t.get("replica", False) for t in row["turns"]] for row in beam] == [[False] * 2] * 2 + [[True, False]] * 2
    assert [[i for i, _ in row.get("pruned", [])] for row in beam] == [[], [], [0], [0]]
    records = read_jsonl(out / "metrics.jsonl")
    assert [r["rollout"] for r in records if r["table"] == "turns"] == ["4x2", "4x2"]  # Table 1: independent
    budget = {r["config"]: r for r in records if r["table"] == "budget"}
    assert list(budget) == ["4x2", "4x2 beam 2/1"]
    assert budget["4x2 beam 2/1"]["compute/kernels"] == budget["4x2"]["compute/kernels"] == 8  # 4 x 2, one task
    assert "| 4x2 beam 2/1 | 8 |" in (out / "report.md").read_text()
    recipe("--from_rollouts", str(out), "--n_bootstrap", "50")  # re-reported in place: the beam rollout too
    assert "| 4x2 beam 2/1 | 8 |" in (out / "report.md").read_text()
