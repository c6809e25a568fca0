"""kevin.sandbox._symbols: what a built extension may import (its undefined dynamic symbols)."""

from kevin.sandbox import _symbols


def _judge(monkeypatch, symbols, backend):
    monkeypatch.setattr(_symbols, "undefined_symbols", lambda path: list(symbols))
    return _symbols.violations(["/x/ext.so"], backend=backend)


def test_cpu_extension_importing_open_is_rejected(monkeypatch):
    found, checked = _judge(monkeypatch, ["memcpy", "open"], "cpu")
    assert checked and found == ["the built extension ext.so imports open (files, memory mapping, signals, "
                                 "processes and system calls are not allowed)"]


def test_cuda_extension_importing_mmap_is_rejected(monkeypatch):
    found, _ = _judge(monkeypatch, ["__cudaLaunchKernel", "mmap"], "cuda")
    assert len(found) == 1 and "imports mmap" in found[0]


def test_cuda_extension_importing_what_honest_h200_builds_import_passes(monkeypatch):
    # open and syscall: imported by every honest CUDA extension built on the H200 image
    found, checked = _judge(monkeypatch, ["open", "syscall", "ioctl", "__cudaLaunchKernel", "malloc"], "cuda")
    assert checked and found == []


def test_extension_calling_an_aten_compute_op_is_rejected(monkeypatch):
    found, _ = _judge(monkeypatch, ["at::_ops::addmm::call(at::Tensor const&)"], "cuda")
    assert found and "aten.addmm" in found[0]


def test_missing_nm_reports_unchecked(monkeypatch):
    monkeypatch.setattr(_symbols, "undefined_symbols", lambda path: None)
    assert _symbols.violations(["/x/ext.so"], backend="cpu") == ([], False)


def test_extension_calling_an_aten_backend_kernel_without_the_dispatcher_is_rejected(monkeypatch):
    # <ATen/ops/clamp_min_cpu_dispatch.h>: at::cpu::clamp_min never reaches the dispatcher (a red-team finding)
    found, _ = _judge(monkeypatch, ["at::cpu::clamp_min(at::Tensor const&, c10::Scalar const&)"], "cpu")
    assert found and "at::cpu::clamp_min" in found[0] and "aten.clamp_min" in found[0]


def test_extension_calling_a_cuda_utility_of_at_cuda_passes(monkeypatch):
    found, _ = _judge(monkeypatch, ["at::cuda::getCurrentDeviceProperties()", "__cudaLaunchKernel",
                                    "at::cuda::empty(c10::ArrayRef<long>, c10::TensorOptions)"], "cuda")  # allocation
    assert found == []


def test_extension_starting_a_cpp_thread_is_rejected(monkeypatch):
    # std::thread starts inside libstdc++: the extension imports _M_start_thread, not pthread_create
    symbols = ["std::thread::_M_start_thread(std::unique_ptr<std::thread::_State>, void (*)())", "memcpy"]
    found, _ = _judge(monkeypatch, symbols, "cuda")
    assert found == ["the built extension ext.so imports std::thread::_M_start_thread (threads are not allowed)"]


def test_cuda_extension_importing_a_driver_api_stream_is_rejected(monkeypatch):
    found, _ = _judge(monkeypatch, ["__cudaLaunchKernel", "cuStreamCreate"], "cuda")
    assert len(found) == 1 and "imports cuStreamCreate from the CUDA driver" in found[0]


def test_cuda_extension_importing_a_per_thread_driver_host_callback_is_rejected(monkeypatch):
    # the driver's per-thread-stream names carry a _ptsz suffix; green contexts make streams of their own
    found, _ = _judge(monkeypatch, ["cuLaunchHostFunc_ptsz", "cuGreenCtxStreamCreate", "cudaGetLastError"], "cuda")
    assert len(found) == 2 and all("from the CUDA driver" in f for f in found)


def test_cuda_extension_importing_a_runtime_stream_is_rejected(monkeypatch):
    # hack D1 through libcudart (linked dynamically): the attack library of the GPU tests imports exactly this
    found, _ = _judge(monkeypatch, ["__cudaLaunchKernel", "cudaStreamCreateWithFlags", "cudaGetLastError"], "cuda")
    assert len(found) == 1 and "imports cudaStreamCreateWithFlags from the CUDA runtime" in found[0]


def test_cuda_extension_taking_a_stream_from_c10s_pool_is_rejected(monkeypatch):
    # at::cuda::getStreamFromPool is c10's: its pool streams are non-blocking, a side stream without a runtime import
    found, _ = _judge(monkeypatch, ["c10::cuda::getStreamFromPool(bool, signed char)"], "cuda")
    assert len(found) == 1 and "imports c10::cuda::getStreamFromPool from c10" in found[0]


def test_cuda_extension_importing_l2_persistence_calls_is_rejected(monkeypatch):
    # hack D7: a persisting carve-out and an access-policy window on the stream
    found, _ = _judge(monkeypatch, ["cudaDeviceSetLimit", "cudaStreamSetAttribute", "cudaGetDeviceProperties"], "cuda")
    assert len(found) == 2 and all("from the CUDA runtime" in f for f in found)


def test_cuda_extension_using_the_current_stream_and_kernel_attributes_passes(monkeypatch):
    # what an honest kernel with large shared memory imports: the current stream, a function attribute, the device
    symbols = ["c10::cuda::getCurrentCUDAStream(signed char)", "cudaFuncSetAttribute", "cudaGetDevice",
               "cudaGetDeviceProperties", "__cudaLaunchKernel", "cudaGetLastError"]
    found, checked = _judge(monkeypatch, symbols, "cuda")
    assert checked and found == []
