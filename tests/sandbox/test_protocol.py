"""Input sets, seeds, the timing loop and argument checks: the pieces under the verdict, in-process."""

import os
import random
import subprocess
import sys
import time

import pytest
import numpy as np
import torch

from sandbox_cases import RELU_TASK
from kevin.data.task import Task
from kevin.sandbox import Sandbox, SandboxConfig, _process
from kevin.sandbox.worker import inputs as _inputs, timing
from kevin.sandbox._resolve import resolve_device


def test_derived_seeds_depend_on_the_secret_and_every_label():
    s = _inputs.derive_seed(7, "task", "set", 0)
    assert s == _inputs.derive_seed(7, "task", "set", 0)
    assert len({s, _inputs.derive_seed(8, "task", "set", 0), _inputs.derive_seed(7, "task", "set", 1)}) == 3


def test_the_signed_variant_gives_uniform_inputs_both_signs():
    x = torch.rand(1000)  # U[0, 1): never negative
    y = _inputs.apply_variant([x], "signed", torch.Generator().manual_seed(0))[0]
    assert (y < 0).any() and (y > 0).any() and torch.equal(y.abs(), x)


def test_the_heavy_variant_adds_outliers_and_leaves_integer_inputs_alone():
    x, idx = torch.randn(10_000), torch.arange(5)
    y, j = _inputs.apply_variant([x, idx], "heavy", torch.Generator().manual_seed(0))
    assert y.abs().max() > 5 * x.abs().max()
    assert j is idx


def test_subsample_zeroes_every_other_element_and_doubles_the_rest():
    assert _inputs.subsample([torch.tensor([1.0, 2.0, 3.0, 4.0])])[0].tolist() == [2.0, 0.0, 6.0, 0.0]


def test_fresh_inputs_have_new_addresses_and_new_content_with_the_same_values():
    pool = [[torch.arange(1000, dtype=torch.float32)]]
    fresh = timing.FreshInputs(pool, rng=random.Random(0), keep_alive_bytes=1 << 30)
    a, b = fresh(0)[0], fresh(1)[0]
    assert a.data_ptr() != b.data_ptr() and a.data_ptr() != pool[0][0].data_ptr()
    assert not torch.equal(a, pool[0][0])
    assert torch.equal(a.sort().values, pool[0][0])


def test_fresh_inputs_are_no_rotation_of_the_pool_set():
    # a rotation could be answered from tables built on the seen set (d4_tables_over_rotated_inputs)
    base = torch.arange(1000, dtype=torch.float32)
    a = timing.FreshInputs([[base]], rng=random.Random(1), keep_alive_bytes=1 << 30)(0)[0]
    shift = int((base == a[0]).nonzero()[0])  # if a == roll(base, s) then a[0] == base[-s]
    assert not torch.equal(a, torch.roll(base, -shift))


def test_a_cpu_permutation_keeps_every_value_of_any_dtype():
    gen = np.random.default_rng(0)
    for x in (torch.arange(6, dtype=torch.bfloat16), torch.tensor([True, False, False]), torch.arange(4) * (1 + 1j)):
        y = timing._numpy_permuted(x, gen)
        assert y.dtype == x.dtype and sorted(y.tolist(), key=abs) == sorted(x.tolist(), key=abs)


def test_a_recheck_reaches_its_call_through_the_same_permute_and_gather_as_any_call():
    # the source that seed 5's permutation turns into the golden content
    fresh = timing.FreshInputs([], rng=random.Random(0), keep_alive_bytes=1 << 30)
    golden = [torch.arange(100, dtype=torch.float32) * 3]
    assert torch.equal(fresh.make(fresh.source_for(golden, 5), 5)[0], golden[0])


def test_the_gpu_permutations_round_keys_are_six_per_tensor_new_for_every_tensor_and_seed():
    keys = timing._round_keys(7)
    first, second = list(next(keys)), list(next(keys))
    again, other = list(next(timing._round_keys(7))), list(next(timing._round_keys(8)))
    assert len(first) == 6 and len(set(first + second + other)) == 18 and again == first


def test_a_permutation_kernel_whose_bytes_are_not_the_built_ones_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(timing, "_PERMUTE", None)
    lib = tmp_path / "permute.so"
    lib.write_bytes(b"not the library the sandbox built")
    with pytest.raises(RuntimeError, match="hash differs"):
        timing.load_permute(str(lib), "0" * 64)
    assert timing._PERMUTE is None


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 2, 3, 4, 1000, 1024, 1 << 20, (1 << 20) + 7])
def test_the_gpu_permutation_moves_every_index_once_and_is_fixed_by_its_seed(permute_kernel, n):
    src = torch.arange(n, device="cuda")

    def gathered(seed):
        out = torch.full_like(src, -1)  # an index never written stays -1
        timing._permute(out, src, next(timing._round_keys(seed)), scatter=False)
        return out

    a, b, c = gathered(5), gathered(5), gathered(6)
    assert torch.equal(a.sort().values, src) and torch.equal(a, b)
    assert n <= 3 or not torch.equal(a, c)  # (of 3 indices or fewer, two seeds may well agree)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.float32, torch.float64, torch.complex128])
def test_the_gpu_scatter_undoes_the_gather_for_every_element_size(permute_kernel, dtype):
    x = (torch.arange(4099, device="cuda") % 251).to(dtype)  # 4099: not a power of two, so the walk cycles
    keys = next(timing._round_keys(11))
    moved, back = torch.empty_like(x), torch.full_like(x, 255)  # 255: no value of x (x % 251)
    timing._permute(moved, x, keys, scatter=False)
    timing._permute(back, moved, keys, scatter=True)
    assert torch.equal(back, x) and not torch.equal(moved, x)


@pytest.mark.gpu
def test_the_gpu_permutation_sends_neighbours_far_apart(permute_kernel):
    # no locality a roll or a blocked shuffle would keep: for a random permutation the mean distance between the
    # places of i and i + 1 is n / 3; a shift keeps it at 1
    n = 1 << 20
    p = torch.empty(n, dtype=torch.int64, device="cuda")
    timing._permute(p, torch.arange(n, device="cuda"), next(timing._round_keys(3)), scatter=False)
    assert (p[1:] - p[:-1]).abs().double().mean().item() > n / 4


@pytest.mark.gpu
def test_the_gpu_gather_puts_at_each_place_the_element_the_hosts_prp_names(permute_kernel):
    # the kernel and the library's host entry point run the same prp (tests/sandbox/build/test_harness.py checks
    # that one against the algorithm written out): out[i] = src[prp(i)], so with src = arange, out[i] = prp(i)
    n, keys, prp = 4099, next(timing._round_keys(9)), _host_prp(permute_kernel)
    out = torch.full((n,), -1, dtype=torch.int64, device="cuda")
    timing._permute(out, torch.arange(n, device="cuda"), keys, scatter=False)
    assert out.tolist() == [prp(i, n, keys, 0) for i in range(n)]


@pytest.mark.gpu
def test_the_gpu_scatter_puts_each_element_where_the_hosts_prp_sends_it(permute_kernel):
    # scatter: out[prp(i)] = src[i] (the kernel gathers through the inverse), so with src = arange, out[prp(i)] = i
    n, keys = 4099, next(timing._round_keys(10))
    out = torch.full((n,), -1, dtype=torch.int64, device="cuda")
    timing._permute(out, torch.arange(n, device="cuda"), keys, scatter=True)
    prp, placed = _host_prp(permute_kernel), out.tolist()
    assert [placed[prp(i, n, keys, 0)] for i in range(n)] == list(range(n))


def _host_prp(built):
    import ctypes

    host = ctypes.CDLL(built.path).kevin_prp
    host.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_int]
    host.restype = ctypes.c_ulonglong
    return host


@pytest.mark.gpu
def test_fresh_inputs_on_a_gpu_keep_every_value_at_new_addresses(permute_kernel):
    pool = [[torch.arange(1 << 20, dtype=torch.float32, device="cuda")]]
    fresh = timing.FreshInputs(pool, rng=random.Random(0), keep_alive_bytes=1 << 30)
    a, b = fresh(0)[0], fresh(1)[0]
    assert a.data_ptr() != b.data_ptr() and not torch.equal(a, b) and not torch.equal(a, pool[0][0])
    assert torch.equal(a.sort().values, pool[0][0]) and torch.equal(b.sort().values, pool[0][0])


@pytest.mark.gpu
def test_a_recheck_on_a_gpu_reaches_its_call_through_the_same_permute_and_gather_as_any_call(permute_kernel):
    fresh = timing.FreshInputs([], rng=random.Random(0), keep_alive_bytes=1 << 30)
    golden = [torch.arange(1 << 20, dtype=torch.float32, device="cuda") * 3, torch.arange(7, device="cuda")]
    out = fresh.make(fresh.source_for(golden, 5), 5)
    assert torch.equal(out[0], golden[0]) and torch.equal(out[1], golden[1])


@pytest.mark.gpu
def test_the_gpu_timing_loop_returns_each_rechecks_output_at_its_secret_position(permute_kernel):
    golden = [torch.full((4096,), 3.0, device="cuda")]
    run = timing.time_calls(lambda a: a[0] * 2, [[torch.randn(4096, device="cuda")]], device=torch.device("cuda"),
                            n_warmup=2, n_trials=12, budget_s=10, rng=random.Random(0), rechecks=[golden])
    (p,) = run.recheck_outputs
    assert len(run.samples_ms) == 12 and not run.errors
    assert torch.equal(run.recheck_outputs[p][0], torch.full((4096,), 6.0, device="cuda"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine the inputs are pinned")
def test_inputs_are_left_pageable_without_a_gpu():
    sets = [[torch.ones(4), 3]]
    assert timing.pin(sets, max_bytes=1 << 20) == 0 and not sets[0][0].is_pinned() and sets[0][1] == 3


@pytest.mark.gpu
def test_the_timings_inputs_are_pinned_in_place_and_copied_whole():
    x = torch.arange(1 << 24, dtype=torch.float32)
    sets = [[x.clone(), 7], [x * 2]]
    assert timing.pin(sets, max_bytes=1 << 30) == 2 * (1 << 24) * 4  # two float32 tensors of 2^24 elements
    assert sets[0][0].is_pinned() and sets[1][0].is_pinned() and sets[0][1] == 7
    on = timing.on_device(sets, torch.device("cuda"))
    sets[0][0].zero_()  # the asynchronous copy must be over when on_device returns
    assert torch.equal(on[0][0].cpu(), x) and torch.equal(on[1][0].cpu(), x * 2) and on[0][1] == 7


def test_what_cannot_be_pinned_stays_pageable_and_the_pinned_bytes_are_counted(monkeypatch):
    calls = []

    def flaky(x):  # the driver pins the first tensor, then runs out of page-locked memory
        calls.append(x)
        if len(calls) > 1:
            raise RuntimeError("out of pinned memory")
        return x.clone()

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(timing, "_PIN_MEMORY", flaky)
    a, b = torch.ones(4), torch.ones(8)
    sets = [[a], [b]]
    assert timing.pin(sets, max_bytes=1 << 20) == 16  # a's 4 float32 elements; b left as it was
    assert sets[0][0] is not a and sets[1][0] is b


@pytest.mark.gpu
def test_inputs_past_the_cap_stay_pageable():
    sets = [[torch.ones(1024)]]
    assert timing.pin(sets, max_bytes=4095) == 0 and not sets[0][0].is_pinned()  # 1024 x 4 bytes > 4095


def test_the_timing_loop_returns_each_rechecks_output_at_its_secret_position():
    seen = []

    def call(args):
        seen.append(args[0].clone())
        return args[0] * 2

    golden = [torch.full((8,), 3.0)]
    run = timing.time_calls(call, [[torch.ones(8)]], device=torch.device("cpu"), n_warmup=1, n_trials=12,
                            budget_s=10, rng=random.Random(0), rechecks=[golden])
    (p,) = run.recheck_outputs
    assert len(run.samples_ms) == 12
    assert torch.equal(seen[1 + p], torch.full((8,), 3.0))  # that call got the golden content
    assert torch.equal(golden[0], torch.zeros(8))  # which was not left lying in memory before it
    assert torch.equal(run.recheck_outputs[p][0], torch.full((8,), 6.0))


def test_every_timed_call_is_followed_by_the_same_audit_and_a_kept_copy():
    # an ordinary call and a rechecked one must look alike from inside: the full audit after each, never a lighter one
    asked = []
    timing.time_calls(lambda a: a[0] * 2, [[torch.ones(8)]], device=torch.device("cpu"), n_warmup=2, n_trials=10,
                      budget_s=10, rng=random.Random(0), rechecks=[[torch.ones(8)], [torch.ones(8)]],
                      audit=lambda full: asked.append(full) or [])
    assert asked == [True] * 12  # 2 warm-up calls, then 10 timed calls


def test_a_recheck_is_not_told_apart_by_its_permutation_being_drawn_twice(monkeypatch):
    # a recheck's permutation is drawn once for its source before the loop and again at its call; every ordinary
    # call's must be too, or a hook that fingerprints the harness's permutations sees "drawn before" only for rechecks
    seeds = []
    real = timing.FreshInputs._indices
    monkeypatch.setattr(timing.FreshInputs, "_indices", lambda self, seed, ts: seeds.append(seed) or real(self, seed, ts))
    timing.time_calls(lambda a: a[0] * 2, [[torch.ones(8)]], device=torch.device("cpu"), n_warmup=2, n_trials=10,
                      budget_s=10, rng=random.Random(0), rechecks=[[torch.ones(8)], [torch.ones(8)]])
    timed = seeds[2 + 10:]  # 2 warm-up draws, 10 drawn before the loop, then one per timed call
    assert len(timed) == 10 and seeds[2:2 + 10] == timed  # each timed call's seed was drawn, in order, before the loop


def test_a_pointer_keyed_cache_meets_a_recheck_in_place_and_one_in_new_buffers_wherever_the_rechecks_fall():
    # 2 rechecks among 3 timed calls, each timed call led by null calls (segments of 1): one recheck must get its input
    # at the address of the forward's previous call (a pointer-keyed cache hits and replays a stale output), the other
    # at a new one, whatever the positions; a null call's buffers, which the forward never saw, do not count
    for seed in range(12):
        ptrs = []  # the forward's calls only: 1 warm-up, then the 3 timed calls
        run = timing.time_calls(lambda a: ptrs.append(a[0].data_ptr()) or a[0] * 2, [[torch.ones(8)]],
                                device=torch.device("cpu"), n_warmup=1, n_trials=3, budget_s=10,
                                rng=random.Random(seed), rechecks=[[torch.ones(8)], [torch.ones(8)]],
                                null_call=lambda a: torch.empty(8), mark=lambda *a, **k: None)
        same = [ptrs[1 + p] == ptrs[p] for p in run.recheck_outputs]  # timed call p against the call before it
        assert sorted(same) == [False, True], (seed, list(run.recheck_outputs), ptrs)


def test_the_timing_loops_buffers_are_freed_when_it_returns_not_left_to_the_cyclic_gc():
    # the process reports (and the parent hands the device on) right after timing: a reference cycle in the loop's
    # closures kept its fresh inputs and kept copies (gigabytes at KernelBench sizes) until a garbage collection
    import gc

    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds goes to gc.garbage instead of being freed
    try:
        run = timing.time_calls(lambda a: a[0] * 2, [[torch.ones(64)]], device=torch.device("cpu"), n_warmup=2,
                                n_trials=10, budget_s=10, rng=random.Random(0), rechecks=[[torch.ones(64)]],
                                null_call=lambda a: torch.empty(64), mark=lambda *a, **k: None)
        del run
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, torch.Tensor)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []


def test_the_loop_length_is_fixed_before_the_first_timed_call():
    # a slow call (about 20 ms) against a 0.3 s budget: 0.3 / 0.02 = 15 calls, never under MIN_TRIALS
    def call(args):
        time.sleep(0.02)
        return args[0] * 2

    run = timing.time_calls(call, [[torch.ones(8)]], device=torch.device("cpu"), n_warmup=2, n_trials=100,
                            budget_s=0.3, rng=random.Random(0), rechecks=[[torch.ones(8)]] * 3)
    assert timing.MIN_TRIALS <= len(run.samples_ms) <= 15
    assert all(p < len(run.samples_ms) for p in run.recheck_outputs)


def test_the_budget_counts_the_fresh_inputs_drawn_for_each_call_not_the_call_alone(monkeypatch):
    # an instant call whose inputs take about 10 ms to draw, drawn twice per timed call (its own and the plan's):
    # a 0.3 s budget holds 0.3 / (0.010 + 0.010) = 15 calls at most (by the call alone it held all 100)
    def slow(draw):
        def drawn(self, *args):
            time.sleep(0.01)
            return draw(self, *args)
        return drawn

    monkeypatch.setattr(timing.FreshInputs, "make", slow(timing.FreshInputs.make))
    monkeypatch.setattr(timing.FreshInputs, "source_for", slow(timing.FreshInputs.source_for))
    run = timing.time_calls(lambda a: a[0] * 2, [[torch.ones(8)]], device=torch.device("cpu"), n_warmup=2,
                            n_trials=100, budget_s=0.3, rng=random.Random(0))
    assert timing.MIN_TRIALS <= len(run.samples_ms) <= 15


def test_null_calls_lead_every_segment_after_an_unmarked_null_block_and_the_marks_frame_them():
    from kevin.sandbox.worker import loop as _loop

    events = []
    real = lambda a: events.append("call") or a[0] * 2  # noqa: E731
    null = lambda a: events.append("null") or torch.empty(8)  # noqa: E731
    timing.time_calls(real, [[torch.ones(8)]], device=torch.device("cpu"), n_warmup=1, n_trials=10, budget_s=10,
                      rng=random.Random(0), null_call=null, mark=lambda name, i: events.append(f"{name}{i}"))
    expected = ["call"] + ["null"] * _loop.NULL_CALLS  # the warm-up call, then the unmarked null block
    for s, size in enumerate(_loop.segment_sizes(10)):
        expected += [f"null{s}"] + ["null"] * _loop.NULL_CALLS + [f"calls{s}"] + ["call"] * size
    assert events == expected + ["end5"]


def test_the_cpu_timing_loop_ignores_the_launch_cover():
    run = timing.time_calls(lambda a: a[0] * 2, [[torch.ones(8)]], device=torch.device("cpu"), n_warmup=1,
                            n_trials=3, budget_s=10, rng=random.Random(0), launch_cover_us=500.0)
    assert len(run.samples_ms) == 3 and run.cover_cycles == 0


def test_the_timing_loop_audits_after_every_call_and_reports_the_first_change_once():
    patched = []

    def call(args):  # replaces a trusted object during timed calls 2 and 3 (calls 3 and 4, after 1 warm-up)
        patched.append(len(patched) in (3, 4))
        return args[0] * 2

    audit = lambda recheck: ["time.perf_counter was replaced"] if patched[-1] else []  # noqa: E731
    run = timing.time_calls(call, [[torch.ones(8)]], device=torch.device("cpu"), n_warmup=1, n_trials=6,
                            budget_s=10, rng=random.Random(0), audit=audit)
    assert run.errors == ["timed call 2: time.perf_counter was replaced"]  # seen after call 2, not again at 3
    assert len(run.samples_ms) == 6  # the loop runs on: the verdict is the parent's


def test_the_launch_cover_keys_the_baseline_cache_and_cannot_be_negative():
    assert SandboxConfig(launch_cover_us=50.0).timing_settings() != SandboxConfig().timing_settings()
    with pytest.raises(ValueError, match="launch_cover_us"):
        SandboxConfig(launch_cover_us=-1.0)


def test_the_golden_process_times_the_baseline_with_the_configs_launch_cover(monkeypatch, tmp_path):
    from kevin.sandbox import _golden_run

    jobs = []

    class Stop(Exception):
        pass

    def fake_worker(module, job, **kwargs):
        jobs.append(job)
        raise Stop

    monkeypatch.setattr(_golden_run._process, "Worker", fake_worker)
    with pytest.raises(Stop):
        _golden_run.run_golden([("k", RELU_TASK.source)], root=str(tmp_path), gpu=None,
                               config=SandboxConfig(launch_cover_us=123.0), seed=0)
    assert jobs[0]["timing"]["launch_cover_us"] == 123.0


def test_median_of_an_even_count_is_the_mean_of_the_middle_pair():
    assert timing.median([4.0, 1.0, 3.0, 2.0]) == 2.5  # (2 + 3) / 2


def test_the_scrubbed_environment_drops_the_callers_secrets(monkeypatch, tmp_path):
    monkeypatch.setenv("KEVIN_TEST_SECRET", "hunter2")
    env = _process.scrubbed_env(str(tmp_path))
    assert "KEVIN_TEST_SECRET" not in env
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path)


def test_an_unknown_device_is_a_value_error():
    with pytest.raises(ValueError, match="unknown device"):
        Sandbox("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised where CUDA is absent")
def test_asking_for_cuda_without_cuda_is_a_clear_runtime_error():
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        resolve_device("cuda")


def test_a_task_without_model_is_a_value_error_before_anything_runs(tmp_path):
    sandbox = Sandbox("cpu", SandboxConfig(cache_dir=str(tmp_path)))
    bad = Task("bad", "import torch\ndef get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n")
    with pytest.raises(ValueError, match="Model"):
        sandbox.evaluate(bad, "class ModelNew: pass")


def test_importing_kevin_sandbox_does_not_import_torch():
    code = "import sys, kevin.sandbox; print('torch' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=_process.PACKAGE_ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False"


def test_the_config_rejects_nonsense():
    with pytest.raises(ValueError):
        SandboxConfig(n_input_sets=0)


@pytest.mark.parametrize("budget", [0.0, -1.0, float("nan"), float("inf")])
def test_the_config_rejects_a_timing_budget_that_is_not_a_positive_number_of_seconds(budget):
    with pytest.raises(ValueError, match="timing_budget_s"):
        SandboxConfig(timing_budget_s=budget)


def test_the_config_rejects_zero_gpu_sharers():
    with pytest.raises(ValueError, match="gpu_sharers"):
        SandboxConfig(gpu_sharers=0)  # no process could ever run a correctness set


def test_the_config_keeps_one_input_set_of_each_variant():
    with pytest.raises(ValueError, match="heavy-tailed"):
        SandboxConfig(n_input_sets=3)  # the fourth set is the heavy-tailed one


def test_the_config_needs_a_recheck_that_fits_in_the_trials():
    with pytest.raises(ValueError, match="n_rechecks"):
        SandboxConfig(n_rechecks=0)  # no timed call would be checked
    with pytest.raises(ValueError, match="n_rechecks"):
        SandboxConfig(n_trials=2, n_rechecks=3)
    assert SandboxConfig(n_rechecks=0, measure_speed=False).n_rechecks == 0  # nothing is timed


def test_task_sizes_for_the_backend_are_applied():
    t = Task("sized", RELU_TASK.source, sizes={"cpu": {"dim": 8}})
    assert "dim = 8" in t.source_for("cpu")


def _stored_golden(tmp_path, name):
    """A compute function for the golden of task ``name``, whose (empty) inputs file lies in its own directory."""
    from kevin.sandbox._golden_run import Golden

    d = tmp_path / f"golden-{name}" / name
    d.mkdir(parents=True)
    (d / "inputs.safetensors").write_bytes(b"")
    return lambda: Golden(name, inputs_path=str(d / "inputs.safetensors"))


def test_the_golden_cache_evicts_the_least_recently_used_task_only_once_nobody_uses_it(tmp_path):
    from kevin.sandbox.sandbox import _GoldenCache

    cache = _GoldenCache(capacity=1)
    cache.acquire("a", _stored_golden(tmp_path, "a"))  # "a" in use
    cache.acquire("b", _stored_golden(tmp_path, "b"))  # over capacity, but "a" is in use and "b" too: nothing goes
    assert set(cache.entries) == {"a", "b"}
    cache.release("a")  # "a" is free and least recently used: evicted, its directory deleted
    assert set(cache.entries) == {"b"}
    assert not (tmp_path / "golden-a").exists() and (tmp_path / "golden-b").exists()


def test_the_golden_cache_drops_the_least_recently_used_free_task_past_its_byte_budget(tmp_path):
    from kevin.sandbox._golden_run import Golden
    from kevin.sandbox.sandbox import _GoldenCache

    def make(name, n_bytes):
        d = tmp_path / f"golden-{name}" / name
        d.mkdir(parents=True)
        (d / "inputs.safetensors").write_bytes(b"x" * n_bytes)
        outputs = {"set0.out0": torch.zeros(25)}  # 25 float32 = 100 bytes
        return lambda: Golden(name, inputs_path=str(d / "inputs.safetensors"), outputs=outputs)

    cache = _GoldenCache(capacity=10, max_bytes=500)
    cache.acquire("a", make("a", 200))  # 200 + 100 = 300 bytes
    cache.release("a")
    cache.acquire("b", make("b", 100))  # 300 + 200 = 500: within the budget, both kept
    assert set(cache.entries) == {"a", "b"}
    cache.acquire("c", make("c", 0))  # 500 + 100 = 600 > 500: "a" (free, least recently used) goes
    assert set(cache.entries) == {"b", "c"}
    assert not (tmp_path / "golden-a").exists() and (tmp_path / "golden-b").exists()


def test_goldens_nobody_needs_are_dropped_while_the_disk_is_short_of_its_reserve(tmp_path, caplog):
    # a reserve larger than any disk: the disk is always short, so each task goes as soon as it is free
    from kevin.sandbox.sandbox import _GoldenCache

    cache = _GoldenCache(capacity=10, min_free=(str(tmp_path), 1 << 62))
    cache.acquire("a", _stored_golden(tmp_path, "a"))
    assert set(cache.entries) == {"a"}  # in use: kept however short the disk is
    cache.release("a")
    assert cache.entries == {} and not (tmp_path / "golden-a").exists()
    assert "golden data is dropped as soon as it is unused" in caplog.text  # said once, since it makes runs slow
    roomy = _GoldenCache(capacity=10, min_free=(str(tmp_path), 0))  # a reserve every disk meets
    roomy.acquire("b", _stored_golden(tmp_path, "b"))
    roomy.release("b")
    assert set(roomy.entries) == {"b"}


def test_a_new_golden_makes_room_on_a_short_disk_before_it_is_computed(tmp_path):
    from kevin.sandbox._golden_run import Golden
    from kevin.sandbox.sandbox import _GoldenCache

    cache = _GoldenCache(capacity=10)
    (tmp_path / "golden-a" / "a").mkdir(parents=True)
    cache.entries["a"] = Golden("a", inputs_path=str(tmp_path / "golden-a" / "a" / "inputs.safetensors"))
    cache.min_free = (str(tmp_path), 1 << 62)  # the disk is now short; "a" is free and unwanted
    seen = []
    cache.acquire("b", lambda: (seen.append(set(cache.entries)), Golden("b"))[1])
    assert seen == [set()]  # "a" was gone before "b" was computed


def test_a_golden_prefetched_for_queued_candidates_is_not_dropped_before_they_use_it(tmp_path):
    # On the H200 a batch's prefetch computed a task's golden and released it while the task's candidates still
    # queued; past the byte budget it was dropped at once and computed again for them.
    from kevin.sandbox._golden_run import Golden, file_signature
    from kevin.sandbox.sandbox import _GoldenCache

    made = []

    def make(name, n_bytes):
        def compute():
            made.append(name)
            d = tmp_path / f"golden-{name}-{len(made)}" / name
            d.mkdir(parents=True)
            path = str(d / "inputs.safetensors")
            (d / "inputs.safetensors").write_bytes(b"x" * n_bytes)
            return Golden(name, inputs_path=path, inputs_signature=file_signature(path))
        return compute

    cache = _GoldenCache(capacity=10, max_bytes=300)
    with cache.pinned("a"):  # a candidate of "a" is queued
        cache.acquire("a", make("a", 200))  # the prefetch computes "a" ...
        cache.release("a")  # ... and lets go of it: 200 bytes, within 300
        cache.acquire("b", make("b", 200))  # 400 > 300; "a" is wanted, "b" in use: nothing goes
        cache.release("b")  # "b" is free and unwanted: it goes, "a" stays
        assert set(cache.entries) == {"a"}
        cache.acquire("a", make("a", 200))  # the candidate gets the prefetched entry
        cache.release("a")
    assert made == ["a", "b"]
    assert set(cache.entries) == {"a"}  # 200 bytes, within the budget: kept for a later batch


def test_a_candidate_pins_its_tasks_golden_for_its_whole_evaluation(tmp_path, monkeypatch):
    # the cache keeps a pinned task's golden (test above); the pipeline must pin it before the candidate queues
    from kevin.sandbox import _resolve
    from kevin.sandbox.result import EvalResult

    sandbox = Sandbox("cpu", SandboxConfig(cache_dir=str(tmp_path), precompiled_header=False))
    seen = []
    monkeypatch.setattr(sandbox, "_stages", lambda task_src, src, state: (
        seen.append(dict(sandbox._golden.wanted)), EvalResult("format_error", "stub"))[1])
    sandbox._pipeline("task source", "candidate source")
    assert seen == [{_resolve.sha256("task source"): 1}]
    assert sandbox._golden.wanted == {}  # let go once judged


def test_golden_outputs_reach_the_parent_without_ever_being_written_to_disk(tmp_path):
    from kevin.sandbox._golden_run import run_golden

    g = run_golden([("relu", RELU_TASK.source)], root=str(tmp_path), gpu=None,
                   config=SandboxConfig(measure_speed=False), seed=3)["relu"]
    assert g.error is None
    assert torch.equal(g.outputs["set0.out0"], torch.relu(g.outputs["set0.out0"]))  # a ReLU output: no negatives
    files = sorted(p.name for p in tmp_path.rglob("*.safetensors"))
    assert files == ["inputs.safetensors"]


def test_golden_data_is_prefetched_once_per_task_while_candidates_compile(tmp_path):
    import threading
    import time as _time

    from kevin.sandbox import _golden_run

    # no disk reserve: on a machine with little free disk the cache would drop the prefetched golden at once
    sb = Sandbox("cpu", SandboxConfig(cache_dir=str(tmp_path), seed=1, min_free_disk_bytes=None))
    sb.backend = "cuda"  # prefetching is CUDA-only; the golden computation itself is replaced below
    calls = []
    done = threading.Event()

    def compute(task_src, slot):
        calls.append(slot)
        _time.sleep(0.2)  # the second prefetch arrives while the first is still computing
        done.set()
        return _golden_run.Golden(key="k")

    sb._compute_golden = compute
    sb._prefetch_golden(RELU_TASK.source_for("cpu"), "cpu")
    sb._prefetch_golden(RELU_TASK.source_for("cpu"), "cpu")
    assert done.wait(10)
    for _ in range(100):
        if not sb._prefetching:
            break
        _time.sleep(0.05)
    assert calls == ["cpu"] and sb._prefetching == set()
    from kevin.sandbox._resolve import sha256

    assert sb._golden.peek(sha256(RELU_TASK.source_for("cpu"))) is not None


def _timing_end(n_calls):
    return _process.Message(0.0, {"event": "timing_end", "n_calls": n_calls})


def test_the_parent_takes_the_median_of_the_reported_samples():
    from kevin.sandbox import _judge

    config = SandboxConfig(n_trials=3, n_warmup=1)
    # samples 3, 1, 2: sorted 1, 2, 3, median 2; 1 warm-up + 3 samples = 4 calls
    assert _judge.report_median({"samples_ms": [3.0, 1.0, 2.0], "median_ms": 2.0}, _timing_end(4), config) == (2.0, "")


def test_a_report_announcing_more_calls_than_it_has_samples_is_malformed():
    from kevin.sandbox import _judge

    config = SandboxConfig(n_trials=3, n_warmup=1)
    median, problem = _judge.report_median({"samples_ms": [3.0, 1.0, 2.0], "median_ms": 2.0}, _timing_end(10**9), config)
    assert median != median and "1000000000 calls announced" in problem


def test_a_report_whose_median_is_not_its_samples_median_is_malformed():
    from kevin.sandbox import _judge

    config = SandboxConfig(n_trials=3, n_warmup=1)
    _, problem = _judge.report_median({"samples_ms": [3.0, 1.0, 2.0], "median_ms": 1e-6}, _timing_end(4), config)
    assert "a median of 1e-06 ms for samples whose median is 2 ms" in problem


def test_a_report_with_too_few_samples_or_a_nan_is_malformed():
    from kevin.sandbox import _judge

    config = SandboxConfig(n_trials=50, n_warmup=5)  # the loop ends after 10 (MIN_TRIALS) to 50 timed calls
    assert "9 samples for 50 timed calls" in _judge.report_median({"samples_ms": [1.0] * 9, "median_ms": 1.0},
                                                                  _timing_end(14), config)[1]
    nan = {"samples_ms": [1.0] * 9 + [float("nan")], "median_ms": 1.0}
    assert _judge.report_median(nan, _timing_end(15), config)[1] == "a sample is not a finite time"
    assert _judge.MIN_TRIALS == timing.MIN_TRIALS


def _recording_gate(events):
    """shared/alone admissions that record when they are entered and left."""
    import contextlib

    def gate(name):
        @contextlib.contextmanager
        def admission():
            events.append(f"{name}+")
            try:
                yield
            finally:
                events.append(f"{name}-")
        return admission
    return gate("shared"), gate("alone")


def test_golden_holds_the_device_alone_only_while_it_times_the_baselines(tmp_path):
    from kevin.sandbox._golden_run import run_golden

    events: list[str] = []
    shared, alone = _recording_gate(events)
    config = SandboxConfig(n_trials=3, n_warmup=1, extra_baselines=())
    g = run_golden([("relu", RELU_TASK.source)], root=str(tmp_path), gpu=None, config=config, seed=0,
                   baseline_keys=frozenset({"relu"}), shared=shared, alone=alone)["relu"]
    assert g.error is None and g.meta["baseline"]["median_ms"] > 0
    # the reference runs (and compiles) sharing the device; it is left before the timing takes it alone
    assert events == ["shared+", "shared-", "alone+", "alone-"]


def test_golden_without_a_baseline_never_asks_for_the_device_alone(tmp_path):
    from kevin.sandbox._golden_run import run_golden

    events: list[str] = []
    shared, alone = _recording_gate(events)
    g = run_golden([("relu", RELU_TASK.source)], root=str(tmp_path), gpu=None,
                   config=SandboxConfig(measure_speed=False), seed=0, shared=shared, alone=alone)["relu"]
    assert g.error is None
    assert events == ["shared+", "shared-"]


def test_candidates_get_a_link_to_the_read_only_golden_inputs_not_a_copy(tmp_path):
    from kevin.sandbox._golden_run import hand_over, run_golden

    g = run_golden([("relu", RELU_TASK.source)], root=str(tmp_path), gpu=None,
                   config=SandboxConfig(measure_speed=False), seed=0)["relu"]
    hand_over(g, str(tmp_path / "for_candidate.safetensors"))
    original, link = os.stat(g.inputs_path), os.stat(tmp_path / "for_candidate.safetensors")
    assert link.st_ino == original.st_ino  # one file on disk, however many candidates judge the task
    assert original.st_mode & 0o222 == 0  # nobody may write through a link
    os.unlink(tmp_path / "for_candidate.safetensors")  # what the candidate's worker does once it read it
    assert g.inputs_intact()


def test_golden_inputs_written_through_a_link_are_no_longer_intact(tmp_path):
    from kevin.sandbox._golden_run import hand_over, run_golden

    g = run_golden([("relu", RELU_TASK.source)], root=str(tmp_path), gpu=None,
                   config=SandboxConfig(measure_speed=False), seed=0)["relu"]
    link = tmp_path / "for_candidate.safetensors"
    hand_over(g, str(link))
    os.chmod(link, 0o644)  # the attack: make it writable again, change a byte, restore the mode
    with open(link, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        f.write(b"\x00")
    os.chmod(link, 0o444)
    assert not g.inputs_intact()


def test_golden_cache_computes_a_task_again_when_its_inputs_file_was_changed(tmp_path):
    from kevin.sandbox.sandbox import _GoldenCache
    from kevin.sandbox._golden_run import Golden, file_signature

    path = tmp_path / "inputs.safetensors"
    path.write_bytes(b"abc")
    made = []

    def compute():
        made.append(1)
        return Golden("k", inputs_path=str(path), inputs_signature=file_signature(str(path)))

    cache = _GoldenCache(capacity=2)
    cache.acquire("k", compute)
    cache.release("k")
    cache.acquire("k", compute)  # unchanged: the cached entry
    cache.release("k")
    assert len(made) == 1
    path.write_bytes(b"abcd")  # size changed (3 -> 4 bytes)
    cache.acquire("k", compute)
    assert len(made) == 2


def test_candidates_checked_from_many_threads_are_never_parsed_at_once(monkeypatch):
    # CPython 3.11's AST constructor raised "AST constructor recursion depth mismatch" under concurrent parses, and an
    # honest kernel of a training batch was judged an internal error; the sandbox's parses now take turns
    import ast
    import threading

    from kevin.sandbox import _resolve

    real, inside, most = ast.parse, [0], [0]

    def watched(source, *args, **kwargs):
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.01)  # long enough for another thread to enter if nothing stops it
        inside[0] -= 1
        return real(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", watched)
    threads = [threading.Thread(target=_resolve.parse_python, args=("x = 1",)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1
