"""Compile-error feedback from real g++ and nvcc failures, through the sandbox's own build path.

Each broken program is imported in a fresh process as the candidate worker imports it (`_extension.install`,
`import_candidate`, the worker's `error_text`); both build at once. The C++ one compiles against the run's shared
precompiled header, as a candidate's main.cpp does in the sandbox, so GCC skips parsing torch's headers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from kevin.sandbox import feedback
from kevin.sandbox.build import extension as _extension
from test_feedback import assert_path_free

CPP_PROGRAM = '''import torch
from torch.utils.cpp_extension import load_inline

cpp_src = """
#include <torch/extension.h>

torch::Tensor scale(torch::Tensor x) {
    auto y = x.contiguous();
    return undeclared_thing * y;
}
"""

ext = load_inline(name="kevin_fb_cpp", cpp_sources=cpp_src, functions=["scale"], extra_cflags=["-O3"], verbose=True)
'''

CUDA_PROGRAM = '''import torch
from torch.utils.cpp_extension import load_inline

cuda_src = """
__global__ void scale_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = factor * x[i];
}

torch::Tensor scale(torch::Tensor x) {
    auto y = torch::empty_like(x);
    scale_kernel<<<1, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""

ext = load_inline(name="kevin_fb_cuda", cpp_sources="torch::Tensor scale(torch::Tensor x);", cuda_sources=cuda_src,
                  functions=["scale"])
'''

DRIVER = """
import json, os, sys
from kevin.sandbox.build import extension as _extension
from kevin.sandbox.worker import channel as _worker
backend, program, ext_root, pch_root = sys.argv[1:5]
if backend == "cuda":
    import torch.utils.cpp_extension as ce
    ce.CUDA_HOME = ce.CUDA_HOME or os.environ["CUDA_HOME"]  # a CPU-only torch looks for no toolkit itself
_extension.install(ext_root, backend, pch_root=pch_root, light=False)
try:
    _extension.import_candidate(program)
    print(json.dumps(None))
except BaseException as exc:
    print(json.dumps(_worker.error_text(exc, 20000)))
"""


def _cuda_home() -> str | None:
    nvcc = shutil.which("nvcc")
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda", nvcc and os.path.dirname(os.path.dirname(nvcc))):
        if home and os.path.exists(os.path.join(home, "include", "cuda_runtime.h")):
            return home
    return None


def _run_driver(root, key: str, backend: str, program: str, env: dict) -> subprocess.Popen:
    """The worker's import of ``program`` in a fresh process, in the build cache under ``root`` (whose ``pch`` the
    worker passes as its precompiled headers' root, as the candidate worker does)."""
    scratch = root / f"kevin-run-{key}x1"
    scratch.mkdir(exist_ok=True)
    (scratch / "candidate.py").write_text(program)
    return subprocess.Popen([sys.executable, "-c", DRIVER, backend, str(scratch / "candidate.py"),
                             str(root / "cache" / "ext"), str(root / "cache" / "pch")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _error_messages(procs: dict) -> dict[str, str | None]:
    out = {}
    for key, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, stderr[-3000:]
        out[key] = json.loads(stdout.strip().splitlines()[-1])
    return out


@pytest.fixture(scope="module")
def build_errors(tmp_path_factory, with_shared_compiles) -> dict[str, str | None]:
    """The worker's ``error`` message for each broken program ('cpp', 'cuda'; None where it could not run), and the
    C++ one again ('cpp_again') with the compilers still there but no ninja to run them. The C++ program's main.cpp
    (``-O3``) compiles against the run's shared precompiled header, as a candidate's does in the sandbox: GCC then
    skips parsing torch's headers before it reaches the error."""
    root = tmp_path_factory.mktemp("feedback-builds")
    with_shared_compiles(root / "cache")
    home = _cuda_home()
    jobs = {"cpp": ("cpu", CPP_PROGRAM)}
    if home is not None:
        jobs["cuda"] = ("cuda", CUDA_PROGRAM)
    env = {**os.environ, "TORCH_CUDA_ARCH_LIST": "9.0", "MAX_JOBS": "1", "CUDA_HOME": home or ""}
    out: dict[str, str | None] = {"cuda": None}
    out.update(_error_messages({key: _run_driver(root, key, *job, env) for key, job in jobs.items()}))
    tools = root / "bin"  # the toolchain as before (its stamp unchanged), torch's build tool gone
    tools.mkdir()
    for name in ("c++", "nvcc"):
        if shutil.which(name):
            os.symlink(shutil.which(name), tools / name)
    again = {**env, "PATH": str(tools)}
    out.update(_error_messages({"cpp_again": _run_driver(root, "cpp", *jobs["cpp"], again)}))
    return out


@pytest.mark.slow
def test_a_gcc_error_maps_to_the_candidates_cpp_sources_line(build_errors):
    # verbose=True in the program: torch would print the compiler's output instead of raising it
    message = build_errors["cpp"]
    assert message is not None
    msg = feedback.compile_error_feedback(message, CPP_PROGRAM)
    lines = msg.splitlines()
    assert lines[0] == "Compilation failed. The first errors:"
    assert lines[1].startswith("cpp_sources line 6 (your program line 9): error: ")
    assert "undeclared_thing" in lines[1]
    assert lines[2] == "    return undeclared_thing * y;"
    assert_path_free(msg)


@pytest.mark.slow
def test_an_nvcc_error_maps_to_the_candidates_cuda_sources_line(build_errors):
    message = build_errors["cuda"]
    if message is None:
        pytest.skip("needs nvcc and a CUDA toolkit")
    msg = feedback.compile_error_feedback(message, CUDA_PROGRAM)
    lines = msg.splitlines()
    assert lines[1] == 'cuda_sources line 4 (your program line 7): error: identifier "factor" is undefined', msg
    assert lines[2].strip() == "if (i < n) y[i] = factor * x[i];"
    assert_path_free(msg)


@pytest.mark.slow
def test_the_workers_build_error_message_is_the_compilers_output_without_the_build_directory(build_errors):
    message = build_errors["cpp"]
    assert message is not None
    assert "kevin.sandbox.build.extension.BuildError: Error building extension 'kevin_fb_cpp':\n" in message
    assert "main.cpp:7:12: error: " in message  # after load_inline's <torch/extension.h> line
    assert "FAILED:" not in message and "-isystem" not in message and "ninja:" not in message
    assert_path_free(message)


@pytest.mark.slow
def test_a_program_that_failed_to_compile_gets_the_same_feedback_again_without_a_build(build_errors):
    first, again = build_errors["cpp"], build_errors["cpp_again"]
    assert first is not None and "undeclared_thing" in first
    assert feedback.compile_error_feedback(again, CPP_PROGRAM) == feedback.compile_error_feedback(first, CPP_PROGRAM)


# ---------------------------------------------------------------- the build error itself (torch's build stubbed)


def test_a_failed_build_raises_the_cleaned_compiler_output(monkeypatch, tmp_path):
    import functools

    from torch.utils import cpp_extension as ce

    seen = {}

    def fake(**arguments):
        seen.update(arguments)
        d = arguments["build_directory"]
        raise RuntimeError(f"Error building extension 'ext': [1/2] c++ -c {d}/main.cpp -o main.o\nFAILED: main.o \n"
                           f"c++ -c {d}/main.cpp -o main.o\n{d}/main.cpp:3:1: error: 'x' does not name a type\n"
                           "    3 | x y;\n      | ^\nninja: build stopped: subcommand failed.\n")

    monkeypatch.setattr(ce, "load_inline", functools.wraps(ce.load_inline)(fake))
    _extension.install(str(tmp_path / "ext"), "cpu")
    with pytest.raises(_extension.BuildError) as caught:
        ce.load_inline(name="ext", cpp_sources="x y;", functions=["f"], verbose=True)
    assert seen["verbose"] is False  # torch captures the output only when not verbose
    assert str(caught.value) == "Error building extension 'ext':\nmain.cpp:3:1: error: 'x' does not name a type\n" \
                                "    3 | x y;\n      | ^"
    assert caught.value.__suppress_context__  # no chained CalledProcessError traceback


def test_a_long_build_log_keeps_its_head_where_the_first_errors_are():
    log = _extension.clean_build_log("main.cpp:1:1: error: first\n" + "note: more\n" * 5000, "/b", limit=500)
    assert log.startswith("main.cpp:1:1: error: first") and len(log) < 600


def _failing_build(monkeypatch, tmp_path, error, light=False):
    """`install` over a build that always fails with ``error`` after ninja's framing; returns (load_inline, calls)."""
    import functools

    from torch.utils import cpp_extension as ce

    calls = []

    def fake(**arguments):
        calls.append(arguments["build_directory"])
        raise RuntimeError(f"Error building extension 'ext': FAILED: main.o \nc++ -c main.cpp\n{error}\n"
                           "ninja: build stopped: subcommand failed.\n")

    monkeypatch.setattr(ce, "load_inline", functools.wraps(ce.load_inline)(fake))
    _extension.install(str(tmp_path / "ext"), "cpu", light=light)
    return ce.load_inline, calls


def test_a_call_that_failed_for_its_sources_own_errors_raises_them_again_without_building(monkeypatch, tmp_path):
    load, calls = _failing_build(monkeypatch, tmp_path, "main.cpp:3:1: error: 'x' does not name a type")
    messages = []
    for _ in range(2):
        with pytest.raises(_extension.BuildError) as caught:
            load(name="ext", cpp_sources="x y;", functions=["f"])
        messages.append(str(caught.value))
    assert len(calls) == 1 and messages[0] == messages[1]
    assert "main.cpp:3:1: error: 'x' does not name a type" in messages[1]


def test_another_source_with_the_same_name_is_still_built(monkeypatch, tmp_path):
    load, calls = _failing_build(monkeypatch, tmp_path, "main.cpp:3:1: error: 'x' does not name a type")
    for source in ("x y;", "x z;"):
        with pytest.raises(_extension.BuildError):
            load(name="ext", cpp_sources=source, functions=["f"])
    assert len(calls) == 2 and calls[0] != calls[1]


def test_a_build_the_machine_killed_is_built_again(monkeypatch, tmp_path):
    # the same source may build once the machine has memory again: such a failure leaves no marker
    load, calls = _failing_build(monkeypatch, tmp_path, "c++: fatal error: Killed signal terminated program cc1plus")
    for _ in range(2):
        with pytest.raises(_extension.BuildError):
            load(name="ext", cpp_sources="x y;", functions=["f"])
    assert len(calls) == 2


def test_a_split_cpu_build_that_failed_reports_the_same_errors_again_without_building(monkeypatch, tmp_path):
    # the sandbox's CPU path: the kernel unit apart from its bindings, then the whole call stopping at its first error;
    # the errors reported join both logs (`reported_errors`), the second time from the two markers
    from kevin.sandbox.build import split as _split

    splits = []

    def split_fails(arguments, units, build_dir, pch_dir=None):
        splits.append(build_dir)
        raise RuntimeError("Error building extension 'ext': kernel.cpp:3:5: error: 'y' was not declared\n"
                           "kernel.cpp:4:5: error: 'z' was not declared")

    monkeypatch.setattr(_split, "split_sources", lambda arguments: ("main", "kernel"))
    monkeypatch.setattr(_split, "build", split_fails)
    load, calls = _failing_build(monkeypatch, tmp_path, "main.cpp:3:5: error: 'y' was not declared", light=True)
    messages = []
    for _ in range(2):
        with pytest.raises(_extension.BuildError) as caught:
            load(name="ext", cpp_sources="int f() { y; z; }", functions=["f"])
        messages.append(str(caught.value))
    assert (len(splits), len(calls)) == (1, 1) and messages[0] == messages[1]
    assert messages[1].endswith("main.cpp:3:5: error: 'y' was not declared\nmain.cpp:4:5: error: 'z' was not declared")


def test_a_failure_remembered_by_another_toolchain_is_built_again(monkeypatch, tmp_path):
    # an upgraded compiler may accept what the old one rejected
    load, calls = _failing_build(monkeypatch, tmp_path, "main.cpp:3:1: error: 'x' does not name a type")
    for stamp in ("old compiler", "new compiler"):
        monkeypatch.setattr(_extension, "toolchain", lambda stamp=stamp: stamp)
        with pytest.raises(_extension.BuildError):
            load(name="ext", cpp_sources="x y;", functions=["f"])
    assert len(calls) == 2


def test_a_log_with_no_compiler_error_is_not_remembered():
    assert not _extension.source_error("ninja: error: loading 'build.ninja': No such file or directory")
    assert not _extension.source_error("main.cpp:3:1: error: x\nc++: internal compiler error: Segmentation fault")
    assert _extension.source_error("cuda.cu(33): error: identifier \"thread\" is undefined")
    # an error first reported inside a header: not a line of the source's own units, so not remembered
    assert not _extension.source_error("/usr/include/c++/12/bits/stl_vector.h:9:1: error: no match for 'operator='")
