"""kevin.sandbox.build.extension: what the content-addressed load_inline compiles."""

import shutil
import subprocess

import pytest

from kevin.sandbox.build.extension import EXTENSION_H_DROPPED as NOTE, drop_extension_header


def test_cuda_source_is_compiled_without_torch_extension_header():
    src = '#include <torch/extension.h>\n#include <cuda_runtime.h>\n__global__ void k() {}'
    assert drop_extension_header(src) == f"{NOTE}\n#include <cuda_runtime.h>\n__global__ void k() {{}}"


def test_quoted_and_indented_spellings_are_dropped_in_every_source_of_a_list():
    out = drop_extension_header(['  # include "torch/extension.h"', "#include <torch/extension.h> // x"])
    assert out == [NOTE, NOTE + " // x"]


HIDDEN = "hidden_python_call();"


@pytest.mark.parametrize("opener, closer", [(" /*", "// */"), (" // \\", "")])
def test_a_comment_opened_on_the_header_line_still_hides_what_followed_once_the_header_is_dropped(opener, closer):
    # The static checks read the next line as commented (a block comment opened after the directive, or a line comment
    # spliced onto it); dropping the whole line made it code in the compiled unit only. Preprocessed, it stays out.
    src = f"#include <torch/extension.h>{opener}\n{HIDDEN}\n{closer}\n__global__ void k() {{}}"
    out = drop_extension_header(src)
    assert out.startswith(NOTE + opener)
    gcc = shutil.which("g++") or shutil.which("c++")
    if gcc is None:
        pytest.skip("needs a C++ compiler to preprocess")
    from torch.utils import cpp_extension as ce

    includes = [f"-I{p}" for p in ce.include_paths()]  # (the directive that stands for the header is kept)
    pre = subprocess.run([gcc, "-E", "-P", "-x", "c++", *includes, "-"], input=out, capture_output=True, text=True,
                         check=True)
    assert "hidden_python_call" not in pre.stdout and "__global__ void k" in pre.stdout


def test_other_headers_and_non_string_sources_are_kept():
    assert drop_extension_header("#include <torch/extension.hpp>") == "#include <torch/extension.hpp>"
    assert drop_extension_header(None) is None


# ---- the light prelude for CUDA units (`light_arguments`, `install`)

import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402

import pytest  # noqa: E402

from kevin.sandbox.build import extension as _extension  # noqa: E402
from kevin.sandbox.build.extension import (  # noqa: E402
    LIGHT_FAILED, LIGHT_MARK, cuda_light_prelude, light_arguments)

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
    assert cuda_light == "\n".join([cuda_light_prelude(), "#include <cuda.h>", "#include <cuda_runtime.h>", KERNEL])


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
        light = arguments["cuda_sources"][0].startswith(LIGHT_MARK)
        self.calls.append(("light" if light else "full", arguments["build_directory"]))
        if light and self.light_fails:
            raise RuntimeError(self.error)
        return "module"


def _install(monkeypatch, tmp_path, fake, light=True, niceness=0):
    """`install` over ``fake`` (given load_inline's signature); returns the installed wrapper."""
    import functools

    from torch.utils import cpp_extension as ce

    monkeypatch.setattr(ce, "load_inline", functools.wraps(ce.load_inline)(lambda **arguments: fake(**arguments)))
    _extension.install(str(tmp_path / "ext"), "cuda", light=light, niceness=niceness)
    return ce.load_inline


CHILD_NICE = [sys.executable, "-c", "import os; print(os.nice(0))"]


def _own_nice():
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_a_niced_call_starts_its_children_at_that_niceness_and_leaves_the_callers(tmp_path):
    # a compiler is a child of the building thread: it inherits that thread's nice value, not the process's
    mine = _own_nice()
    if mine >= 19:
        pytest.skip("this process already runs at the lowest priority")
    out = _extension.call_niced(19, lambda: subprocess.run(CHILD_NICE, capture_output=True, text=True).stdout)
    assert int(out) == 19
    assert _own_nice() == mine


def test_a_niced_call_raises_its_exception_in_the_caller():
    def fails():
        raise _extension.BuildError("ext", "error: expected ';'")

    with pytest.raises(_extension.BuildError, match="expected"):
        _extension.call_niced(19, fails)


def test_a_niced_call_at_the_callers_own_niceness_runs_in_the_calling_thread():
    assert _extension.call_niced(_own_nice(), threading.get_ident) == threading.get_ident()


def test_an_installed_build_compiles_at_its_niceness(monkeypatch, tmp_path):
    if _own_nice() >= 19:
        pytest.skip("this process already runs at the lowest priority")

    def build(**arguments):
        return subprocess.run(CHILD_NICE, capture_output=True, text=True).stdout

    load = _install(monkeypatch, tmp_path, build, niceness=19)
    assert int(load(name="ext", cpp_sources=DECL, cuda_sources=KERNEL, functions=["f"])) == 19


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


def test_an_error_after_the_light_library_was_built_is_raised_not_retried(monkeypatch, tmp_path):
    # e.g. the import of a library that did build: the source's own error, not the prelude's
    class BuiltThenFails(_FakeBuild):
        def __call__(self, **arguments):
            self.calls.append(("light", arguments["build_directory"]))
            open(os.path.join(arguments["build_directory"], "ext.so"), "w").close()
            raise ImportError("ext.so: undefined symbol: _Z3fooPf")

    fake = BuiltThenFails(light_fails=True)
    load = _install(monkeypatch, tmp_path, fake)
    with pytest.raises(ImportError, match="undefined symbol"):
        load(name="ext", cpp_sources=DECL, cuda_sources=KERNEL, functions=["f"])
    assert [kind for kind, _ in fake.calls] == ["light"]


def _stub_torch_build(monkeypatch, log, light_fails=True):
    """torch's own load_inline and version bookkeeping, with ninja and the import stubbed: a build whose CUDA unit
    starts with the light prelude fails when told to; others 'build' ``<name>.so``; the import needs that file."""
    from torch.utils import cpp_extension as ce

    def fake_build(name, sources, build_directory, **kwargs):
        light = open(os.path.join(build_directory, "cuda.cu")).read().startswith(LIGHT_MARK)
        log.append(("light" if light else "full", name))
        if light and light_fails:
            raise RuntimeError(f"Error building extension '{name}': identifier \"undeclared\" is undefined")
        open(os.path.join(build_directory, name + ".so"), "w").close()

    def fake_import(name, build_directory, is_python_module):
        if not os.path.exists(os.path.join(build_directory, name + ".so")):
            raise ImportError(f"{name}.so: cannot open shared object file: No such file or directory")
        return name

    monkeypatch.setattr(ce, "_write_ninja_file_and_build_library", fake_build)
    monkeypatch.setattr(ce, "_import_module_from_library", fake_import)
    monkeypatch.setattr(ce.JIT_EXTENSION_VERSIONER, "entries", {})
    monkeypatch.setattr(ce, "load_inline", ce.load_inline)  # restored after the test (install replaces it)
    return ce


def test_the_full_build_after_a_failed_light_one_keeps_the_extension_name(monkeypatch, tmp_path):
    # torch counts builds per name in a process: the retry must not become "ext_v1", or a later evaluation of the
    # same source (a new process, so "ext") would rebuild its whole full-prelude library
    log = []
    ce = _stub_torch_build(monkeypatch, log)
    _extension.install(str(tmp_path / "ext"), "cuda")
    assert ce.load_inline(name="ext", cpp_sources=DECL, cuda_sources=KERNEL, functions=["f"]) == "ext"
    assert log == [("light", "ext"), ("full", "ext")]


def test_a_light_attempt_that_finds_no_library_falls_back_to_the_full_prelude(monkeypatch, tmp_path):
    # a twin candidate held the light build's lock and failed: this process waited, then found no library
    log = []
    ce = _stub_torch_build(monkeypatch, log)
    monkeypatch.setattr(ce, "_write_ninja_file_and_build_library", lambda name, sources, build_directory, **kw: (
        log.append(("waited", name)) if open(os.path.join(build_directory, "cuda.cu")).read().startswith(LIGHT_MARK)
        else open(os.path.join(build_directory, name + ".so"), "w").close()))
    _extension.install(str(tmp_path / "ext"), "cuda")
    assert ce.load_inline(name="ext", cpp_sources=DECL, cuda_sources=KERNEL, functions=["f"]) == "ext"
    assert log == [("waited", "ext")]  # then the full build, which loaded
    assert not list((tmp_path / "ext").glob(f"*/{LIGHT_FAILED}"))  # it did not fail here: no marker


def test_the_marker_is_never_written_through_a_planted_link(monkeypatch, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("someone else's file")
    light_dir = tmp_path / "light"
    light_dir.mkdir()
    os.symlink(victim, light_dir / LIGHT_FAILED)
    _extension._mark_failed(str(light_dir))
    assert victim.read_text() == "someone else's file"


def test_the_marker_is_never_written_through_a_planted_hard_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("someone else's file")
    light_dir = tmp_path / "light"
    light_dir.mkdir()
    os.link(victim, light_dir / LIGHT_FAILED)
    _extension._mark_failed(str(light_dir), "kernel.cpp:3:1: error: x")
    assert victim.read_text() == "someone else's file"
    assert (light_dir / LIGHT_FAILED).read_text() == "kernel.cpp:3:1: error: x"


def test_a_marker_planted_as_a_fifo_reads_as_no_log(tmp_path):
    # a blocking read of a FIFO would hold the build until its timeout
    os.mkfifo(tmp_path / LIGHT_FAILED)
    assert _extension._failure_log(str(tmp_path)) == ""


def test_a_source_that_asks_for_gradients_keeps_the_full_prelude():
    # at::empty rejects TensorOptions with requires_grad(true); the full prelude's torch::empty accepts them
    assert light_arguments(_bound(cuda_sources=KERNEL + "\nauto t = torch::empty({2}, o.requires_grad(true));")) is None


def test_light_prelude_off_builds_with_the_full_prelude_only(monkeypatch, tmp_path):
    fake = _FakeBuild(light_fails=False)
    load = _install(monkeypatch, tmp_path, fake, light=False)
    load(name="ext", cpp_sources=DECL, cuda_sources=KERNEL, functions=["f"])
    assert [kind for kind, _ in fake.calls] == ["full"]


def test_the_cuda_light_prelude_defines_the_factories_without_their_headers_includes():
    # ATen/ops/empty.h includes ATen/Context.h and more, which its inline factories do not need
    prelude = cuda_light_prelude()
    assert "inline at::Tensor empty_like(" in prelude and "#include <ATen/ops/empty_like_ops.h>" in prelude
    assert "#include <ATen/Context.h>" not in prelude and "#include <ATen/ops/empty.h>" not in prelude


def test_a_cuda_context_include_becomes_the_streams_header_in_the_light_build_only():
    # <ATen/cuda/CUDAContext.h> brings ATen/Context.h back; the light build takes the stream and the checks without it
    source = "#include <ATen/cuda/CUDAContext.h>  // the stream\n" + KERNEL
    arguments = _bound(cuda_sources=source)
    light = light_arguments(arguments)["cuda_sources"]
    assert light[3:] == [*_extension.CUDA_CHECKS, _extension.CUDA_CONTEXT_LIGHT + "  // the stream\n" + KERNEL]
    assert arguments["cuda_sources"] == source  # the full build, if the light one fails, compiles what was written


def test_header_directives_inside_a_comment_are_not_rewritten_into_code():
    # a rewrite that put "*/" in its text would close the comment and compile what the static checks read as
    # commented; a directive in a comment is no directive, so no checks are added for it either
    from kevin.sandbox.build import split

    source = f"/*\n#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n{HIDDEN}\n/* */\n{KERNEL}"
    light = light_arguments(_bound(cuda_sources=drop_extension_header(source)))["cuda_sources"]
    assert HIDDEN in light[-1] and HIDDEN not in split.mask(light[-1])
    assert not set(_extension.CUDA_CHECKS) & set(light)


@pytest.mark.parametrize("other", ["#include <ATen/TensorIndexing.h>", "#if 1\n#endif", '#include "helpers.h"'])
def test_a_source_the_scan_cannot_vouch_for_keeps_the_factories_own_headers(other):
    # ATen/TensorIndexing.h includes the factory headers (their definitions would then come twice); a conditional
    # directive may hide a directive from the build, and a quoted include's header is not known
    light = light_arguments(_bound(cuda_sources=f"{other}\n#include <ATen/cuda/CUDAContext.h>\n{KERNEL}"))
    assert light["cuda_sources"][0] == _extension.LIGHT_PRELUDE
    assert light["cuda_sources"][-1].endswith(f"#include <ATen/cuda/CUDAContext.h>\n{KERNEL}")


SPLICED_MACRO = "#define CHECK_INPUT(x) \\\n    TORCH_CHECK((x).is_cuda(), #x)\n"


def test_a_source_with_a_multi_line_macro_gets_the_streams_header_too():
    # kernels often continue a macro over lines with a backslash; the scan reads the joined lines as the
    # preprocessor does, so such a source still takes the light build's swap
    source = f"#include <ATen/cuda/CUDAContext.h>\n{SPLICED_MACRO}{KERNEL}"
    light = light_arguments(_bound(cuda_sources=source))["cuda_sources"]
    assert light[-1] == f"{_extension.CUDA_CONTEXT_LIGHT}\n{SPLICED_MACRO}{KERNEL}"


@pytest.mark.parametrize("opener", ["// note \\\n", "// note \\\r\n", "#define NOTE \\ \n"])
def test_a_directive_a_splice_continues_into_a_comment_or_macro_is_not_rewritten(opener):
    # a backslash ends the comment's (or the macro's) line, a CRLF or blanks after it included, as GCC reads them: the
    # include on the next line is commented out (or the macro's body) for the compiler, so it stays as written, and
    # no checks are added for it
    source = f"{opener}#include <ATen/cuda/CUDAContext.h>\n{KERNEL}"
    light = light_arguments(_bound(cuda_sources=source))["cuda_sources"]
    assert light[0] == cuda_light_prelude() and light[-1] == source
    assert not set(_extension.CUDA_CHECKS) & set(light)


def test_a_comment_closed_before_a_context_directive_is_not_reopened_by_its_rewrite():
    # "*/ #include ..." is a directive to GCC (the comment is whitespace); rewriting from the line's start would
    # drop the "*/", and the comment would then end at the "*/" inside the later line comment, compiling code
    # the rules read as commented
    source = f"/* notes\n*/ #include <ATen/cuda/CUDAContext.h>\n// */ {HIDDEN}\n{KERNEL}"
    light = light_arguments(_bound(cuda_sources=source))["cuda_sources"]
    assert light[0] == _extension.LIGHT_PRELUDE and light[-1] == source


@pytest.mark.parametrize("sources", [["#define M \\", f"#include <ATen/cuda/CUDAContext.h>\n{KERNEL}"],
                                     [f"int x;\r#include <ATen/cuda/CUDAContext.h>\n{KERNEL}"],
                                     [f"#define M \\\0\n#include <ATen/cuda/CUDAContext.h>\n{KERNEL}"],
                                     [f"\f#if 0\n#include <ATen/cuda/CUDAContext.h>\n\f#endif\n{KERNEL}"]])
def test_sources_whose_lines_the_scan_cannot_vouch_for_are_built_as_written(sources):
    # load_inline joins its sources with newlines, so the first source's last backslash splices the next one's
    # first line into its macro; a lone carriage return ends a line for some readers and not for others; GCC reads
    # a NUL after a backslash as a blank of a splice, and a form feed before "#" as a directive's indentation
    light = light_arguments(_bound(cuda_sources=sources))["cuda_sources"]
    assert light[0] == _extension.LIGHT_PRELUDE and light[-len(sources):] == sources


def test_a_context_directive_with_a_splice_inside_is_left_to_the_factories_own_headers():
    # rewriting it would have to cut through the splice: the source keeps the full context header instead
    source = f"#include <ATen/cuda/\\\nCUDAContext.h>\n{KERNEL}"
    light = light_arguments(_bound(cuda_sources=source))["cuda_sources"]
    assert light[0] == _extension.LIGHT_PRELUDE and light[-1] == source


HOST_API = r"""
#define CHECK_CUDA(x) \
    TORCH_CHECK((x).is_cuda(), #x " must be a CUDA tensor")
__global__ void scale(const float* x, float* y, float a, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
torch::Tensor f(torch::Tensor x, torch::Tensor w) {
    CHECK_CUDA(x);
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
    scale<<<1, 32, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), 1.0f, 1);
    AT_CUDA_CHECK(cudaGetLastError());
    (void)z; (void)o; (void)o2; (void)o3; (void)o4; (void)v; (void)b; (void)h2; (void)maybe; (void)w;
    return y;
}
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_light_prelude_compiles_a_kernel_using_the_usual_host_api_with_nvcc(tmp_path):
    # nvcc -c of the CUDA unit that the light build writes for a source taking its stream from
    # <ATen/cuda/CUDAContext.h>: the tensor methods, factories, options, dtypes, dispatch macros, checks and a
    # multi-line macro that kernels' host wrappers use (about 20 s on a 2-core machine)
    from torch.utils import cpp_extension as ce

    stub = tmp_path / "stub"  # the CPU wheel ships c10/cuda headers without the CMake-generated one they include
    (stub / "c10/cuda/impl").mkdir(parents=True)
    (stub / "c10/cuda/impl/cuda_cmake_macros.h").write_text("#pragma once\n")
    src = tmp_path / "cuda.cu"
    source = "#include <ATen/cuda/CUDAContext.h>\n#include <c10/cuda/CUDAException.h>\n" + HOST_API
    light = light_arguments(_bound(cuda_sources=source))["cuda_sources"]
    assert light[-1].startswith(_extension.CUDA_CONTEXT_LIGHT)  # the lighter build, its multi-line macro and all
    src.write_text("\n".join(light))
    includes = [f"-I{stub}"] + [f"-I{p}" for p in ce.include_paths()]
    cmd = ["nvcc", "-c", "-std=c++17", "-arch=sm_90", "--expt-relaxed-constexpr", "-D__CUDA_NO_HALF_OPERATORS__",
           "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
           *includes, str(src), "-o", str(tmp_path / "cuda.o")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "cuda.o").stat().st_size > 0
