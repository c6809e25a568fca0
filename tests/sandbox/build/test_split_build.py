"""kevin.sandbox.build.split: a CPU build's kernel in a light unit of its own, its bindings shared."""

import functools
import inspect
import os
import re
import shutil

import pytest

from kevin.sandbox.build import extension as _extension
from kevin.sandbox.build.extension import CPU_LIGHT_PRELUDE, LIGHT_FAILED
from kevin.sandbox.build.pch import LIGHT_GCH, LIGHT_HEADER
from kevin.sandbox.build.split import BINDINGS_PRELUDE, KERNEL, MAIN, declarations, join_splices, mask, split_sources

KERNEL_SOURCE = r"""#include <torch/extension.h>
#include <cmath>

// scale(x): y = 2 x
torch::Tensor scale(torch::Tensor x,
                    double a) {
    auto y = torch::empty_like(x);
    const float* src = x.data_ptr<float>();
    float* dst = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) dst[i] = (float)(a * src[i]);
    return y;
}
"""


def _bound(**kw):
    """load_inline's arguments as the installed wrapper sees them (bound, defaults applied)."""
    from torch.utils import cpp_extension as ce

    given = {"name": "ext", "cpp_sources": KERNEL_SOURCE, "functions": ["scale"], **kw}
    bound = inspect.signature(ce.load_inline).bind(**given)
    bound.apply_defaults()
    return dict(bound.arguments)


# ----------------------------------------------------------------------------------------------- declarations


def test_a_definition_split_over_lines_with_a_comment_becomes_one_declaration():
    src = "torch::Tensor f(torch::Tensor x, // input\n                 int64_t k) {\n  return x;\n}\n"
    assert declarations(src, ["f"]) == ["torch::Tensor f(torch::Tensor x, int64_t k);"]


def test_a_prototype_before_the_definition_is_not_a_second_definition():
    src = "torch::Tensor f(torch::Tensor x);\nint g() { return 1; }\ntorch::Tensor f(torch::Tensor x) { return x; }"
    assert declarations(src, ["f"]) == ["torch::Tensor f(torch::Tensor x);"]


def test_braces_and_parentheses_inside_strings_and_comments_do_not_move_the_scope():
    src = 'void h() { const char* s = "}{("; /* } */ }\n// {\ntorch::Tensor f(torch::Tensor x) { return x; }'
    assert declarations(src, ["f"]) == ["torch::Tensor f(torch::Tensor x);"]


def test_a_backslash_newline_is_deleted_once_as_the_preprocessor_does():
    # a, backslash, backslash, newline, newline, b (0-5): the backslash at 2 goes with the newline at 3; the one at 1
    # then stands before the newline at 4 and stays (phase 2 is one pass): the kept indices are 0, 1, 4, 5
    assert join_splices("a\\\\\n\nb") == ("a\\\nb", [0, 1, 4, 5])


def test_a_digit_separator_is_not_a_character_literal():
    src = "int64_t n() { return 1'000; }\ntorch::Tensor f(torch::Tensor x) { return x; }"
    assert declarations(src, ["f"]) == ["torch::Tensor f(torch::Tensor x);"]


def test_a_default_argument_is_kept_in_the_declaration():
    src = 'torch::Tensor f(torch::Tensor x, double eps = 1e-5) { return x; }'
    assert declarations(src, ["f"]) == ["torch::Tensor f(torch::Tensor x, double eps = 1e-5);"]


def test_every_name_is_declared_in_the_order_asked():
    src = "int a(int x) { return x; }\nint b(int x) { return x; }"
    assert declarations(src, ["b", "a"]) == ["int b(int x);", "int a(int x);"]


@pytest.mark.parametrize("src", [
    "int f(int x) { return x; }\nint f(float x) { return 0; }",                # overloads: which one is bound?
    "namespace k { int f(int x) { return x; } }",                            # not at file scope
    "int f(int x);",                                                           # declared, never defined here
    "static int f(int x) { return x; }",                                       # internal linkage
    "inline int f(int x) { return x; }",                                       # maybe never emitted
    "template <typename T> T f(T x) { return x; }",                            # a template
    "#ifdef X\nint f(int x) { return x; }\n#endif",                            # a conditional scope
    "#define R int\nR f(int x) { return x; }",                                 # a macro main.cpp would not have
    "int f(int x) \\\n{ return x; }",                                          # a line splice
    'const char* s = R"(})";\nint f(int x) { return x; }',                     # a raw string
    "auto f(int x) -> int { return x; }",                                      # a trailing return type
    "int f(int x) { return x; ",                                               # unbalanced
])
def test_what_is_not_one_plain_file_scope_definition_is_not_split(src):
    assert declarations(src, ["f"]) is None


def test_mask_keeps_length_and_lines():
    src = 'a /* x\n y */ "q;" // z\nb'
    out = mask(src)
    assert len(out) == len(src) and out.count("\n") == 2 and out.endswith("b") and '"__"' in out


# ----------------------------------------------------------------------------------------------- split_sources


def test_main_cpp_is_what_load_inline_writes_for_the_declarations_alone_after_the_bindings_prelude(monkeypatch,
                                                                                                  tmp_path):
    from torch.utils import cpp_extension as ce

    main, kernel = split_sources(_bound(functions={"scale": "doc"}))
    monkeypatch.setattr(ce, "_jit_compile", lambda *a, **k: None)
    ce.load_inline(name="ext", cpp_sources="torch::Tensor scale(torch::Tensor x, double a);",
                   functions={"scale": "doc"}, build_directory=str(tmp_path))
    written = (tmp_path / "main.cpp").read_text()
    assert written.startswith("#include <torch/extension.h>\n")
    assert main == BINDINGS_PRELUDE + written.removeprefix("#include <torch/extension.h>")


def _headers(tmp_path, first_lines: str) -> set[str]:
    """Every header a main.cpp starting with ``first_lines`` reads, from GCC's ``-M`` with the flags torch gives the
    sandbox's CPU builds."""
    import subprocess

    from kevin.sandbox.build.pch import main_cpp_flags

    src = tmp_path / f"unit{len(list(tmp_path.iterdir()))}.cpp"
    src.write_text(first_lines + "\ntorch::Tensor f(torch::Tensor x);\n")
    flags = main_cpp_flags(with_cuda=False, extra_cflags=["-O3"])
    out = subprocess.run(["g++", *flags, "-DTORCH_EXTENSION_NAME=x", "-M", str(src)],
                         capture_output=True, text=True, check=True).stdout
    return {w for w in out.replace("\\\n", " ").split()[2:]}  # after "unitN.o: unitN.cpp"


# what pybind11 consults when it converts a bound function's arguments and results: casters, opaque and holder
# types, type hooks, all of them specialisations inside its namespace
_PYBIND11_SPECIALISATION = re.compile(r"type_caster|PYBIND11_MAKE_OPAQUE|PYBIND11_DECLARE_HOLDER_TYPE|"
                                      r"polymorphic_type_hook|pybind11::detail|namespace pybind11")


@pytest.mark.skipif(not shutil.which("g++"), reason="needs g++")
def test_the_headers_extension_h_adds_to_the_bindings_prelude_specialise_nothing_of_pybind11(tmp_path):
    # a bound function converts its arguments with what its unit specialises of pybind11: with nothing specialised
    # by the headers the bindings prelude leaves out, the split's bindings convert every argument as load_inline's
    light = _headers(tmp_path, BINDINGS_PRELUDE)
    full = _headers(tmp_path, "#include <torch/extension.h>")
    added = full - light
    assert any(h.endswith("torch/all.h") for h in added)  # the C++ frontend is what it leaves out

    def specialising(headers):
        return [h for h in headers if _PYBIND11_SPECIALISATION.search(open(h, errors="replace").read())]

    assert any(h.endswith("torch/csrc/utils/pybind.h") for h in specialising(light))  # the search finds torch's
    assert specialising(added) == []


def test_the_kernel_unit_starts_with_the_light_prelude_without_torch_extension_header():
    _, kernel = split_sources(_bound())
    assert kernel.startswith(f'#include "{LIGHT_HEADER}"\n') and "#include <torch/extension.h>" not in kernel
    assert "dst[i] = (float)(a * src[i]);" in kernel


def test_bindings_without_pytorch_error_handling_bind_the_function_itself():
    main, _ = split_sources(_bound(with_pytorch_error_handling=False))
    assert 'm.def("scale", scale, "scale");' in main


@pytest.mark.parametrize("change", [
    dict(cuda_sources="__global__ void k() {}"), dict(no_implicit_headers=True), dict(functions=None),
    dict(cpp_sources="#include <torch/torch.h>\n" + KERNEL_SOURCE),
    dict(cpp_sources=KERNEL_SOURCE + "\nauto t = torch::empty({2}, torch::requires_grad());"),
    dict(functions=["scale", "missing"]),
])
def test_calls_the_split_cannot_serve_build_as_load_inline_would(change):
    assert split_sources(_bound(**change)) is None


# ----------------------------------------------------------------------------------------------- install on the CPU


class _Fakes:
    """torch's load (the split build) and load_inline (the original) stubbed; ``split_error`` raised by the first."""

    def __init__(self, monkeypatch, split_error=None, so=False):
        from torch.utils import cpp_extension as ce

        self.calls, self.flags, self.split_error, self.so = [], [], split_error, so
        self.cpath = []  # CPATH as each build saw it
        monkeypatch.setattr(ce, "load", self.load)
        monkeypatch.setattr(ce, "load_inline", functools.wraps(ce.load_inline)(lambda **a: self.load_inline(**a)))
        monkeypatch.setattr(ce.JIT_EXTENSION_VERSIONER, "entries", {})

    def load(self, name, sources, build_directory, **kw):
        self.calls.append(("split", build_directory, [os.path.basename(s) for s in sources]))
        self.cpath.append(os.environ.get("CPATH"))
        if self.so:
            open(os.path.join(build_directory, name + ".so"), "w").close()
        if self.split_error is not None:
            raise self.split_error
        return "split module"

    def load_inline(self, **arguments):
        self.calls.append(("full", arguments["build_directory"], None))
        self.cpath.append(os.environ.get("CPATH"))
        self.flags.append(arguments.get("extra_cflags"))
        return "full module"


def _install(tmp_path, light=True):
    from torch.utils import cpp_extension as ce

    _extension.install(str(tmp_path / "ext"), "cpu", light=light)
    return ce.load_inline


def test_only_the_whole_build_has_the_extension_h_pch_on_its_include_path(monkeypatch, tmp_path):
    # the split's main.cpp reads no extension.h; were the PCH's directory on CPATH once it is ready, the object cache
    # (which keys CPATH) would store that main.cpp twice: compiled before the PCH was built, and again after
    monkeypatch.delenv("CPATH", raising=False)
    monkeypatch.setattr(_extension, "main_cpp_pch", lambda root, arguments, light=False: "/ready/pch")
    fakes = _Fakes(monkeypatch, split_error=RuntimeError("Error building extension 'ext': 'relu' is not a member"))
    load_inline = _install(tmp_path)
    assert load_inline(name="ext", cpp_sources=KERNEL_SOURCE, functions=["scale"]) == "full module"
    fakes.split_error = None
    assert load_inline(name="ext2", cpp_sources=KERNEL_SOURCE, functions=["scale"]) == "split module"
    assert [c[0] for c in fakes.calls] == ["split", "full", "split"]
    assert fakes.cpath == [None, "/ready/pch", None]


def test_a_cpu_build_compiles_the_split_units(monkeypatch, tmp_path):
    fakes = _Fakes(monkeypatch)
    assert _install(tmp_path)(name="ext", cpp_sources=KERNEL_SOURCE, functions=["scale"]) == "split module"
    (kind, build_dir, files), = fakes.calls
    assert (kind, files) == ("split", [MAIN, KERNEL])
    assert open(os.path.join(build_dir, KERNEL)).read().startswith(f'#include "{LIGHT_HEADER}"')
    assert open(os.path.join(build_dir, LIGHT_HEADER)).read() == CPU_LIGHT_PRELUDE


def test_a_split_that_does_not_compile_is_built_as_written_and_remembered(monkeypatch, tmp_path):
    fakes = _Fakes(monkeypatch, split_error=RuntimeError("Error building extension 'ext': 'relu' is not a member"))
    load = _install(tmp_path)
    assert load(name="ext", cpp_sources=KERNEL_SOURCE, functions=["scale"]) == "full module"
    assert [c[0] for c in fakes.calls] == ["split", "full"]
    assert os.path.exists(os.path.join(fakes.calls[0][1], LIGHT_FAILED))
    load(name="ext", cpp_sources=KERNEL_SOURCE, functions=["scale"])  # the same source: straight to the full build
    assert [c[0] for c in fakes.calls] == ["split", "full", "full"]


def test_the_whole_build_after_a_failed_split_stops_at_its_first_error(monkeypatch, tmp_path):
    fakes = _Fakes(monkeypatch, split_error=_extension.BuildError("ext", "kernel.cpp:3:1: error: x"))
    load = _install(tmp_path)
    load(name="ext", cpp_sources=KERNEL_SOURCE, functions=["scale"], extra_cflags=["-O3"])
    load(name="ext", cpp_sources=KERNEL_SOURCE, functions=["scale"], extra_cflags=["-O3"])  # marked: straight there
    assert [c[0] for c in fakes.calls] == ["split", "full", "full"]
    assert fakes.flags == [["-O3", _extension.FATAL_ERRORS]] * 2


@pytest.mark.parametrize("flags", [None, ("-O3",)])
def test_the_first_error_stop_keeps_the_calls_own_flags_first(monkeypatch, tmp_path, flags):
    fakes = _Fakes(monkeypatch, split_error=_extension.BuildError("ext", "kernel.cpp:3:1: error: x"))
    _install(tmp_path)(name="ext", cpp_sources=KERNEL_SOURCE, functions=["scale"], extra_cflags=flags)
    assert fakes.flags == [[*(flags or []), _extension.FATAL_ERRORS]]


def test_flags_given_as_a_string_are_built_as_written(monkeypatch, tmp_path):
    # torch reads a string's characters as flags ("-O3" -> "-", "O", "3"): adding one would change what it builds
    fakes = _Fakes(monkeypatch, split_error=_extension.BuildError("ext", "kernel.cpp:3:1: error: x"))
    _install(tmp_path)(name="ext", cpp_sources=KERNEL_SOURCE, functions=["scale"], extra_cflags="-O3")
    assert fakes.flags == ["-O3"]


def test_the_marker_keeps_the_failed_split_builds_log(monkeypatch, tmp_path):
    fakes = _Fakes(monkeypatch, split_error=_extension.BuildError("ext", "kernel.cpp:3:1: error: x"))
    _install(tmp_path)(name="ext", cpp_sources=KERNEL_SOURCE, functions=["scale"])
    assert open(os.path.join(fakes.calls[0][1], LIGHT_FAILED)).read() == "kernel.cpp:3:1: error: x"


def test_a_split_library_missing_a_symbol_is_built_as_written(monkeypatch, tmp_path):
    # a declaration that does not match its definition links (shared libraries may leave symbols undefined) but
    # fails at import: the source is fine as written, so it must not be reported as the candidate's error
    fakes = _Fakes(monkeypatch, split_error=ImportError("ext.so: undefined symbol: _Z5scaleN2at6TensorEd"), so=True)
    assert _install(tmp_path)(name="ext", cpp_sources=KERNEL_SOURCE, functions=["scale"]) == "full module"
    assert [c[0] for c in fakes.calls] == ["split", "full"]


def test_another_error_of_a_built_split_library_is_the_sources_own(monkeypatch, tmp_path):
    fakes = _Fakes(monkeypatch, split_error=ImportError("ext.so: PyInit failed"), so=True)
    with pytest.raises(ImportError, match="PyInit failed"):
        _install(tmp_path)(name="ext", cpp_sources=KERNEL_SOURCE, functions=["scale"])
    assert [c[0] for c in fakes.calls] == ["split"]


def test_light_off_builds_the_call_as_written(monkeypatch, tmp_path):
    fakes = _Fakes(monkeypatch)
    assert _install(tmp_path, light=False)(name="ext", cpp_sources=KERNEL_SOURCE, functions=["scale"]) == "full module"
    assert [c[0] for c in fakes.calls] == ["full"]


# ----------------------------------------------------------------------------------------------- reported errors


def test_the_split_units_later_errors_are_reported_when_its_first_is_the_whole_builds():
    light = "kernel.cpp:9:5: error: 'dts' was not declared\nkernel.cpp:10:5: error: 'n' was not declared"
    full = "main.cpp:9:5: error: 'dts' was not declared"
    assert _extension.reported_errors(light, full) == light.replace("kernel.cpp", "main.cpp")


def test_a_first_error_the_light_prelude_caused_is_not_reported():
    # the split unit fails on a name its prelude lacks; the whole build's own first error is another one
    light = "kernel.cpp:4:5: error: 'at::relu' has not been declared\nkernel.cpp:9:5: error: 'dts' was not declared"
    full = "main.cpp:9:5: error: 'dts' was not declared"
    assert _extension.reported_errors(light, full) == full


@pytest.mark.parametrize("missing", ["\u2018arange\u2019 is not a member of \u2018torch\u2019",
                                     "\u2018at::native::relu\u2019 has not been declared"])
def test_a_later_error_on_a_torch_name_the_light_prelude_may_lack_is_not_reported(missing):
    # the whole build stopped at the typo: whether it has torch::arange is not known, so the split unit's word is not
    light = f"kernel.cpp:9:5: error: 'dts' was not declared\nkernel.cpp:12:9: error: {missing}"
    full = "main.cpp:9:5: error: 'dts' was not declared"
    assert _extension.reported_errors(light, full) == full


def test_an_error_of_the_splits_bindings_unit_is_not_reported():
    # ninja builds both split units: the bindings' main.cpp (declarations only) has other lines than the whole build's
    light = "kernel.cpp:9:5: error: 'dts' was not declared\nmain.cpp:2:1: error: 'f' was not declared"
    full = "main.cpp:9:5: error: 'dts' was not declared"
    assert _extension.reported_errors(light, full) == full


# ----------------------------------------------------------------------------------------------- a real compile


@pytest.fixture(scope="module")
def split_cache(tmp_path_factory, with_shared_compiles):
    """A build cache with the run's precompiled headers and its own object cache (a test here counts what it stores),
    where `_build_in_new_process` builds."""
    return with_shared_compiles(tmp_path_factory.mktemp("split"), objects=False)


BUILD = """
import json, os, sys, torch
from torch.utils import cpp_extension as ce
from kevin.sandbox.build import extension
cache, name, source = sys.argv[1], sys.argv[2], sys.stdin.read()
extension.install(os.path.join(cache, "ext"), "cpu", pch_root=os.path.join(cache, "pch"),
                  obj_root=os.path.join(cache, "obj"))
module = ce.load_inline(name=name, cpp_sources=source, functions=["scale"], extra_cflags=["-O3"])
print(json.dumps({"y": module.scale(torch.arange(6, dtype=torch.float32), 2.0).tolist(),
                  "file": module.__file__}))
"""


def _build_in_new_process(cache, name, source):
    """Build ``source`` as a candidate process would (the sandbox's load_inline installed); its output on 0..5."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", BUILD, cache, name], input=source, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _stored_main_objects(cache):
    """Object-cache entries compiled from a main.cpp (their dependency files name it)."""
    obj = os.path.join(cache, "obj")
    return sorted(f for f in os.listdir(obj) if f.endswith(".d") and "main.cpp" in open(os.path.join(obj, f)).read())


def test_kernels_declaring_the_same_functions_under_other_names_share_one_main_o(split_cache):
    first = _build_in_new_process(split_cache, "ext", KERNEL_SOURCE)
    stored = _stored_main_objects(split_cache)
    second = _build_in_new_process(split_cache, "other", KERNEL_SOURCE.replace("a * src[i]", "a * src[i] + 1"))
    assert first["y"] == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]  # 2 * [0..5]
    assert second["y"] == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]  # 2 * [0..5] + 1
    assert len(stored) == 1 and _stored_main_objects(split_cache) == stored  # the second main.o was served


def test_a_kernel_using_atens_thread_pool_builds_split(split_cache):
    source = KERNEL_SOURCE.replace(
        "for (int64_t i = 0; i < x.numel(); ++i) dst[i] = (float)(a * src[i]);",
        "at::parallel_for(0, x.numel(), 1, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) "
        "dst[i] = (float)(a * src[i]); });")
    built = _build_in_new_process(split_cache, "ext", source)
    assert built["y"] == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]  # 2 * [0..5]
    assert os.path.isfile(os.path.join(os.path.dirname(built["file"]), KERNEL))  # not the fallback's build


def test_the_kernel_unit_is_compiled_with_the_precompiled_light_prelude(split_cache):
    # gcc -H prints "! <file>.gch" for a precompiled header it uses; the real build's flags, from its build.ninja
    import shlex
    import subprocess

    from kevin.sandbox.build import pch

    build_dir = os.path.dirname(_build_in_new_process(split_cache, "ext", KERNEL_SOURCE)["file"])
    with open(os.path.join(build_dir, "build.ninja")) as f:
        cflags = shlex.split(next(x for x in f if x.startswith("cflags = "))[len("cflags = "):])
    run = subprocess.run([pch.compiler(), *cflags, "-fsyntax-only", "-H", KERNEL], cwd=build_dir, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stderr.splitlines()[0] == "! " + LIGHT_GCH  # found beside kernel.cpp, where GCC looks first
    assert os.path.realpath(os.path.join(build_dir, LIGHT_GCH)).startswith(os.path.realpath(pch.root(split_cache)))


def test_two_extensions_with_the_same_bindings_in_one_process_keep_their_own_kernels(split_cache, monkeypatch):
    # Python hands back the module it loaded first for a name: the second one is named for both its units
    import torch
    from torch.utils import cpp_extension as ce

    from kevin.sandbox.build import split

    monkeypatch.setattr(ce, "load_inline", ce.load_inline)  # restored after the test (install replaces it)
    monkeypatch.setattr(split, "_LOADED", {})  # as in a new candidate process
    _extension.install(os.path.join(split_cache, "ext"), "cpu", pch_root=os.path.join(split_cache, "pch"),
                       obj_root=os.path.join(split_cache, "obj"))
    x = torch.arange(6, dtype=torch.float32)
    first = ce.load_inline(name="ext", cpp_sources=KERNEL_SOURCE, functions=["scale"], extra_cflags=["-O3"])
    second = ce.load_inline(name="other", cpp_sources=KERNEL_SOURCE.replace("a * src[i]", "a * src[i] + 1"),
                            functions=["scale"], extra_cflags=["-O3"])
    assert first.scale(x, 2.0).tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]  # 2 * [0..5]
    assert second.scale(x, 2.0).tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]  # 2 * [0..5] + 1


FAILED_BUILD = """
import os, sys
from torch.utils import cpp_extension as ce
from kevin.sandbox.build import extension
cache, source = sys.argv[1], sys.stdin.read()
extension.install(os.path.join(cache, "ext"), "cpu", pch_root=os.path.join(cache, "pch"),
                  obj_root=os.path.join(cache, "obj"))
try:
    ce.load_inline(name="typos", cpp_sources=source, functions=["scale"], extra_cflags=["-O3"])
except extension.BuildError as exc:
    print(exc.log)
"""


def test_a_source_with_two_typos_reports_both_though_the_whole_build_stops_at_the_first(split_cache):
    import glob
    import subprocess
    import sys

    source = KERNEL_SOURCE.replace("dst[i] =", "dts[i] =").replace("return y;", "return yy;")
    done = subprocess.run([sys.executable, "-c", FAILED_BUILD, split_cache], input=source, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    errors = [x for x in done.stdout.splitlines() if ": error: " in x]
    # main.cpp: load_inline's "#include <torch/extension.h>", then KERNEL_SOURCE: `return y;` is its line 11 and the
    # loop its line 10, so main.cpp lines 12 and 11; the first error in the file comes first
    assert [x.split(": error:")[0].rsplit(":", 1)[0] for x in errors] == ["main.cpp:11", "main.cpp:12"]
    assert "dts" in errors[0] and "yy" in errors[1]
    whole = [f for f in glob.glob(os.path.join(split_cache, "ext", "*", "build.ninja")) if "typos" in open(f).read()
             and KERNEL not in open(f).read()]
    assert len(whole) == 1 and _extension.FATAL_ERRORS in open(whole[0]).read()  # the verdict's build stopped early
