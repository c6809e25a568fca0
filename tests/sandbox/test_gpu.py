"""The CUDA backend on a real GPU (skipped without CUDA): honest kernels pass, GPU attacks are contained.

Run on a CUDA machine (an H200 for ``benchmarks/README.md``) with ``pytest -m gpu tests/sandbox``. All CUDA builds are started together by
`gpu_warm` (one ``evaluate_many``, compiled in parallel), later tests reuse the cached builds.
"""

import os

import pytest

from sandbox_cases import CANDIDATES, _config, load_candidate
from kevin.data.task import Task
from kevin.sandbox import Sandbox

MATMUL_SOURCE = '''\
import torch
import torch.nn as nn

N = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
'''

RELU_GPU_SOURCE = '''\
import torch
import torch.nn as nn

rows = 2048
cols = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
'''

MATMUL_TASK = Task("gpu_matmul", MATMUL_SOURCE, level=1, name="Square matmul 2048")
RELU_GPU_TASK = Task("gpu_relu", RELU_GPU_SOURCE, level=1, name="ReLU 2048x4096")

COMPILE_ERROR = (CANDIDATES / "honest_relu_cuda.py").read_text().replace("# include: _cuda_honest_extension.py", "")
COMPILE_ERROR = COMPILE_ERROR.replace("import torch.nn as nn", '''import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_honest_extension = load_inline(
    name="kevin_test_broken_cuda",
    cpp_sources="torch::Tensor relu_forward(torch::Tensor x);",
    cuda_sources=("__global__ void k(float* y) { y[0] = undeclared_name; }\\n"
                  "torch::Tensor relu_forward(torch::Tensor x) { return x; }"),
    functions=["relu_forward"],
    verbose=False,
)''')


def _gpu_config(cache_dir, **overrides):
    return _config(cache_dir, workers=os.cpu_count() or 1, n_trials=50, n_warmup=5, timing_budget_s=10.0, **overrides)


@pytest.fixture(scope="session")
def gpu_full(cache_dir):
    return Sandbox("cuda", _gpu_config(cache_dir))


@pytest.fixture(scope="session")
def gpu_dynamic(cache_dir):
    return Sandbox("cuda", _gpu_config(cache_dir, static_checks=False, kernel_inventory=False))


@pytest.fixture(scope="session")
def gpu_warm(gpu_dynamic):
    """Every CUDA build of this file in one batch (compiled in parallel); name -> EvalResult."""
    jobs = {
        "honest_matmul": (MATMUL_TASK, load_candidate("honest_matmul_cuda")),
        "honest_relu": (RELU_GPU_TASK, load_candidate("honest_relu_cuda")),
        "illegal_access": (RELU_GPU_TASK, load_candidate("gpu_illegal_memory_access")),
        "side_stream": (MATMUL_TASK, load_candidate("d1_side_stream_cuda")),
        "l2_persist": (RELU_GPU_TASK, load_candidate("d7_l2_persistence_cuda")),
        "compile_error": (RELU_GPU_TASK, COMPILE_ERROR),
    }
    results = gpu_dynamic.evaluate_many(list(jobs.values()))
    return dict(zip(jobs, results))


@pytest.mark.gpu
def test_an_honest_cuda_matmul_passes_every_layer_with_a_speedup(gpu_full, gpu_warm):
    r = gpu_full.evaluate(MATMUL_TASK, load_candidate("honest_matmul_cuda"))
    assert r.status == "correct", r.feedback
    assert r.speedup is not None and r.speedup > 0


@pytest.mark.gpu
def test_an_honest_cuda_kernel_holds_the_gpu_alone_only_until_its_worker_releases_it(gpu_warm):
    # from "shared" on (the worker's memory freed), its rechecks are compared while others may use the GPU
    marks = gpu_warm["honest_relu"].details["timeline"]
    assert marks["timing"] <= marks["timing_begin"] <= marks["timing_end"] <= marks["shared"] <= marks["rechecked"]


@pytest.mark.gpu
def test_no_wall_check_segment_gets_slack_from_the_plans_own_gpu_work(gpu_warm):
    # the plan queues a permutation and a scatter per timed call; left running into the first null block, it made
    # those null calls slow and that segment's implied time about -9 ms per call for a 0.03 ms ReLU, and the check
    # passes when any segment does. Every segment of an honest kernel now implies a time near its own (> -1 ms)
    r = gpu_warm["honest_relu"]
    assert r.status == "correct", r.feedback
    segments = r.details["wall_check"]["segments"]
    assert segments and min(g["implied_ms"] for g in segments) > -1.0, segments


@pytest.mark.gpu
def test_cuda_timing_flushes_at_least_twice_the_l2_and_resets_persisting_lines(gpu_warm):
    import torch

    r = gpu_warm["honest_matmul"]
    assert r.status == "correct", r.feedback
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    assert r.details["timing"]["l2_flush_bytes"] >= 2 * l2
    assert r.details["timing"]["l2_reset"] is True


@pytest.mark.gpu
def test_cuda_timing_queues_the_launch_cover_of_the_config(gpu_warm):
    r = gpu_warm["honest_matmul"]
    assert r.status == "correct", r.feedback
    assert r.details["timing"]["cover_cycles"] > 0  # SandboxConfig.launch_cover_us is 200 by default


@pytest.mark.gpu
def test_the_sleep_calibration_reads_an_sm_clock():
    import torch

    from kevin.sandbox.worker import timing

    rate = timing.sleep_cycles_per_ms(torch.device("cuda"))
    assert 3e5 < rate < 3e6, rate  # cycles per ms of an SM clock between 0.3 and 3 GHz


@pytest.mark.gpu
def test_the_launch_cover_keeps_a_slow_host_launch_out_of_the_window(permute_kernel):
    import random
    import time

    import torch

    from kevin.sandbox.worker import timing

    dev = torch.device("cuda")

    def slow_launch(args):
        t = time.perf_counter()
        while time.perf_counter() - t < 300e-6:  # 0.3 ms of host work before the first launch
            pass
        return args[0] + 1

    pool = [[torch.ones(1 << 16, device=dev)]]

    def median_ms(cover_us):
        return timing.time_calls(slow_launch, pool, device=dev, n_warmup=2, n_trials=20, budget_s=10,
                                 rng=random.Random(0), launch_cover_us=cover_us).median_ms

    # the flush alone (about 0.07 ms) covers part of the 0.3 ms: about 0.23 ms is timed; a 1 ms cover hides it all
    assert median_ms(0) > 0.15
    assert median_ms(1000) < 0.1


@pytest.mark.gpu
def test_work_left_on_a_side_stream_is_timed_to_the_device_wide_synchronize(permute_kernel):
    import random

    import torch

    from kevin.sandbox.worker import timing

    dev = torch.device("cuda")
    side = torch.cuda.Stream()
    big = torch.randn(4096, 4096, device=dev)

    def on_side(args):
        with torch.cuda.stream(side):
            torch.matmul(big, big)  # about 2.7 ms, never joined to the current stream
        return args[0] + 1

    run = timing.time_calls(on_side, [[torch.ones(1 << 16, device=dev)]], device=dev, n_warmup=2, n_trials=20,
                            budget_s=10, rng=random.Random(0), launch_cover_us=200)
    assert run.n_tail >= 15, run.summary()  # of the 20 trials: the call's stream ends at once, the synchronize waits
    assert run.median_ms > 1.0, run.summary()  # 2.7 ms less the 0.2 ms it ran under the cover


@pytest.mark.gpu
def test_a_call_on_the_current_stream_is_timed_to_its_own_end(permute_kernel):
    import random

    import torch

    from kevin.sandbox.worker import timing

    dev = torch.device("cuda")
    run = timing.time_calls(lambda a: torch.relu(a[0]), [[torch.randn(1 << 22, device=dev)]], device=dev, n_warmup=2,
                            n_trials=40, budget_s=10, rng=random.Random(0), launch_cover_us=200)
    assert run.n_tail < 20, run.summary()  # the synchronize found nothing left behind, bar a host hiccup
    # a 32 MB ReLU takes about 0.013 ms on an H200; a sample run to the last event adds 0.02 ms or more
    assert 0 < run.median_ms < 0.03, run.summary()


@pytest.mark.gpu
def test_a_slow_synchronize_on_the_host_is_not_taken_for_work_left_behind(permute_kernel, monkeypatch):
    import random
    import time

    import torch

    from kevin.sandbox.worker import timing

    dev = torch.device("cuda")
    real = torch.cuda.synchronize

    def slow_synchronize(device=None):  # 0.15 ms slower each (on an H200 some candidate processes' synchronizes
        # were that slow: most of their samples passed the <= 0.1 ms limit with nothing on another stream)
        real(device)
        t = time.perf_counter()
        while time.perf_counter() - t < 150e-6:
            pass

    monkeypatch.setattr(torch.cuda, "synchronize", slow_synchronize)
    run = timing.time_calls(lambda a: torch.relu(a[0]), [[torch.randn(1 << 22, device=dev)]], device=dev, n_warmup=2,
                            n_trials=40, budget_s=10, rng=random.Random(0), launch_cover_us=200)
    # both synchronizes are slow alike, so their difference stays under the limit: the samples end at the stream's end
    assert run.n_waited < 5, run.summary()
    assert 0 < run.median_ms < 0.03, run.summary()


@pytest.mark.gpu
def test_an_illegal_memory_access_is_a_runtime_error(gpu_warm):
    r = gpu_warm["illegal_access"]
    assert r.status == "runtime_error", r.feedback


@pytest.mark.gpu
def test_the_gpu_still_evaluates_honest_kernels_after_an_illegal_memory_access(gpu_dynamic, gpu_warm):
    assert gpu_warm["illegal_access"].status == "runtime_error"
    r = gpu_dynamic.evaluate(RELU_GPU_TASK, load_candidate("honest_relu_cuda"))
    assert r.status == "correct", r.feedback


@pytest.mark.gpu
def test_work_on_an_unjoined_side_stream_is_timed_in_full(gpu_warm):
    honest, side = gpu_warm["honest_matmul"], gpu_warm["side_stream"]
    assert honest.status == "correct", honest.feedback
    # the device-wide synchronize before the end event counts the side stream's kernel: same kernel, same time
    assert side.status != "correct" or side.runtime_ms >= 0.5 * honest.runtime_ms, (side.runtime_ms, honest.runtime_ms)


@pytest.mark.gpu
def test_an_l2_persisting_window_does_not_make_a_kernel_faster(gpu_warm):
    honest, pinned = gpu_warm["honest_relu"], gpu_warm["l2_persist"]
    assert honest.status == "correct", honest.feedback
    assert pinned.status != "correct" or pinned.runtime_ms >= 0.7 * honest.runtime_ms, (pinned.runtime_ms, honest.runtime_ms)
    assert pinned.status != "correct" or pinned.details["timing"]["l2_reset"] is True


@pytest.mark.gpu
def test_a_side_stream_and_an_l2_window_are_rejected_by_the_built_librarys_imports(cache_dir, gpu_warm):
    # the symbol check alone (static checks off): the attack library imports cudaStreamCreateWithFlags and the L2
    # calls from libcudart; gpu_warm built it already, so this loads it from the cache
    sandbox = Sandbox("cuda", _gpu_config(cache_dir, static_checks=False))
    side, pinned = sandbox.evaluate_many([(MATMUL_TASK, load_candidate("d1_side_stream_cuda")),
                                          (RELU_GPU_TASK, load_candidate("d7_l2_persistence_cuda"))])
    for r in (side, pinned):
        assert r.status == "format_error", r.feedback
        found = " ".join(r.details["violations"])
        assert "imports cudaStreamCreateWithFlags from the CUDA runtime" in found, found
        assert "imports cudaStreamSetAttribute from the CUDA runtime" in found, found


@pytest.mark.gpu
def test_an_nvcc_error_is_a_compile_error_quoting_the_compiler(gpu_warm):
    r = gpu_warm["compile_error"]
    assert r.status == "compile_error", r.feedback
    assert "undeclared_name" in r.feedback


@pytest.mark.gpu
def test_a_candidate_forked_from_the_zygote_runs_on_the_gpu(cache_dir, gpu_warm):
    # the zygote must never initialise CUDA (a fork after cuInit cannot use the GPU); a zygote that did would
    # be caught by its probe fork, and the sandbox would fall back to a new interpreter: forked would be False
    sandbox = Sandbox("cuda", _gpu_config(cache_dir, prefork=True))
    r = sandbox.evaluate(MATMUL_TASK, load_candidate("honest_matmul_cuda"))
    assert (r.status, r.details.get("forked")) == ("correct", True), r.feedback


def _cuda_units(cache_dir, marker):
    """The build directories under the cache whose CUDA unit contains ``marker``."""
    from pathlib import Path

    return [cu.parent for cu in Path(cache_dir, "ext").glob("*/cuda.cu") if marker in cu.read_text()]


@pytest.mark.gpu
def test_honest_cuda_kernels_are_built_with_the_light_prelude(cache_dir, gpu_warm):
    # on this host's torch: the light prelude compiled the honest extension, and its build is the one that ran
    from kevin.sandbox.build.extension import LIGHT_FAILED, LIGHT_MARK

    assert gpu_warm["honest_matmul"].status == "correct"
    dirs = _cuda_units(cache_dir, "matmul_tiled_kernel")
    light = [d for d in dirs if (d / "cuda.cu").read_text().startswith(LIGHT_MARK)]
    assert light and all(list(d.glob("*.so")) for d in light), dirs  # its library was linked there
    assert not any((d / LIGHT_FAILED).exists() for d in light)


@pytest.mark.gpu
def test_a_compile_error_under_the_light_prelude_is_retried_with_the_full_one(cache_dir, gpu_warm):
    from kevin.sandbox.build.extension import LIGHT_FAILED, LIGHT_MARK

    assert gpu_warm["compile_error"].status == "compile_error"
    dirs = _cuda_units(cache_dir, "undeclared_name")
    kinds = {(d / "cuda.cu").read_text().startswith(LIGHT_MARK): d for d in dirs}
    assert set(kinds) == {True, False}, dirs  # both preludes were tried
    assert (kinds[True] / LIGHT_FAILED).exists()


@pytest.mark.gpu
def test_outputs_compared_on_the_gpu_get_the_cpus_verdict():
    import torch

    from kevin.sandbox.compare import compare_tensor

    g = torch.Generator().manual_seed(0)
    ref = torch.randn(3_000_000, generator=g)
    near = ref + 1e-5 * torch.randn(ref.shape, generator=g)  # within 1e-3 x rms + 1e-3 x |ref|
    far = near.clone()
    far[::1000] += 1.0  # 3000 elements off by 1
    for out in (near, far):
        on_cpu = compare_tensor(out, ref, atol=1e-3, rtol=1e-3)
        on_gpu = compare_tensor(out, ref, atol=1e-3, rtol=1e-3, device="cuda:0")
        assert (on_gpu.ok, on_gpu.reason) == (on_cpu.ok, on_cpu.reason)
        assert on_gpu.max_abs_error == pytest.approx(on_cpu.max_abs_error, rel=1e-12)


@pytest.mark.gpu
def test_the_golden_gives_its_timings_device_memory_back_before_it_reports():
    # The parent hands the device to the next timing on the golden's "timed", while the golden process lives on
    # writing its inputs: its timing pool and allocator cache (2 sets of 256 MB here) must be freed by then.
    import torch

    from kevin.sandbox.worker import golden

    device = torch.device("cuda")
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved(device)
    sets = [[torch.randn(64 << 20)] for _ in range(2)]  # 64 Mi float32 = 256 MB each, on the host
    job = {"seed": 0, "timing": {"n_warmup": 2, "n_trials": 5, "budget_s": 5.0, "launch_cover_us": 200.0}}
    summaries, errors = golden.time_baselines(torch.nn.ReLU(), sets, ["eager"], job, device)
    assert "eager" in summaries and not errors, errors
    assert torch.cuda.memory_reserved(device) - before < 64 << 20
