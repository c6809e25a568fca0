"""Reference timings besides eager: TF32 allowed and ``torch.compile``, taken by the golden process."""

from __future__ import annotations

import time

import pytest
import torch

from kevin.sandbox.build.harness import Built
from kevin.sandbox import SandboxConfig
from kevin.sandbox import _golden_run
from kevin.sandbox.worker import golden as _golden
from sandbox_cases import LINEAR_RELU_TASK, RELU_TASK

JOB = {"seed": 0, "timing": {"n_warmup": 1, "n_trials": 10, "budget_s": 1.0, "launch_cover_us": 0.0}}


def test_the_job_names_every_baseline_of_the_backend_configured_one_first(monkeypatch, tmp_path):
    jobs = []

    class Stop(Exception):
        pass

    def fake_worker(module, job, **kwargs):
        jobs.append(job)
        raise Stop

    monkeypatch.setattr(_golden_run._process, "Worker", fake_worker)
    for gpu, config in ((None, SandboxConfig()), ("0", SandboxConfig(baseline="tf32")),
                        (None, SandboxConfig(baseline="compile", extra_baselines=("eager",)))):
        with pytest.raises(Stop):
            _golden_run.run_golden([("k", RELU_TASK.source)], root=str(tmp_path), gpu=gpu, config=config, seed=0,
                                   permute=Built("permute.so", "0" * 64) if gpu else None)
    assert [j["baselines"] for j in jobs] == [["eager"], list(SandboxConfig(baseline="tf32").baselines_for("cuda")),
                                              ["compile", "eager"]]


def test_tf32_is_allowed_inside_the_block_and_restored_after_it_even_on_an_error():
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
              torch.get_float32_matmul_precision())
    with pytest.raises(KeyError), _golden.tf32_allowed():
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        assert torch.get_float32_matmul_precision() == "high"
        raise KeyError
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.get_float32_matmul_precision()) == before


def test_golden_outputs_are_computed_without_tf32_even_for_cudnn_convolutions():
    # PyTorch's default lets cuDNN convolutions round to TF32 (10 mantissa bits, about 1e-3 relative): a reference
    # computed so would reject an honest float32 convolution at the 1e-3 tolerance
    assert torch.backends.cudnn.allow_tf32  # PyTorch's default, which the golden outputs must not use
    with _golden.exact_float32():
        assert not torch.backends.cudnn.allow_tf32
        assert not torch.backends.cuda.matmul.allow_tf32
        assert torch.get_float32_matmul_precision() == "highest"
        with _golden.pytorch_defaults():  # what the eager baseline is timed under, inside the golden's exact block
            assert torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
        assert not torch.backends.cudnn.allow_tf32
    assert torch.backends.cudnn.allow_tf32


def test_a_baseline_that_fails_is_left_out_with_its_error_and_the_others_are_timed(monkeypatch):
    def no_compiler(model, **kwargs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(torch, "compile", no_compiler)
    pool = [[torch.rand(8, 16)] for _ in range(2)]
    summaries, errors = _golden.time_baselines(torch.nn.ReLU(), pool, ["eager", "compile", "tf32"], JOB,
                                               torch.device("cpu"))
    assert list(summaries) == ["eager", "tf32"] and all(s["median_ms"] > 0 for s in summaries.values())
    assert list(errors) == ["compile"] and "no compiler here" in errors["compile"]


def test_compile_is_warmed_up_outside_the_timed_calls(monkeypatch):
    def slow_compile(model, **kwargs):  # a "compilation" of 0.3 s on the first call
        state = {"first": True}

        def fn(*args):
            if state.pop("first", False):
                time.sleep(0.3)
            return model(*args)
        return fn

    monkeypatch.setattr(torch, "compile", slow_compile)
    summaries, errors = _golden.time_baselines(torch.nn.ReLU(), [[torch.rand(8, 16)]], ["compile"], JOB,
                                               torch.device("cpu"))
    assert not errors and summaries["compile"]["compile_s"] >= 0.3
    assert max(summaries["compile"]["samples_ms"]) < 300


def test_the_golden_waits_for_the_device_without_its_inputs_on_it(monkeypatch):
    # a golden waits behind every timing queued before it: the inputs it times on go to the device only once
    # alone() has returned (the compile warm-up's copy is dropped before), so waiting goldens leave the memory free
    events = []
    to_device = _golden.on_device
    monkeypatch.setattr(_golden, "on_device", lambda sets, device: events.append("inputs") or to_device(sets, device))
    _golden.time_baselines(torch.nn.ReLU(), [[torch.rand(8, 16)]], ["eager"], JOB, torch.device("cpu"),
                           alone=lambda: events.append("alone"))
    assert events == ["alone", "inputs"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_golden_process_times_eager_and_torch_compile_on_the_cpu(tmp_path):
    config = SandboxConfig(extra_baselines=("compile",), n_warmup=1, n_trials=10, timing_budget_s=2.0)
    g = _golden_run.run_golden([("lin", LINEAR_RELU_TASK.source)], root=str(tmp_path), gpu=None, config=config,
                               seed=1, baseline_keys=frozenset({"lin"}))["lin"]
    assert g.error is None, g.error
    assert "baseline_errors" not in g.meta, g.meta.get("baseline_errors")
    baselines = g.meta["baselines"]
    assert list(baselines) == ["eager", "compile"]
    assert all(b["median_ms"] > 0 and b["n_trials"] >= 10 for b in baselines.values())
    assert baselines["compile"]["compile_s"] > 0
    assert g.meta["baseline"] == baselines["eager"]  # the configured one, where existing readers look


# The reference timed a second time: a first timing taken while another process loaded the host's cores would
# otherwise inflate every speedup of the task for the Sandbox's life. Most tests poison the first timing by hand
# (x1000) and judge the honest ReLU kernel, built once for the session (`warm_builds`).


def _poison_first_timing(monkeypatch, sandbox, factor=1000.0) -> dict[str, float]:
    """Make the Sandbox's first baseline of each task ``factor`` times what the golden process measured; returns
    the poisoned eager value once it is set."""
    real, seen = sandbox._baselines_of, {}

    def poisoned(task_src, slot):
        key = sandbox._baseline_key(task_src, slot)
        if key not in sandbox._baselines:
            sandbox._baselines[key] = {name: ms * factor for name, ms in real(task_src, slot).items()}
            seen["eager"] = sandbox._baselines[key]["eager"]
        return sandbox._baselines[key]

    monkeypatch.setattr(sandbox, "_baselines_of", poisoned)
    return seen


def _count_calls(monkeypatch, sandbox, answer=None) -> list[str]:
    """Count the second timings; ``answer(first_eager_ms)`` stands in for the golden process when given."""
    calls, real = [], sandbox._time_reference

    def second_timing(task_src, slot):
        calls.append(task_src)
        if answer is None:
            return real(task_src, slot)
        return answer(sandbox._baselines[sandbox._baseline_key(task_src, slot)]["eager"])

    monkeypatch.setattr(sandbox, "_time_reference", second_timing)
    return calls


def _sandbox(cache_dir, **overrides):
    from kevin.sandbox import Sandbox
    from sandbox_cases import _config

    return Sandbox("cpu", _config(cache_dir, **overrides))


def test_a_first_baseline_timed_under_load_is_timed_again_and_the_faster_stands(monkeypatch, cache_dir, warm_builds):
    from sandbox_cases import load_candidate

    sandbox = _sandbox(cache_dir, recheck_baseline_speedup=SandboxConfig().recheck_baseline_speedup)  # the default
    first = _poison_first_timing(monkeypatch, sandbox)
    calls = _count_calls(monkeypatch, sandbox)  # the real golden process
    result = sandbox.evaluate(RELU_TASK, load_candidate("honest_relu_cpu"))
    assert result.correct, result.feedback
    # the honest kernel beats the poisoned first timing, the reference is timed again (unpoisoned), and the faster
    # timing is the baseline of the result, its feedback and its carried timings
    assert len(calls) == 1
    assert result.baseline_ms < first["eager"], (result.baseline_ms, first)
    assert result.baselines_ms["eager"] == result.baseline_ms
    assert f"against {result.baseline_ms:.4g} ms" in result.feedback


def test_with_the_recheck_off_a_first_baseline_timed_under_load_stands(monkeypatch, cache_dir, warm_builds):
    from sandbox_cases import load_candidate

    sandbox = _sandbox(cache_dir, recheck_baseline_speedup=None)
    first = _poison_first_timing(monkeypatch, sandbox)
    calls = _count_calls(monkeypatch, sandbox)
    result = sandbox.evaluate(RELU_TASK, load_candidate("honest_relu_cpu"))
    assert result.correct, result.feedback
    assert (result.baseline_ms, calls) == (first["eager"], [])  # the poisoned value, 1000x the golden's


def test_a_slower_second_timing_does_not_replace_the_first_and_is_taken_once(monkeypatch, cache_dir, warm_builds):
    from sandbox_cases import load_candidate

    sandbox = _sandbox(cache_dir, recheck_baseline_speedup=1e-9)  # every correct kernel is over the threshold
    calls = _count_calls(monkeypatch, sandbox, lambda first_ms: {"eager": {"median_ms": first_ms * 2}})
    results = [sandbox.evaluate(RELU_TASK, load_candidate("honest_relu_cpu")) for _ in range(2)]
    assert all(r.correct for r in results), [r.feedback for r in results]
    assert len(calls) == 1  # the second kernel finds the task rechecked
    assert results[0].baseline_ms == results[1].baseline_ms  # the first timing stands: the second was twice it


def test_kernels_judged_while_the_reference_is_timed_again_wait_and_get_the_faster_timing(monkeypatch, cache_dir,
                                                                                            warm_builds):
    import time

    from sandbox_cases import load_candidate

    sandbox = _sandbox(cache_dir, recheck_baseline_speedup=1e-9)

    def slow_and_half(first_ms):
        time.sleep(3.0)  # long enough for the other kernels to finish their timings and wait
        return {"eager": {"median_ms": first_ms / 2}}

    calls = _count_calls(monkeypatch, sandbox, slow_and_half)
    results = sandbox.evaluate_many([(RELU_TASK, load_candidate("honest_relu_cpu"))] * 3)
    assert all(r.correct for r in results), [r.feedback for r in results]
    assert len(calls) == 1
    assert len({r.baseline_ms for r in results}) == 1  # all three against the halved timing
    assert all(f"against {r.baseline_ms:.4g} ms" in r.feedback for r in results)


@pytest.mark.parametrize("failure", ["nothing timed", "golden process raised"])
def test_a_failed_second_timing_keeps_the_verdict_and_is_tried_again_twice_at_most(monkeypatch, cache_dir, warm_builds,
                                                                                     failure):
    from sandbox_cases import load_candidate

    sandbox = _sandbox(cache_dir, recheck_baseline_speedup=1e-9)

    def fails(first_ms):
        if failure == "golden process raised":
            raise OSError("no space left on device")
        return {}

    calls = _count_calls(monkeypatch, sandbox, fails)
    results = [sandbox.evaluate(RELU_TASK, load_candidate("honest_relu_cpu")) for _ in range(3)]
    assert [r.status for r in results] == ["correct"] * 3, [r.feedback for r in results]
    assert len(calls) == 2  # the second kernel tries again; after two failures the first timing stands
    assert len({r.baseline_ms for r in results}) == 1


def test_a_reused_verdict_given_before_the_second_timing_gets_the_faster_one(monkeypatch, cache_dir, warm_builds):
    from sandbox_cases import load_candidate

    sandbox = _sandbox(cache_dir, reuse_verdicts=True, recheck_baseline_speedup=1e-9)
    _count_calls(monkeypatch, sandbox, lambda first_ms: {"eager": {"median_ms": first_ms * 2}})  # the first stands
    first = sandbox.evaluate(RELU_TASK, load_candidate("honest_relu_cpu"))
    key = sandbox._baseline_key(RELU_TASK.source, "cpu")
    sandbox._baselines[key] = {"eager": first.baseline_ms / 4}  # as if the verdict had come before a faster timing
    twin = sandbox.evaluate(RELU_TASK, load_candidate("honest_relu_cpu"))
    assert twin.details.get("reused") and first.correct, first.feedback
    # the twin's verdict is the first copy's, against a quarter of its baseline: a quarter of its speedup
    assert (twin.baseline_ms, twin.baselines_ms) == (first.baseline_ms / 4, {"eager": first.baseline_ms / 4})
    assert twin.speedup == pytest.approx(first.speedup / 4)
    assert f"against {twin.baseline_ms:.4g} ms" in twin.feedback


def test_recheck_baseline_speedup_must_be_positive():
    with pytest.raises(ValueError, match="recheck_baseline_speedup"):
        SandboxConfig(recheck_baseline_speedup=0.0)
