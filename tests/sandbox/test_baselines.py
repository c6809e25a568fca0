"""Reference timings besides eager: TF32 allowed and ``torch.compile``, taken by the golden process."""

from __future__ import annotations

import time

import pytest
import torch

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
            _golden_run.run_golden([("k", RELU_TASK.source)], root=str(tmp_path), gpu=gpu, config=config, seed=0)
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
