"""Crash containment: every way a candidate can die or hang ends as a status with feedback."""

import os
import re
import time
from pathlib import Path

from sandbox_cases import RELU_TASK, _config, load_candidate
from kevin.sandbox import Sandbox, SandboxConfig


def test_a_segfault_in_forward_is_a_runtime_error_naming_the_signal(dynamic_sandbox, warm_builds):
    r = dynamic_sandbox.evaluate(RELU_TASK, load_candidate("crash_segfault"))
    assert r.status == "runtime_error"
    assert "SIGSEGV" in r.feedback


def test_os_exit_zero_while_loading_is_a_runtime_error_not_a_pass(dynamic_sandbox, warm_builds):
    r = dynamic_sandbox.evaluate(RELU_TASK, load_candidate("e2_os_exit_import"))
    assert r.status == "runtime_error"
    assert "exit code 0" in r.feedback


def test_os_exit_zero_in_forward_is_a_runtime_error_not_a_pass(dynamic_sandbox, warm_builds):
    r = dynamic_sandbox.evaluate(RELU_TASK, load_candidate("e2_os_exit_forward"))
    assert r.status == "runtime_error"
    assert "exit code 0" in r.feedback


def test_a_huge_allocation_fails_inside_the_candidate_under_its_memory_limit(dynamic_sandbox, warm_builds):
    r = dynamic_sandbox.evaluate(RELU_TASK, load_candidate("crash_huge_allocation"))
    assert r.status == "runtime_error"
    assert "allocate" in r.feedback


def test_an_infinite_loop_is_a_timeout_and_its_process_group_is_killed(cache_dir, warm_builds):
    sandbox = Sandbox("cpu", _config(cache_dir, static_checks=False, kernel_inventory=False, run_timeout_s=8.0))
    r = sandbox.evaluate(RELU_TASK, load_candidate("crash_infinite_loop"))
    assert r.status == "timeout"
    assert "did not finish within 8 s" in r.feedback


def test_a_hung_forward_is_stopped_a_floor_beyond_the_references_time_not_after_the_whole_run_limit(cache_dir,
                                                                                                   warm_builds):
    # the correctness run shares its device and every timing waits for it: its limit is checks_floor_s (4 s) plus
    # 100x the reference's time on the sets (ReLU at CPU sizes: milliseconds in all), not run_timeout_s (60 s)
    sandbox = Sandbox("cpu", _config(cache_dir, static_checks=False, kernel_inventory=False, run_timeout_s=60.0,
                                     checks_floor_s=4.0))
    t0 = time.monotonic()
    r = sandbox.evaluate(RELU_TASK, load_candidate("crash_infinite_loop"))
    assert r.status == "timeout"
    assert re.search(r"did not finish within 4(\.\d)? s", r.feedback), r.feedback
    assert time.monotonic() - t0 < 40.0


def test_an_unmeasured_reference_leaves_the_correctness_run_its_whole_run_limit():
    # no reference time (measure_speed=False): min(run_timeout_s) = 60 s; measured 2 ms, 5 sets: 10 + 100*5*0.002 = 11 s
    config = SandboxConfig()
    assert config.checks_timeout_s(None, 5) == 60.0
    assert config.checks_timeout_s(2.0, 5) == 11.0
    assert config.checks_timeout_s(1000.0, 5) == 60.0  # 10 + 500 s, capped by run_timeout_s


def test_a_python_error_in_forward_is_a_runtime_error_with_the_traceback(dynamic_sandbox, warm_builds):
    src = load_candidate("honest_relu_cpu").replace("return self.ext.relu_forward(x)", "return self.ext.no_such_function(x)")
    r = dynamic_sandbox.evaluate(RELU_TASK, src)
    assert r.status == "runtime_error"
    assert "no_such_function" in r.feedback


def test_a_program_that_fails_to_load_is_a_compile_error_with_the_message(dynamic_sandbox):
    # (A real compiler error costs a ~30 s build here; its trimming is tested in test_feedback.py and a
    # real nvcc error runs in the GPU tests.)
    src = load_candidate("honest_relu_cpu") + "\ndef broken(:\n"
    r = dynamic_sandbox.evaluate(RELU_TASK, src)
    assert r.status == "compile_error"
    assert "SyntaxError" in r.feedback


def test_a_segfault_is_contained_without_the_zygote_too(cache_dir, warm_builds):
    sandbox = Sandbox("cpu", _config(cache_dir, static_checks=False, kernel_inventory=False, prefork=False))
    r = sandbox.evaluate(RELU_TASK, load_candidate("crash_segfault"))
    assert r.status == "runtime_error" and "SIGSEGV" in r.feedback


def test_a_build_killed_by_the_compile_timeout_leaves_no_stale_build_lock(cache_dir, warm_builds):
    # a never-built variant of the shared extension (a unique macro: its main.o too is new, and no precompiled
    # header matches its flags): its build takes ~20 s here
    src = load_candidate("honest_relu_cpu").replace('extra_cflags=["-O3"],', f'extra_cflags=["-O3", "-DK{time.time_ns()}"],', 1)
    assert "-DK" in src
    sandbox = Sandbox("cpu", _config(cache_dir, compile_timeout_s=5.0))
    r = sandbox.evaluate(RELU_TASK, src)
    assert r.status == "timeout"
    assert not list(Path(cache_dir, "ext").glob("*/lock"))


def test_a_batch_with_a_hung_load_and_a_hung_forward_still_judges_the_others(cache_dir, warm_builds):
    # On the CPU backend a load (compiling) and a correctness run hold the cores, so the honest candidates are timed
    # once the stragglers' own limits (15 s, 10 s) stopped them; the batch returns by its 60 s deadline
    honest = load_candidate("honest_relu_cpu")
    hung_load = honest + "\nwhile True:\n    pass\n"
    sandbox = Sandbox("cpu", _config(cache_dir, static_checks=False, kernel_inventory=False, compile_timeout_s=15.0,
                                     run_timeout_s=10.0))
    t0 = time.monotonic()
    results = sandbox.evaluate_many([(RELU_TASK, honest), (RELU_TASK, hung_load),
                                     (RELU_TASK, load_candidate("crash_infinite_loop")), (RELU_TASK, honest)],
                                    deadline_s=60.0)
    assert time.monotonic() - t0 < 60.0 + 10.0
    assert [r.status for r in results] == ["correct", "timeout", "timeout", "correct"], [r.feedback for r in results]
    assert "compile" in results[1].details["phase_seconds"]
    assert "correctness" in results[2].details["phase_seconds"]


def test_the_deadline_stops_candidates_whose_own_limits_are_far_away(cache_dir, warm_builds):
    # three loads that never end, a 180 s compile limit, a 15 s deadline: all three are stopped by the deadline
    hung_load = load_candidate("honest_relu_cpu") + "\nwhile True:\n    pass\n"
    sandbox = Sandbox("cpu", _config(cache_dir, static_checks=False, kernel_inventory=False, compile_timeout_s=180.0))
    t0 = time.monotonic()
    results = sandbox.evaluate_many([(RELU_TASK, hung_load)] * 3, deadline_s=15.0)
    assert time.monotonic() - t0 < 15.0 + 10.0
    assert [r.status for r in results] == ["timeout"] * 3
    assert all(r.details["batch_deadline"] and "time ran out" in r.feedback for r in results)


def test_a_cancel_can_reach_the_worker_because_it_leads_its_group_before_the_job_names_it(dynamic_sandbox,
                                                                                          warm_builds, monkeypatch):
    # A cancel (the batch's deadline) kills the job's worker through its process group, found by the job's ``run``.
    # Named before the worker leads its group, a cancel would find no group and the worker would compile on past the
    # deadline. So the job is named only once it leads one.
    import kevin.sandbox.sandbox as sb

    events = []
    wait_for_group, set_attribute = sb.wait_for_group, sb._JobState.__setattr__

    def waited(pid, *args, **kwargs):
        wait_for_group(pid, *args, **kwargs)
        events.append(("leads its group", os.getpgid(pid) == pid))

    def named(state, name, value):
        if name == "run" and value is not None:
            events.append(("named", True))
        set_attribute(state, name, value)

    monkeypatch.setattr(sb, "wait_for_group", waited)
    monkeypatch.setattr(sb._JobState, "__setattr__", named)
    r = dynamic_sandbox.evaluate(RELU_TASK, load_candidate("honest_relu_cpu"))
    assert r.status == "correct"
    assert events[:2] == [("leads its group", True), ("named", True)]


def test_every_result_says_where_its_time_went(dynamic_sandbox, warm_builds):
    r = dynamic_sandbox.evaluate(RELU_TASK, load_candidate("honest_relu_cpu"))
    assert {"queue", "compile", "golden", "correctness", "timing"} <= set(r.details["phase_seconds"])


def test_a_deadline_must_be_positive(dynamic_sandbox):
    import pytest

    with pytest.raises(ValueError, match="deadline_s"):
        dynamic_sandbox.evaluate_many([(RELU_TASK, "x")], deadline_s=0)


def test_an_out_of_memory_error_is_judged_again_alone_and_stays_a_runtime_error(dynamic_sandbox, warm_builds):
    r = dynamic_sandbox.evaluate(RELU_TASK, load_candidate("crash_out_of_memory"))
    assert r.status == "runtime_error"
    assert "out of memory" in r.feedback
    assert r.details["judged_again_alone"]["out_of_memory"] == "forward on input set 0"


def test_an_honest_kernel_short_of_memory_once_is_judged_correct_on_its_second_run(dynamic_sandbox, warm_builds,
                                                                                   tmp_path):
    # the first run's process raises the device's out-of-memory error, as another process's memory can make it
    # do; judged again from a fresh process with the device alone, it computes and passes
    src = load_candidate("honest_relu_short_of_memory_once").replace("MARKER_PATH", str(tmp_path / "ran"))
    r = dynamic_sandbox.evaluate(RELU_TASK, src)
    assert r.status == "correct", r.feedback
    assert (tmp_path / "ran").exists()
    assert "out_of_memory" in r.details["judged_again_alone"]
