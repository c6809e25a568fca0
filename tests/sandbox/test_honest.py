"""Honest C++ candidates pass every layer (static checks, operator inventory, dynamic checks) on the CPU backend."""

from sandbox_cases import LINEAR_RELU_TASK, RELU_TASK, _config, load_candidate
from kevin.sandbox import Sandbox


def test_an_honest_relu_kernel_is_correct_with_a_measured_speedup(warm_builds):
    r = warm_builds["relu"]
    assert r.status == "correct", r.feedback
    assert r.runtime_ms is not None and r.runtime_ms > 0
    assert r.baseline_ms is not None and r.baseline_ms > 0
    assert r.speedup == r.baseline_ms / r.runtime_ms
    assert "speedup" in r.feedback


def test_an_honest_linear_relu_kernel_with_parameters_initialised_like_the_reference_is_correct(warm_builds):
    r = warm_builds["linear_relu"]
    assert r.status == "correct", r.feedback
    # fp32 sums of 128 products in another order: errors far below the 1e-3 x rms(ref) tolerance
    assert r.max_abs_error is not None and r.max_abs_error < 1e-4


def test_the_correctness_sets_include_the_signed_scaled_and_heavy_tailed_variants(warm_builds):
    assert warm_builds["relu"].details["set_names"] == ["task", "signed", "scaled", "heavy"]


def test_a_second_evaluation_of_the_same_source_reuses_the_compiled_extension(full_sandbox, warm_builds):
    r = full_sandbox.evaluate(RELU_TASK, load_candidate("honest_relu_cpu"))
    assert r.status == "correct", r.feedback
    # a cache hit imports a built .so: seconds, where a build takes tens of seconds on this machine
    assert r.details["compile_seconds"] < warm_builds["relu"].details["compile_seconds"]


def test_the_timed_calls_are_rechecked_while_the_timing_still_holds_the_device(full_sandbox, warm_builds, monkeypatch):
    # asking for the device again after the timing queued each kernel behind every timing waiting by then; the
    # timing's hold, shared once the worker released the device, is still held: (not alone, one shared holder)
    from kevin.sandbox import _judge
    from kevin.sandbox.sandbox import device_gate

    gate, held = device_gate("cpu", "cpu"), []
    compare_outputs = _judge.compare.compare_outputs

    def spy(*args, **kwargs):
        if "recheck" in kwargs.get("label", ""):
            held.append((gate._exclusive, gate._shared))
        return compare_outputs(*args, **kwargs)

    monkeypatch.setattr(_judge.compare, "compare_outputs", spy)
    r = full_sandbox.evaluate(RELU_TASK, load_candidate("honest_relu_cpu"))
    assert r.status == "correct", r.feedback
    assert held and all(h == (False, 1) for h in held), held


def test_a_kernel_holds_the_device_for_its_checks_twice_and_never_asks_again_after_a_run(full_sandbox, warm_builds,
                                                                                           monkeypatch):
    # once for the built-library check after the compile, once for the correctness run; the comparisons and the
    # library checks after each run happen inside the hold they follow, so none waits behind a queue of timings
    import contextlib

    from kevin.sandbox.sandbox import device_gate

    gate, entries = device_gate("cpu", "cpu"), []
    shared = gate.shared

    @contextlib.contextmanager
    def counted(timeout=None):
        entries.append(1)
        with shared(timeout):
            yield

    full_sandbox.evaluate(RELU_TASK, load_candidate("honest_relu_cpu"))  # its task's golden data computed before
    monkeypatch.setattr(gate, "shared", counted)
    r = full_sandbox.evaluate(RELU_TASK, load_candidate("honest_relu_cpu"))
    assert r.status == "correct", r.feedback
    assert len(entries) == 2, entries


def test_evaluate_many_returns_results_in_job_order(full_sandbox, warm_builds):
    jobs = [
        (RELU_TASK, load_candidate("b1_zeros_output")),
        (RELU_TASK, load_candidate("honest_relu_cpu")),
        (RELU_TASK, "this is not python ("),
    ]
    statuses = [r.status for r in full_sandbox.evaluate_many(jobs)]
    assert statuses == ["format_error", "correct", "format_error"]


def test_verdicts_are_json_serialisable_records(warm_builds):
    import json

    from kevin.sandbox import EvalResult

    d = json.loads(json.dumps(warm_builds["relu"].to_dict()))
    assert EvalResult.from_dict(d).status == "correct"


def test_the_fresh_interpreter_path_without_the_zygote_gives_the_same_verdicts(cache_dir, warm_builds):
    # prefork=False: one new Python interpreter per candidate
    sandbox = Sandbox("cpu", _config(cache_dir, prefork=False))
    honest, zeros = sandbox.evaluate_many([(RELU_TASK, load_candidate("honest_relu_cpu")),
                                           (RELU_TASK, load_candidate("b1_zeros_output"))])
    assert honest.status == "correct", honest.feedback
    assert zeros.status == "format_error"
    assert honest.details["forked"] is False


def test_candidates_are_forked_from_the_zygote_by_default(warm_builds):
    assert warm_builds["relu"].details["forked"] is True


def test_the_timeline_runs_compile_then_checks_then_timing(warm_builds):
    marks = warm_builds["relu"].details["timeline"]  # seconds since the candidate's pipeline started
    order = ("start", "spawned", "compiled", "golden", "checks", "checked", "timing", "timed", "done")
    assert [marks[k] for k in order] == sorted(marks[k] for k in order)
    assert marks["timing"] >= marks["checked"]  # the timing began only after the correctness runs had ended


def test_the_timing_hold_is_shared_from_the_workers_release_until_its_report(warm_builds):
    # the device is held alone from "timing" to "shared" (the timed loop over, the worker's memory freed); the
    # rechecks are compared after, beside others
    marks = warm_builds["relu"].details["timeline"]
    assert marks["timing"] <= marks["timing_end"] <= marks["shared"] <= marks["timed"]


def test_the_wall_check_of_an_honest_candidate_times_its_marks_by_the_kernels_send_stamps(warm_builds):
    # every mark's datagram arrived, in order: the parent's own reading lag is out of the figure
    assert warm_builds["relu"].details["wall_check"]["clock"] == "sent"


def test_the_wall_check_also_records_what_arrival_times_alone_would_have_said(warm_builds):
    by_arrival = warm_builds["relu"].details["wall_check"]["by_arrival"]
    assert isinstance(by_arrival["ok"], bool) and isinstance(by_arrival["implied_ms"], float)
