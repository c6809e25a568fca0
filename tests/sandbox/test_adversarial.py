"""One adversarial candidate per attack of docs/threat-model.md that applies to the CPU backend.

Each must end not-correct with a reason. Three layers are proven separately:

- `full_sandbox`: everything on (what training uses);
- `inventory_sandbox`: static checks bypassed, so the runtime operator inventory must catch A1-A5/E4;
- `dynamic_sandbox`: static checks and inventory bypassed, so the value, protocol and process checks must
  catch the rest on their own.
"""

import json
from pathlib import Path

import pytest

from kevin.sandbox import Sandbox
from sandbox_cases import RELU_TASK, ROW_SUM_TASK, _config, load_candidate

# Caught by the static layer alone (no process is started for these).
STATIC = [
    "a1_reference_op_python", "a2_aten_call_cpp", "a3_try_except_fallback", "a4_inherit_reference",
    "a5_ghost_branch", "a6_torch_compile", "b1_zeros_output", "b6_half_precision_output",
    "b7_read_reference_frames", "c2_numerics_flags", "c3_monkeypatch_allclose", "c4_patch_input_generator",
    "d2_background_thread", "d3_lazy_tensor_subclass", "d6_timer_monkeypatch", "d6_timer_replaced_between_audits",
    "c1_input_mutation_hidden_for_one_set", "c6_clone_hook_between_calls",
    "c6_dispatch_mode_left_entered", "d6_forge_call_count_and_median", "e2_os_exit_import",
    "e4_obfuscated_exec",
    # each once judged correct: ATen's CPU kernel reached by argument-dependent lookup;
    # numpy compute on dict-laundered tensors; a frame walk through a generator to skip unchecked timed calls;
    # a native thread spelled `thread` after `using namespace std`
    "a9_aten_backend_kernel_via_adl", "a10_numpy_compute_on_laundered_tensors", "b11_frame_walk_through_generator",
    "d7_native_thread_after_using_namespace_std",
    # each once a hole in the static layer: standard-library and harness modules reached as attributes
    # of allowed packages, a module laundered through a list, the Python C API behind C++ line splicing, work
    # handed to ATen's and c10's thread pools
    "e7_stdlib_module_via_torch_alias", "e7_os_via_from_import_alias", "e7_subprocess_via_cpp_extension_alias",
    "e7_module_laundered_through_a_list", "e8_python_c_api_via_line_splice", "d8_aten_thread_pool_launch",
    "d8_c10_thread_pool",
    # once judged correct, or holding the Sandbox: a forged report line, a signal to the fork server
    "e9_forge_imported_before_loading", "e10_stop_the_fork_server", "e9_forge_timing_marks_to_share_early",
    "e9_forge_timing_marks_from_the_timed_loop",
]


@pytest.mark.parametrize("name", STATIC)
def test_the_static_layer_rejects_the_attack_before_compiling(full_sandbox, name):
    r = full_sandbox.evaluate(RELU_TASK, load_candidate(name))
    assert r.status == "format_error", r.feedback
    assert r.details["violations"]


# Pure-Python or C++ delegation to PyTorch, seen at run time by the operator inventory.
INVENTORY = {
    "a1_reference_op_python": "aten.relu",
    "a2_aten_call_cpp": "aten.relu",
    "a3_try_except_fallback": "aten.relu",
    "a4_inherit_reference": "aten.relu",
    "a5_ghost_branch": "aten.clamp",
    "a7_disable_python_dispatch": "aten.relu",
    "e4_obfuscated_exec": "aten.relu",
}


@pytest.mark.parametrize("name", sorted(INVENTORY))
def test_the_operator_inventory_rejects_delegation_to_pytorch_without_static_checks(inventory_sandbox, warm_builds, name):
    r = inventory_sandbox.evaluate(RELU_TASK, load_candidate(name))
    assert r.status == "format_error", r.feedback
    assert INVENTORY[name] in r.feedback


# (candidate, task, words the reason must contain): the dynamic gate alone.
DYNAMIC = {
    "b1_zeros_output": (RELU_TASK, "differs from the reference"),
    "b1_constant_output": (RELU_TASK, "differs from the reference"),
    "b2_input_passthrough": (RELU_TASK, "shares memory with an input"),
    "b2_input_copy": (RELU_TASK, "(signed)"),
    "b3_analytic_row_sum": (ROW_SUM_TASK, "differs from the reference"),
    "b4_subsampled_row_sum": (ROW_SUM_TASK, "differs from the reference"),
    "b5_uninitialized_output_cpp": (RELU_TASK, "NaN"),
    "b5_partial_write_cpp": (RELU_TASK, "NaN"),
    "b6_half_precision_output": (RELU_TASK, "dtype torch.float16"),
    "b7_read_reference_frames": (RELU_TASK, "differs from the reference"),
    "b8_fixed_seed_replay": (RELU_TASK, "differs from the reference"),
    "c1_input_mutation": (RELU_TASK, "modified its input"),
    "c2_numerics_flags": (RELU_TASK, "numerics flag changed"),
    "c3_monkeypatch_allclose": (RELU_TASK, "torch.allclose was replaced"),
    "c4_patch_input_generator": (RELU_TASK, "differs from the reference"),  # inputs come from elsewhere
    "c5_first_n_calls_correct": (RELU_TASK, "timed call"),
    "d2_background_thread": (RELU_TASK, "Python thread"),
    "d3_lazy_tensor_subclass": (RELU_TASK, "not exactly a torch.Tensor"),
    "d4_cache_by_data_ptr": (RELU_TASK, "differs from the reference"),
    "d4_skip_rearranged_seen_inputs": (RELU_TASK, "timed call"),
    "d4_tables_over_rotated_inputs": (ROW_SUM_TASK, "timed call"),
    "e6_read_recheck_inputs_file": (RELU_TASK, "timed call"),
    "b10_output_in_foreign_memory": (RELU_TASK, "not in memory from PyTorch's allocator"),
    "c6_override_harness_clone": (RELU_TASK, "kernels for aten::clone were changed"),
    "c5_compute_only_at_reused_addresses": (RELU_TASK, "timed call"),
    "d6_timer_monkeypatch": (RELU_TASK, "time.perf_counter was replaced"),
    # judged correct while the harness's objects were audited only before and after the timing loop;
    # forward call 20 patches: 4 correctness sets + 5 warm-up calls = 9, so timed call 0 is call 10 and call 20 is 10
    "d6_timer_replaced_between_audits": (RELU_TASK, "timed call 10: time.perf_counter was replaced"),
    # judged correct while the correctness sets were audited once, after the last one
    "c1_input_mutation_hidden_for_one_set": (RELU_TASK, "input set 1: torch.equal was replaced"),
    # judged correct while the dispatcher was compared only after the sets and after the loop
    "c6_clone_hook_between_calls": (RELU_TASK, "the dispatcher's kernels for aten::clone were changed"),
    # judged correct while no tripwire looked at the thread's state, where a mode lives
    "c6_dispatch_mode_left_entered": (RELU_TASK, "timed call 0: torch dispatch modes entered changed: 0 -> 1"),
    # once judged correct at 30,296x: it replaces the report channel's send; the channel is now tripwired (the parent
    # also takes the median itself and checks the call count: tests/sandbox/test_judge.py)
    "d6_forge_call_count_and_median": (RELU_TASK, "kevin.sandbox.worker.channel.Channel.send was replaced"),
    "d6_fake_verdict_stdout": (RELU_TASK, "differs from the reference"),
    "d6_forge_report_channel": (RELU_TASK, "differs from the reference"),
    # the hold is shared early only on marks in order, received after "time" was sent; the harness's own follow
    "e9_forge_timing_marks_to_share_early": (RELU_TASK, "mark was sent more than once (a forged report line)"),
    "e9_forge_timing_marks_from_the_timed_loop": (RELU_TASK, "mark was sent more than once (a forged report line)"),
}


_dynamic_verdicts: dict = {}


def _dynamic_verdict(sandbox, name):
    """The dynamic gate's verdict on attack ``name``, evaluated once for the tests that read it."""
    if name not in _dynamic_verdicts:
        _dynamic_verdicts[name] = sandbox.evaluate(DYNAMIC[name][0], load_candidate(name))
    return _dynamic_verdicts[name]


@pytest.mark.parametrize("name", sorted(DYNAMIC))
def test_the_dynamic_gate_alone_rejects_the_attack_with_a_reason(dynamic_sandbox, warm_builds, name):
    r = _dynamic_verdict(dynamic_sandbox, name)
    assert r.status == "incorrect", r.feedback
    assert DYNAMIC[name][1] in r.feedback, r.feedback


# (attack, the rule family its rejection names in details["rules"], which the run's hack telemetry counts)
DYNAMIC_RULES = {
    "c1_input_mutation": "dynamic/input_mutation",
    "b2_input_passthrough": "dynamic/aliasing",
    "d2_background_thread": "dynamic/threads",
    "c3_monkeypatch_allclose": "dynamic/tripwire",
    "b10_output_in_foreign_memory": "dynamic/outputs",
    "d6_timer_replaced_between_audits": "dynamic/timed_calls",
}


@pytest.mark.parametrize("name", sorted(DYNAMIC_RULES))
def test_a_dynamic_rejection_names_its_rule_family(dynamic_sandbox, warm_builds, name):
    r = _dynamic_verdict(dynamic_sandbox, name)
    assert DYNAMIC_RULES[name] in r.details["rules"], r.details


def test_a_static_rejection_names_its_rule_families_before_anything_is_built(full_sandbox):
    src = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
           "        try:\n            return torch.relu(x)\n        except RuntimeError:\n            return x\n")
    r = full_sandbox.evaluate(RELU_TASK, src)
    assert r.status == "format_error", r.feedback
    # the try block, torch.relu on the forward path, and no load_inline: three families, each named once
    assert r.details["rules"] == ["format/fallbacks", "format/forward_path", "format/load_inline"], r.details


@pytest.mark.parametrize("name", ["c1_input_mutation", "c5_first_n_calls_correct", "d4_cache_by_data_ptr",
                                  "d4_skip_rearranged_seen_inputs", "c5_compute_only_at_reused_addresses"])
def test_attacks_the_static_layer_cannot_see_are_rejected_by_the_full_sandbox(full_sandbox, warm_builds, name):
    r = full_sandbox.evaluate(RELU_TASK, load_candidate(name))
    assert r.status == "incorrect", r.feedback


def test_a_pointer_keyed_cache_is_caught_by_the_recheck_of_a_timed_call_at_a_reused_address(dynamic_sandbox, warm_builds):
    # Correctness calls may or may not reuse an address; the first recheck always does (golden content
    # copied into the previous timed call's buffers), so the cached stale output must surface there.
    r = dynamic_sandbox.evaluate(RELU_TASK, load_candidate("d4_cache_by_data_ptr"))
    assert r.status == "incorrect"
    assert "timed call" in r.feedback or "input set" in r.feedback


def test_a_candidate_cannot_carry_state_between_evaluations_through_its_scratch_directory(dynamic_sandbox, warm_builds):
    src = load_candidate("e1_persist_scratch")
    first = dynamic_sandbox.evaluate(RELU_TASK, src)
    second = dynamic_sandbox.evaluate(RELU_TASK, src)
    assert (first.status, second.status) == ("incorrect", "incorrect"), second.feedback


def test_secrets_in_the_callers_environment_do_not_reach_the_candidate(dynamic_sandbox, warm_builds, monkeypatch):
    monkeypatch.setenv("KEVIN_TEST_SECRET", "hunter2")
    monkeypatch.setenv("API_TOKEN", "hunter2")
    r = dynamic_sandbox.evaluate(RELU_TASK, load_candidate("e3_read_env_secrets"))
    assert r.status == "incorrect", r.feedback


def test_a_candidate_that_rewrites_the_cached_baselines_cannot_change_any_speedup(cache_dir, dynamic_sandbox, warm_builds):
    honest = dynamic_sandbox.evaluate(RELU_TASK, load_candidate("honest_relu_cpu"))
    attack = dynamic_sandbox.evaluate(RELU_TASK, load_candidate("e5_poison_cached_baseline"))
    later = Sandbox("cpu", _config(cache_dir, static_checks=False, kernel_inventory=False)).evaluate(
        RELU_TASK, load_candidate("honest_relu_cpu"))
    poisoned = [json.loads(p.read_text()).get("baseline_ms") for p in Path(cache_dir, "baselines").glob("*.json")]
    assert 1000.0 in poisoned  # the attack did rewrite the files on disk
    # this Sandbox keeps its first timing; a new one times the reference afresh instead of reading the files
    assert (attack.status, attack.baseline_ms) == ("correct", honest.baseline_ms)
    assert later.baseline_ms < 100.0


def test_the_built_library_check_names_aten_called_from_cpp_whatever_its_spelling(inventory_sandbox, warm_builds):
    # the compiled extension imports at::_ops::relu::call; no spelling of the source can hide that symbol
    r = inventory_sandbox.evaluate(RELU_TASK, load_candidate("a2_aten_call_cpp"))
    assert r.status == "format_error", r.feedback
    assert "the built extension" in r.feedback and "aten.relu" in r.feedback


def test_the_built_library_check_reads_the_honest_extension_and_passes_it(warm_builds):
    check = warm_builds["relu"].details["symbol_check"]
    # one library: the split build's module is named for its bindings (kevin.sandbox.build.split.module_name)
    assert check["nm"] is True and len(check["libraries"]) == 1 and check["libraries"][0].endswith(".so")


def test_pytorch_compute_in_timed_calls_only_is_seen_by_the_watch_over_the_timing_loop(full_sandbox, warm_builds):
    # the candidate tells the correctness calls by their NaN-filled allocations and delegates afterwards
    r = full_sandbox.evaluate(RELU_TASK, load_candidate("a8_delegate_only_in_timed_calls"))
    assert r.status == "incorrect", r.feedback
    assert "aten.relu" in r.feedback and "timed call" in r.feedback


def test_kernelbench_rules_accept_an_nn_layer_held_only_for_its_weights(cache_dir, warm_builds):
    # the rules are the static checks' and the operator inventory's; untimed, so that the other test worker's load
    # cannot turn this into a test of the wall check (it once judged this kernel 1.022 ms a call against its 0.118)
    from sandbox_cases import LINEAR_RELU_TASK

    r = Sandbox("cpu", _config(cache_dir, rules="kernelbench", measure_speed=False)).evaluate(
        LINEAR_RELU_TASK, load_candidate("honest_kernelbench_linear_weights_cpu"))
    assert r.status == "correct", r.feedback


def test_kernelbench_rules_reject_the_held_layer_run_in_forward_even_without_static_checks(cache_dir, warm_builds):
    # the runtime inventory proves the layer's forward never runs: here it does (aten.addmm)
    from sandbox_cases import LINEAR_RELU_TASK

    r = Sandbox("cpu", _config(cache_dir, rules="kernelbench", static_checks=False)).evaluate(
        LINEAR_RELU_TASK, load_candidate("a11_kernelbench_layer_run_in_forward"))
    assert r.status == "format_error", r.feedback
    assert "aten.addmm" in r.feedback or "aten.linear" in r.feedback


def test_work_deferred_into_the_output_containers_iteration_is_rejected(dynamic_sandbox, warm_builds):
    # a list subclass computing in __iter__ would run when the harness reads it, outside the timed window
    r = dynamic_sandbox.evaluate(RELU_TASK, load_candidate("b12_lazy_output_container"))
    assert r.status == "incorrect", r.feedback
    assert "not exactly a torch.Tensor" in r.feedback


def test_a_forged_imported_line_does_not_skip_the_built_library_check(inventory_sandbox, warm_builds):
    # the libraries are checked again once the forward has run, when whatever it loaded is mapped
    r = inventory_sandbox.evaluate(RELU_TASK, load_candidate("e9_forge_imported_before_loading"))
    assert r.status == "format_error", r.feedback
    assert "aten.relu" in r.feedback


def test_forged_timing_marks_do_not_end_the_timings_hold_alone(dynamic_sandbox, warm_builds):
    r = _dynamic_verdict(dynamic_sandbox, "e9_forge_timing_marks_to_share_early")
    assert "shared" not in r.details["timeline"]  # they arrived before "time" was sent: the hold stayed alone


def test_timing_marks_forged_inside_the_timed_loop_share_the_hold_but_fail_the_kernel(dynamic_sandbox, warm_builds):
    # in order and after "time": the hold is shared early, and the harness's own marks, arriving again, reject it
    r = _dynamic_verdict(dynamic_sandbox, "e9_forge_timing_marks_from_the_timed_loop")
    assert "shared" in r.details["timeline"]
    assert r.status == "incorrect" and "timing_end mark was sent more than once" in r.feedback, r.feedback


def test_a_stopped_fork_server_is_replaced_and_holds_no_later_candidate(cache_dir, warm_builds, monkeypatch):
    # the first candidate stops the zygote at import; the next spawn waits SPAWN_TIMEOUT_S at most, then the
    # zygote is retired and a fresh one forks the candidates after it (a fork's answer takes well under a second:
    # 5 s here, where the default's 15 s would only lengthen the suite)
    import time

    from kevin.sandbox import _process

    monkeypatch.setattr(_process, "SPAWN_TIMEOUT_S", 5.0)
    sandbox = Sandbox("cpu", _config(cache_dir, static_checks=False))
    sandbox.evaluate(RELU_TASK, load_candidate("e10_stop_the_fork_server"))
    t0 = time.monotonic()
    first, second = (sandbox.evaluate(RELU_TASK, load_candidate("honest_relu_cpu")) for _ in range(2))
    assert (first.status, second.status) == ("correct", "correct"), (first.feedback, second.feedback)
    assert time.monotonic() - t0 < _process.SPAWN_TIMEOUT_S + 60
    assert second.details["forked"]
