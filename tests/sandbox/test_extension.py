"""kevin.sandbox._extension: what the content-addressed load_inline compiles."""

from kevin.sandbox._extension import drop_extension_header

NOTE = "// kevin: <torch/extension.h> dropped (load_inline includes <torch/types.h>)"


def test_cuda_source_is_compiled_without_torch_extension_header():
    src = '#include <torch/extension.h>\n#include <cuda_runtime.h>\n__global__ void k() {}'
    assert drop_extension_header(src) == f"{NOTE}\n#include <cuda_runtime.h>\n__global__ void k() {{}}"


def test_quoted_and_indented_spellings_are_dropped_in_every_source_of_a_list():
    out = drop_extension_header(['  # include "torch/extension.h"', "#include <torch/extension.h> // x"])
    assert out == [NOTE, NOTE]


def test_other_headers_and_non_string_sources_are_kept():
    assert drop_extension_header("#include <torch/extension.hpp>") == "#include <torch/extension.hpp>"
    assert drop_extension_header(None) is None


# ---- the light prelude for CUDA units (`light_arguments`, `install`)

import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402

from kevin.sandbox import _extension  # noqa: E402
from kevin.sandbox._extension import LIGHT_FAILED, LIGHT_PRELUDE, light_arguments  # noqa: E402

KERNEL = "__global__ void k(float* x) { x[0] = 1.0f; }\ntorch::Tensor f(torch::Tensor x) { return torch::empty_like(x); }"
DECL = "torch::Tensor f(torch::Tensor x);"


def _bound(**kw):
    """load_inline's arguments as the installed wrapper sees them (bound, defaults applied)."""
    import inspect

    from torch.utils import cpp_extension as ce

    given = {"name": "ext", "cpp_sources": DECL, "cuda_sources": KERNEL, "functions": ["f"], **kw}
    bound = inspect.signature(ce.load_inline).bind(**given)
    bound.apply_defaults()
    return dict(bound.arguments)


def _written_sources(monkeypatch, tmp_path, arguments):
    """The main.cpp and cuda.cu that torch's own load_inline writes for ``arguments`` (its compile step stubbed)."""
    from torch.utils import cpp_extension as ce

    monkeypatch.setattr(ce, "_jit_compile", lambda *a, **k: None)
    build = tmp_path / f"b{len(list(tmp_path.iterdir()))}"
    build.mkdir()
    ce.load_inline(**{**arguments, "build_directory": str(build)})
    return (build / "main.cpp").read_text(), (build / "cuda.cu").read_text()


def test_light_prelude_leaves_main_cpp_byte_for_byte_as_load_inline_writes_it(monkeypatch, tmp_path):
    # main.cpp's bytes key its precompiled header and the object cache: they must not change
    plain = _bound()
    main_plain, cuda_plain = _written_sources(monkeypatch, tmp_path, plain)
    main_light, cuda_light = _written_sources(monkeypatch, tmp_path, light_arguments(plain))
    assert main_light == main_plain
    assert cuda_plain.startswith("#include <torch/types.h>\n")
    assert cuda_light == "\n".join([LIGHT_PRELUDE, "#include <cuda.h>", "#include <cuda_runtime.h>", KERNEL])


@pytest.mark.parametrize("include", ["#include <torch/types.h>", '#include "torch/all.h"', "#include <ATen/ATen.h>",
                                     "  #  include <torch/csrc/api/include/torch/types.h>"])
def test_a_source_that_includes_torch_umbrella_headers_keeps_the_full_prelude(include):
    # the light prelude's torch::kFloat32 ... would clash with torch/types.h's; and such a source pays for them anyway
    assert light_arguments(_bound(cuda_sources=include + "\n" + KERNEL)) is None


def test_no_light_prelude_without_cuda_sources_or_with_no_implicit_headers():
    assert light_arguments(_bound(cuda_sources=None)) is None
    assert light_arguments(_bound(no_implicit_headers=True)) is None


class _FakeBuild:
    """Stands in for torch's load_inline: fails a build whose CUDA unit starts with the light prelude when told to."""

    def __init__(self, light_fails: bool, error: str = "Error building extension 'ext': nvcc failed"):
        self.light_fails, self.error, self.calls = light_fails, error, []

    def __call__(self, **arguments):
        light = arguments["cuda_sources"][0] == LIGHT_PRELUDE
        self.calls.append(("light" if light else "full", arguments["build_directory"]))
        if light and self.light_fails:
            raise RuntimeError(self.error)
        return "module"


def _install(monkeypatch, tmp_path, fake, light=True):
    """`install` over ``fake`` (given load_inline's signature); returns the installed wrapper."""
    import functools

    from torch.utils import cpp_extension as ce

    monkeypatch.setattr(ce, "load_inline", functools.wraps(ce.load_inline)(lambda **arguments: fake(**arguments)))
    _extension.install(str(tmp_path / "ext"), "cuda", light=light)
    return ce.load_inline


def test_a_cuda_build_tries_the_light_prelude_first(monkeypatch, tmp_path):
    fake = _FakeBuild(light_fails=False)
    load = _install(monkeypatch, tmp_path, fake)
    assert load(name="ext", cpp_sources=DECL, cuda_sources=KERNEL, functions=["f"]) == "module"
    assert [kind for kind, _ in fake.calls] == ["light"]


def test_a_source_the_light_prelude_cannot_compile_is_built_with_the_full_one_and_remembered(monkeypatch, tmp_path):
    fake = _FakeBuild(light_fails=True)
    load = _install(monkeypatch, tmp_path, fake)
    assert load(name="ext", cpp_sources=DECL, cuda_sources=KERNEL, functions=["f"]) == "module"
    assert [kind for kind, _ in fake.calls] == ["light", "full"]
    light_dir, full_dir = fake.calls[0][1], fake.calls[1][1]
    assert light_dir != full_dir and os.path.exists(os.path.join(light_dir, LIGHT_FAILED))
    # the same source again: straight to the full prelude (no second failing build)
    load(name="ext", cpp_sources=DECL, cuda_sources=KERNEL, functions=["f"])
    assert [kind for kind, _ in fake.calls] == ["light", "full", "full"]


def test_an_error_that_is_not_a_failed_build_is_raised_not_retried(monkeypatch, tmp_path):
    fake = _FakeBuild(light_fails=True, error="CUDA_HOME environment variable is not set")
    load = _install(monkeypatch, tmp_path, fake)
    with pytest.raises(RuntimeError, match="CUDA_HOME"):
        load(name="ext", cpp_sources=DECL, cuda_sources=KERNEL, functions=["f"])
    assert [kind for kind, _ in fake.calls] == ["light"]


def test_light_prelude_off_builds_with_the_full_prelude_only(monkeypatch, tmp_path):
    fake = _FakeBuild(light_fails=False)
    load = _install(monkeypatch, tmp_path, fake, light=False)
    load(name="ext", cpp_sources=DECL, cuda_sources=KERNEL, functions=["f"])
    assert [kind for kind, _ in fake.calls] == ["full"]


HOST_API = r"""
__global__ void scale(const float* x, float* y, float a, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
torch::Tensor f(torch::Tensor x, torch::Tensor w) {
    TORCH_CHECK(x.is_cuda() && x.dtype() == torch::kFloat32 && x.scalar_type() == at::ScalarType::Float, "x");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    auto z = torch::zeros({x.size(0), x.size(1)}, x.options());
    auto o = torch::empty({4, 5}, torch::TensorOptions().dtype(torch::kFloat).device(x.device()));
    auto o2 = torch::empty({4}, torch::dtype(torch::kFloat32).device(torch::kCUDA, 0));
    auto o3 = at::empty_strided({2, 2}, {2, 1}, x.options().dtype(at::kHalf));
    auto o4 = torch::full({3}, 1.5f, x.options());
    auto v = xc.view({-1}).reshape({x.numel()}).transpose(0, 0).narrow(0, 0, 1).unsqueeze(0).squeeze(0);
    c10::Half h = 1.0f; at::BFloat16 b = 2.0f; torch::Half h2 = h;
    c10::optional<torch::Tensor> maybe = torch::nullopt;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "f", [&] {
        (void)xc.data_ptr<scalar_t>(); });
    const int64_t n = xc.numel();
    scale<<<(n + 255) / 256, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), 2.0f, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    (void)z; (void)o; (void)o2; (void)o3; (void)o4; (void)v; (void)b; (void)h2; (void)maybe; (void)w;
    return y;
}
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_light_prelude_compiles_a_kernel_using_the_usual_host_api_with_nvcc(tmp_path):
    # nvcc -c of the CUDA unit as load_inline writes it with the light prelude: the tensor methods, factories,
    # options, dtypes, dispatch macros and checks that kernels' host wrappers use (about 30 s on a 2-core machine)
    import torch
    from torch.utils import cpp_extension as ce

    stub = tmp_path / "stub"  # the CPU wheel ships c10/cuda headers without the CMake-generated one they include
    (stub / "c10/cuda/impl").mkdir(parents=True)
    (stub / "c10/cuda/impl/cuda_cmake_macros.h").write_text("#pragma once\n")
    src = tmp_path / "cuda.cu"
    src.write_text("\n".join([LIGHT_PRELUDE, "#include <cuda.h>", "#include <cuda_runtime.h>",
                              "#include <c10/cuda/CUDAStream.h>", "#include <c10/cuda/CUDAException.h>", HOST_API]))
    includes = [f"-I{stub}"] + [f"-I{p}" for p in ce.include_paths()]
    cmd = ["nvcc", "-c", "-std=c++17", "-arch=sm_90", "--expt-relaxed-constexpr", "-D__CUDA_NO_HALF_OPERATORS__",
           "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
           *includes, str(src), "-o", str(tmp_path / "cuda.o")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert torch.__version__ and (tmp_path / "cuda.o").stat().st_size > 0
