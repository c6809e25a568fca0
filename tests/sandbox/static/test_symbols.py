"""kevin.sandbox.static.symbols: what a built extension may import (its undefined dynamic symbols)."""

from kevin.sandbox.static import symbols as _symbols


def _judge(monkeypatch, symbols, backend):
    monkeypatch.setattr(_symbols, "undefined_symbols", lambda path: list(symbols))
    return _symbols.violations(["/x/ext.so"], backend=backend)


def test_cpu_extension_importing_open_is_rejected(monkeypatch):
    found, checked = _judge(monkeypatch, ["memcpy", "open"], "cpu")
    assert checked and found == ["the built extension ext.so imports open (file access is not allowed; use only "
                                 "your inputs)"]


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
    # <ATen/ops/clamp_min_cpu_dispatch.h>: at::cpu::clamp_min never reaches the dispatcher
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
    assert found == ["the built extension ext.so imports std::thread::_M_start_thread (threads, processes and "
                     "dynamic loading are not allowed)"]


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


def test_cuda_extension_with_a_device_guard_passes(monkeypatch):
    # at::cuda::OptionalCUDAGuard's CUDAGuardImpl has inline virtuals that call c10's stream pool, so an honest
    # guard imports it (nvcc 13.0, torch 2.13 headers): the symbol check cannot ban the pool
    symbols = ["c10::cuda::getStreamFromPool(bool, signed char)", "c10::cuda::getStreamFromPool(int, signed char)",
               "c10::cuda::getCurrentCUDAStream(signed char)", "__cudaLaunchKernel"]
    found, checked = _judge(monkeypatch, symbols, "cuda")
    assert checked and found == []


def test_cuda_extension_using_graphics_interop_is_not_taken_for_graphs(monkeypatch):
    found, _ = _judge(monkeypatch, ["cudaGraphicsMapResources", "cudaGraphLaunch_ptsz"], "cuda")
    assert len(found) == 1 and "imports cudaGraphLaunch_ptsz from the CUDA runtime" in found[0]


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


# Real builds: nvcc (installed on the CPU machines too) compiles without running anything. Linked against the
# shared CUDA runtime, as load_inline links it, so runtime calls are imports; c10's symbols stay undefined.
GUARD_KERNEL = r"""
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
__global__ void scale(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
void launch(float* y, const float* x, int n, signed char device) {
    c10::cuda::OptionalCUDAGuard guard(c10::Device(c10::DeviceType::CUDA, device));
    scale<<<(n + 255) / 256, 256, 0, c10::cuda::getCurrentCUDAStream(device)>>>(y, x, n);
}
"""
SIDE_STREAM_KERNEL = r"""
#include <cuda_runtime.h>
__global__ void one(float* y) { y[0] = 1.0f; }
void launch(float* y) {
    static cudaStream_t side = nullptr;
    if (side == nullptr) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    cudaStreamAttrValue attr = {};
    cudaStreamSetAttribute(side, cudaStreamAttributeAccessPolicyWindow, &attr);
    one<<<1, 1, 0, side>>>(y);
}
"""


def _nvcc_build(tmp_path, name, source):
    import shutil
    import subprocess

    import pytest
    from torch.utils.cpp_extension import include_paths

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    (tmp_path / f"{name}.cu").write_text(source)
    includes = [x for p in include_paths() for x in ("-isystem", p)]
    r = subprocess.run([nvcc, "-shared", "-cudart", "shared", "-arch=sm_90", "-Xcompiler", "-fPIC", "-std=c++17",
                        "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE", *includes, f"{name}.cu", "-o", f"{name}.so"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return str(tmp_path / f"{name}.so")


def test_a_real_build_with_a_device_guard_passes(tmp_path):
    # OptionalCUDAGuard imports c10::cuda::getStreamFromPool through CUDAGuardImpl's inline virtuals (so a pool
    # ban in the symbol check would reject it), and cudaStreamWaitEvent / cudaStreamIsCapturing from its event code
    path = _nvcc_build(tmp_path, "guard", GUARD_KERNEL)
    imported = _symbols.undefined_symbols(path)
    assert "c10::cuda::getStreamFromPool(bool, signed char)" in imported  # the import a pool ban would trip on
    assert _symbols.violations([path], backend="cuda") == ([], True)


def test_a_real_build_making_a_side_stream_is_rejected(tmp_path):
    found, checked = _symbols.violations([_nvcc_build(tmp_path, "side", SIDE_STREAM_KERNEL)], backend="cuda")
    assert checked and len(found) == 2, found
    assert "imports cudaStreamCreateWithFlags from the CUDA runtime" in found[0]
    assert "imports cudaStreamSetAttribute from the CUDA runtime" in found[1]
