"""Content-addressed builds for ``load_inline`` (used inside the compile and candidate processes).

``torch.utils.cpp_extension.load_inline`` keys its build directory by the extension's ``name`` only, so
two candidates reusing a name would share (and fight over) one build. Before the candidate module is
imported, `install` replaces ``load_inline`` by a wrapper that sets ``build_directory`` to

    <cache>/ext/<sha256(name, sources, functions, flags, backend, torch version, arch list, python)>

so one source is compiled once and every later candidate with the same extension loads it in a fraction
of a second, whatever its Python code around it. A call that fails for its source's own errors (`source_error`)
leaves `BUILD_FAILED` there with the errors and the compilers' stamp (`toolchain`), so a later identical call with
the same compilers reports them at once: a policy that writes the same flawed program in every step would
otherwise pay a whole compile for it each time.

It also compiles CUDA sources without ``#include <torch/extension.h>`` (`drop_extension_header`): load_inline
already starts the CUDA unit with ``<torch/types.h>`` (tensors, factories, ``TORCH_CHECK``, dispatch macros),
and what ``extension.h`` adds, the C++ frontend and pybind11, is what kernels may not use. Parsing it took
about 29 of the 53 s of nvcc per candidate on a CPU machine (`benchmarks/LOG.md`).

It then compiles the CUDA unit with `cuda_light_prelude` in place of ``<torch/types.h>`` (`light_arguments`): the
tensor class, the dispatch macros and ATen's allocation factories as their per-operator headers define them, without
the 1,345 operator headers of ``ATen/Functions.h``, the autograd factories and ``torch/library.h`` (torch 2.13:
211,823 preprocessed lines against 324,408), nor the factory headers' own includes (``ATen/Context.h`` and more);
and with ``<ATen/cuda/CUDAContext.h>``, which brings ``ATen/Context.h`` back with the cuBLAS, cuSPARSE and cuSOLVER
headers, replaced by the current stream's header (`CUDA_CONTEXT_LIGHT`). A source that does not compile with it
(it uses something else of torch's) is built again as before, and only that build's errors are reported; after a
failed light build, a marker in its directory sends later evaluations of the same source straight to the full
prelude. A light attempt that ends with no library for another reason (this process waited on another's lock, and
that build failed) also falls back, leaving no marker. Compile errors therefore cost the light attempt too, though its
front end stops at the first errors (6.0 s, against 31.8 s for a whole compile with nearly the same headers, on
the 2-core CPU machine). Sources that include a ``torch/`` header themselves (or ATen's
umbrella headers) keep the full prelude: they pay for the headers anyway.

On the CPU backend it splits the call first (:mod:`.split`): the candidate's sources compile after
`CPU_LIGHT_PRELUDE` in a unit of their own, and ``main.cpp`` keeps only declarations and bindings, which the object
cache below shares between candidates; a split that does not build falls back the same way (`try_light`), to a
whole build that stops at its first error (`FATAL_ERRORS`, `reported_errors`): a compile error then costs the
candidate about a second, not six (benchmarks/LOG.md).

And it compiles a ``main.cpp`` that includes ``<torch/extension.h>`` (the CUDA unit's bindings, a whole CPU build;
not the split's bindings) with the precompiled header of :mod:`._pch` when the parent
has built one for the flags of this call (``CPATH``; the build key and ninja command do not change), through
the object cache of :mod:`._objcache` (``$CXX``): two build directories whose ``main.cpp`` is the same (the
same declarations and flags, other kernels) compile it once.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import inspect
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
from typing import Any, Callable, Iterator, TypeVar

KEY_ARGS = (
    "name", "cpp_sources", "cuda_sources", "sycl_sources", "functions", "extra_cflags", "extra_cuda_cflags",
    "extra_sycl_cflags", "extra_ldflags", "extra_include_paths", "with_cuda", "with_sycl", "is_python_module",
    "with_pytorch_error_handling", "use_pch", "no_implicit_headers",
)


# the directive alone: what follows it on its line stays (a comment it opens, a line splice), or lines that the static
# checks read as commented would become code once the directive is gone. What replaces it holds no comment marker:
# a "*/" in it would close a comment the directive sits in, and compile what the checks read as commented.
_EXTENSION_H = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(<torch/extension\.h>|"torch/extension\.h")', re.M)
EXTENSION_H_DROPPED = "#include <ATen/core/Tensor.h>"
"""What stands for ``#include <torch/extension.h>``: a header every unit already includes first (through
``<torch/types.h>`` or a light prelude), so the directive adds nothing."""


def drop_extension_header(sources: Any) -> Any:
    """CUDA sources (a string or a list of strings) with every ``#include <torch/extension.h>`` directive replaced by
    `EXTENSION_H_DROPPED`; the rest of its line is kept as written.

    >>> drop_extension_header(["#include <torch/extension.h>\\n__global__ void k() {}"])
    ['#include <ATen/core/Tensor.h>\\n__global__ void k() {}']
    """
    if isinstance(sources, str):
        return _EXTENSION_H.sub(EXTENSION_H_DROPPED, sources)
    if isinstance(sources, (list, tuple)):
        return [_EXTENSION_H.sub(EXTENSION_H_DROPPED, x) if isinstance(x, str) else x for x in sources]
    return sources


LIGHT_MARK = "// kevin: a lighter prelude than load_inline's <torch/types.h> (kevin/sandbox/build/extension.py)"
"""The first line of every light prelude: how a build directory's unit is told apart."""

_FACTORIES = ("empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like")


def _prelude(factories: list[str]) -> str:
    """A light prelude whose allocation factories (``at::empty``, ...) come from ``factories``' lines."""
    return "\n".join([
        LIGHT_MARK,
        "#ifndef AT_PER_OPERATOR_HEADERS",
        "#define AT_PER_OPERATOR_HEADERS",
        "#endif",
        "#include <ATen/core/Tensor.h>",
        "#include <ATen/Dispatch.h>",
        *factories,
        "#include <optional>",
        # torch/types.h's namespace block: torch::Tensor, torch::empty_like, torch::kFloat32, ... resolve as there
        "namespace torch {",
        "using namespace at;",
        "#if !defined(FBCODE_CAFFE2) && !defined(C10_NODEPRECATED)",
        "using std::nullopt;",
        "using std::optional;",
        "#endif",
        "using Dtype = at::ScalarType;",
        *[f"constexpr auto {name} = {value};" for name, value in (
            ("kUInt8", "at::kByte"), ("kInt8", "at::kChar"), ("kInt16", "at::kShort"), ("kInt32", "at::kInt"),
            ("kInt64", "at::kLong"), ("kUInt16", "at::kUInt16"), ("kUInt32", "at::kUInt32"),
            ("kUInt64", "at::kUInt64"), ("kFloat16", "at::kHalf"), ("kFloat32", "at::kFloat"),
            ("kFloat64", "at::kDouble"), ("kU8", "kUInt8"), ("kU16", "kUInt16"), ("kU32", "kUInt32"),
            ("kU64", "kUInt64"), ("kI8", "kInt8"), ("kI16", "kInt16"), ("kI32", "kInt32"), ("kI64", "kInt64"),
            ("kF16", "kFloat16"), ("kF32", "kFloat32"), ("kF64", "kFloat64"))],
        "}  // namespace torch",
    ])


LIGHT_PRELUDE = _prelude([f"#include <ATen/ops/{op}.h>" for op in _FACTORIES])
"""Stands in for ``<torch/types.h>``: the tensor class, the dispatch macros, ATen's allocation factories from their
per-operator headers, and torch/types.h's names for them (the CPU kernel unit's, :mod:`.split`)."""

_NOT_AN_OPS_HEADER = re.compile(r'^[ \t]*#[ \t]*include[ \t]*<(?!ATen/ops/\w+_ops\.h>)[^>\n]*>', re.M)


@functools.cache  # (read once per process: the headers of the torch it imported)
def cuda_light_prelude() -> str:
    """The CUDA unit's light prelude: `LIGHT_PRELUDE` with the factories' per-operator headers read from the installed
    torch and put in without their own includes (their ``*_ops.h`` declarations kept).

    Why: ``ATen/ops/empty.h`` and the rest include ``ATen/Context.h``, ``ATen/TensorUtils.h`` and more, which the
    inline factories do not use; nvcc parses every header three times (its host front end, its device front end and
    the host compiler), and those includes are a large part of the prelude (benchmarks/README.md). Candidates that use
    them fail the light build and are built again with the full prelude. `LIGHT_PRELUDE` when a header is missing."""
    import torch

    root, factories = os.path.join(os.path.dirname(torch.__file__), "include"), []
    try:
        for op in _FACTORIES:
            with open(os.path.join(root, "ATen", "ops", f"{op}.h"), encoding="utf-8") as f:
                text = _NOT_AN_OPS_HEADER.sub("", f.read()).replace("#pragma once", "")
            factories.append(f"// ATen/ops/{op}.h, its includes but the operator's declaration left out\n{text}")
    except (OSError, ValueError):  # (a header missing, or not UTF-8)
        return LIGHT_PRELUDE
    return _prelude(factories)


# <ATen/cuda/CUDAContext.h> includes ATen/Context.h and the cuBLAS, cuSPARSE and cuSOLVER headers; kernels take the
# current stream from it (at::cuda:: names c10::cuda's) and AT_CUDA_CHECK. The lighter build includes the stream's
# header in its place (the directive alone, as `_EXTENSION_H`) and defines the check as ATen/cuda/Exceptions.h does.
_CUDA_CONTEXT_H = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<ATen/cuda/CUDAContext\.h>", re.M)
CUDA_CONTEXT_LIGHT = "#include <c10/cuda/CUDAStream.h>"
CUDA_CHECKS = ["#include <c10/cuda/CUDAException.h>", "#define AT_CUDA_CHECK(EXPR) C10_CUDA_CHECK(EXPR)"]
# the ATen headers a source may include and still build after `cuda_light_prelude`: none of them includes a factory
# header, whose definitions that prelude already holds (outside the header, so its #pragma once cannot skip them)
_LIGHTER_ATEN = {"ATen/core/Tensor.h", "ATen/Dispatch.h", "ATen/cuda/CUDAContext.h"}
_INCLUDE = re.compile(r"[ \t]*#[ \t]*include[ \t]*<([^>\n]*)>")


def lighter_sources(cuda: list[str]) -> list[str] | None:
    """The CUDA sources for `cuda_light_prelude`: their live ``#include <ATen/cuda/CUDAContext.h>`` directives made
    `CUDA_CONTEXT_LIGHT`. None when a source does not suit it: one this scan cannot read (`split.mask`: raw strings),
    a conditional directive (which may hide a directive from the build), a quoted include, an ATen header other than
    `_LIGHTER_ATEN`'s, a NUL, form feed or vertical tab (GCC's blanks in directives and splices), a carriage return
    outside a CRLF, a splice from one source into the next (``load_inline`` joins them with newlines), or a context
    directive whose text is not exactly what the scan read (a splice inside, or the tail of a comment before it on its
    line: rewriting that would drop the ``*/``). The scan reads the lines as the preprocessor does
    (`split.join_splices`: multi-line macros are common in kernels), comments and strings masked: a directive inside
    a comment is no directive, and stays as written."""
    from kevin.sandbox.build import split as _split
    from kevin.sandbox.static.source import SPLICE_BLANKS

    out = []
    for k, source in enumerate(cuda):
        seam = k < len(cuda) - 1 and re.search(rf"\\{SPLICE_BLANKS}*\r?\Z", source)  # spliced into the next source
        if seam or re.search(r"[\0\f\v]|\r(?!\n)", source):  # blanks the patterns below would not read as GCC does
            return None
        joined, where = _split.join_splices(source)
        masked = _split.mask(joined)
        if masked is None:
            return None
        for m in _split.DIRECTIVE.finditer(masked):
            if m.group(1) not in _split.PLAIN_DIRECTIVES:
                return None
            if m.group(1) == "include":
                header = _INCLUDE.match(masked, m.start())
                if header is None or (header.group(1).startswith("ATen/") and header.group(1) not in _LIGHTER_ATEN):
                    return None
        for m in reversed(list(_CUDA_CONTEXT_H.finditer(masked))):  # (masking keeps every offset)
            start, end = where[m.start()], where[m.end() - 1] + 1
            if source[start:end] != masked[m.start():m.end()]:
                return None
            source = source[:start] + CUDA_CONTEXT_LIGHT + source[end:]
        out.append(source)
    return out


CPU_LIGHT_PRELUDE = LIGHT_PRELUDE + "\n#include <ATen/Parallel.h>  // at::parallel_for, at::get_num_threads\n"
"""The prelude of a CPU kernel unit (:mod:`.split`): `LIGHT_PRELUDE` and ATen's thread pool, which CPU kernels use."""

LIGHT_FAILED = "kevin-light-failed"  # marker in a light build's directory: this source needs the full prelude

_TORCH_UMBRELLA = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](torch/|ATen/ATen\.h|ATen/Functions\.h)', re.M)


def light_arguments(arguments: dict[str, Any]) -> dict[str, Any] | None:
    """The bound ``load_inline`` arguments of the same build with a light prelude for its CUDA unit, or None when it
    does not apply (no CUDA sources, ``no_implicit_headers`` already set or unknown to this torch, a CUDA source that
    includes a ``torch/`` header or ATen's umbrella headers itself, or one that mentions ``requires_grad``: the light
    prelude's ``torch::empty`` is ``at::empty``, which rejects options asking for gradients, where the full prelude's
    autograd factory accepts them). The prelude is `cuda_light_prelude`, with the sources of `lighter_sources`
    (`CUDA_CHECKS` defined before them where a directive was replaced), when they suit it; else `LIGHT_PRELUDE` and
    the sources as written.

    ``main.cpp`` keeps its bytes: ``no_implicit_headers`` would drop its ``<torch/extension.h>``, so it is put back
    first, where load_inline puts it (its precompiled header and object cache still apply).
    """
    if "no_implicit_headers" not in arguments or arguments.get("no_implicit_headers"):
        return None
    cuda = arguments.get("cuda_sources")
    cuda = [cuda] if isinstance(cuda, str) else list(cuda or [])
    if not cuda or not all(isinstance(x, str) for x in cuda) or any(_TORCH_UMBRELLA.search(x) for x in cuda):
        return None
    if any("requires_grad" in x for x in cuda):  # at::empty rejects it and at::zeros drops it; torch:: keeps it
        return None
    cpp = arguments.get("cpp_sources")
    cpp = [cpp] if isinstance(cpp, str) else list(cpp or [])
    light = dict(arguments)
    light["cpp_sources"] = ["#include <torch/extension.h>", *cpp]
    lighter = lighter_sources(cuda)
    if lighter is None:  # the factories from their own headers, the sources as written
        light["cuda_sources"] = [LIGHT_PRELUDE, "#include <cuda.h>", "#include <cuda_runtime.h>", *cuda]
    else:
        checks = CUDA_CHECKS if lighter != cuda else []
        light["cuda_sources"] = [cuda_light_prelude(), "#include <cuda.h>", "#include <cuda_runtime.h>", *checks,
                                 *lighter]
    light["no_implicit_headers"] = True
    return light


def _mark_failed(build_dir: str, log: str = "", marker: str = LIGHT_FAILED) -> None:
    """Create ``marker`` (`LIGHT_FAILED` or `BUILD_FAILED`) holding the failed build's ``log``: written to a new file,
    then renamed over the marker, so no link another candidate planted there is followed or truncated."""
    path = os.path.join(build_dir, marker)
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}"
    with contextlib.suppress(OSError):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            f.write(log[:MAX_MARKER])
        os.replace(tmp, path)
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def _failure_log(build_dir: str, marker: str = LIGHT_FAILED) -> str:
    """The log `_mark_failed` kept; "" when there is none, it cannot be read, or the marker is not a regular file (a
    planted FIFO would block the read)."""
    with contextlib.suppress(OSError):
        fd = os.open(os.path.join(build_dir, marker), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                return f.read(MAX_MARKER)
    return ""


BUILD_FAILED = "kevin-build-failed"
"""Marker in a build directory: this exact call failed to compile (`source_error`) with this toolchain; it holds the
reported log, which a later call raises at once instead of compiling again (a flawed program a policy writes in every
step cost a full compile each time)."""

# what another attempt need not repeat: the machine's resources, a crash or a signal, a precompiled header, a tool's
# own traceback; a log that mentions any of them is not remembered
_NOT_THE_SOURCE = re.compile(r"No space left|Cannot allocate memory|memory exhausted|out of memory|Memory allocation|"
                             r"Disk quota|Read-only file system|Stale file handle|file truncated|file not recognized|"
                             r"killed|signal|internal compiler error|Segmentation fault|Bus error|Too many open files|"
                             r"Resource temporarily unavailable|Input/output error|Permission denied|"
                             r"Traceback \(most recent call last\)|\.gch", re.I)
_UNITS = ("main.cpp", "kernel.cpp", "cuda.cu")  # the files load_inline and `.split` write from the sources


def source_error(log: str) -> bool:
    """Whether a failed build's cleaned ``log`` is the compiler rejecting the source: its first error names a line of
    a unit written from the sources (or is the linker's "undefined reference"), and nothing in it is what a second
    attempt might not repeat (`_NOT_THE_SOURCE`).

    >>> source_error("main.cpp:3:1: error: expected ';'"), source_error("c++: fatal error: Killed signal terminated")
    (True, False)
    """
    from kevin.sandbox.feedback import compiler_diagnostics

    first = compiler_diagnostics(log, max_errors=1)
    if not first or _NOT_THE_SOURCE.search(log):
        return False
    return first[0].file in _UNITS or "undefined reference to" in first[0].text


def toolchain() -> str:
    """What a remembered failure holds for: the compilers this process would run (path, size, modification time of
    ``$CXX`` or c++, and of nvcc), so an upgraded compiler builds the source again."""
    import torch.utils.cpp_extension as ce

    found = [shutil.which(os.environ.get("CXX", "c++"))]
    home = os.environ.get("CUDA_HOME") or getattr(ce, "CUDA_HOME", None)
    found.append(os.path.join(home, "bin", "nvcc") if home else shutil.which("nvcc"))
    stamps = []
    for path in found:
        with contextlib.suppress(OSError, TypeError):
            st = os.stat(os.path.realpath(path))
            stamps.append([os.path.realpath(path), st.st_size, st.st_mtime_ns])
    return hashlib.sha256(json.dumps(stamps).encode()).hexdigest()[:16]


def remember_failure(build_dir: str, log: str) -> None:
    """`BUILD_FAILED` in ``build_dir``: the `toolchain` stamp on its first line, then ``log``."""
    _mark_failed(build_dir, f"{toolchain()}\n{log}", BUILD_FAILED)


def remembered_failure(build_dir: str) -> str:
    """The log of a failure remembered in ``build_dir`` by this toolchain; "" when there is none (or another
    toolchain's, or an empty one)."""
    stamp, _, log = _failure_log(build_dir, BUILD_FAILED).partition("\n")
    return log if log and stamp == toolchain() else ""


FATAL_ERRORS = "-Wfatal-errors"
"""GCC's flag to stop at the first error: after it, a ``main.cpp`` that includes ``<torch/extension.h>`` still costs
seconds of template work at the end of the unit (benchmarks/LOG.md), and nothing of that changes the verdict."""

# how GCC reports a name the light prelude lacks: such an error of the split unit may not be the source's own
_MISSING_TORCH_NAME = re.compile(r"is not a member of [\u2018'](?:torch|at|c10|aten)(?:::\w+)*[\u2019']|"
                                 r"[\u2018'](?:torch|at|c10|aten)::[\w:]+[\u2019'] (?:has not been|was not) declared")


def reported_errors(light_log: str, full_log: str) -> str:
    """The errors to report for a CPU call whose split build and whole build both failed. The whole build decides and
    stops at its first error (`FATAL_ERRORS`); when that error is also the split kernel unit's first (same line,
    message and code: both units put the sources after one ``#include`` line, so their lines agree), the kernel unit's
    next errors follow it, up to three in all, named ``main.cpp`` as in the whole build, except one that names a
    torch name the light prelude may lack. Otherwise the whole build's log alone.

    >>> reported_errors("kernel.cpp:3:5: error: 'y' was not declared\\nkernel.cpp:4:5: error: 'z' was not declared",
    ...                 "main.cpp:3:5: error: 'y' was not declared")
    "main.cpp:3:5: error: 'y' was not declared\\nmain.cpp:4:5: error: 'z' was not declared"
    """
    from kevin.sandbox.build.split import KERNEL, MAIN
    from kevin.sandbox.feedback import compiler_diagnostics

    full = compiler_diagnostics(full_log, max_errors=1)
    light = compiler_diagnostics(light_log, max_errors=3)
    if not full or not light or os.path.basename(light[0].file) != KERNEL:
        return full_log
    light = [d._replace(file=MAIN, text=MAIN + d.text[len(d.file):]) for d in light
             if os.path.basename(d.file) == KERNEL and d.text.startswith(d.file)]
    first = full[0]
    if not light or (light[0].line, light[0].message, light[0].code) != (first.line, first.message, first.code):
        return full_log
    kept = [first, *(d for d in light[1:] if not _MISSING_TORCH_NAME.search(d.message))]
    return "\n".join("\n".join([d.text, *d.context]) for d in kept)


NOT_BUILT = object()  # `try_light`'s answer when the caller should build the original call


def try_light(build: Any, light_dir: str, name: Any, undefined_symbols_fail: bool = False) -> Any:
    """``build(light_dir)``'s module, or `NOT_BUILT` when the lighter build failed (a `LIGHT_FAILED` marker is left,
    so later calls with the same source go straight to the original build), found no library (this process waited
    on another's lock, and that build failed; no marker) or was marked failed before. An error after the library was
    built is the source's own and is raised, except, with ``undefined_symbols_fail``, an import that misses a symbol
    (a split build whose declarations do not match their definitions: `.split`).
    """
    import torch.utils.cpp_extension as ce

    if os.path.exists(os.path.join(light_dir, LIGHT_FAILED)):
        return NOT_BUILT
    versions = getattr(ce, "JIT_EXTENSION_VERSIONER", None)
    entries = getattr(versions, "entries", None)
    before = entries.get(name) if isinstance(entries, dict) else None
    try:
        return build(light_dir)
    except Exception as exc:  # noqa: BLE001 - decided below: build the original call, or raise
        failed = isinstance(exc, RuntimeError) and str(exc).startswith("Error building extension")
        failed = failed or (undefined_symbols_fail and isinstance(exc, ImportError) and "undefined symbol" in str(exc))
        if not failed and glob.glob(os.path.join(light_dir, "*.so")):
            raise  # the light library was built: this error is the source's own
        # no library: it failed to build here, or in another process whose lock this one waited on
        if failed:
            _mark_failed(light_dir, exc.log if isinstance(exc, BuildError) else "")
        if isinstance(entries, dict):  # torch would name the retry "<name>_v1": a new build each time
            if before is None:
                entries.pop(name, None)
            else:
                entries[name] = before
        return NOT_BUILT


MAX_BUILD_LOG = 12000
MAX_MARKER = MAX_BUILD_LOG + 200  # a kept log with `clean_build_log`'s trim note and a `toolchain` stamp
_TORCH_BUILD_ERROR = re.compile(r"Error building extension '[^'\n]*'(?::[ ]?)?")


class BuildError(RuntimeError):
    """A failed ``load_inline`` build; its message is the compiler's output (`clean_build_log`), which the worker's
    ``error`` report carries to the parent's compile-error feedback. ``log``: that output alone."""

    def __init__(self, name: str, log: str):
        self.name, self.log = name, log
        super().__init__(f"Error building extension '{name}':\n{log}" if log else f"Error building extension '{name}'")


def clean_build_log(output: str, build_dir: str, limit: int = MAX_BUILD_LOG) -> str:
    """ninja's output of a failed build with its progress lines and compiler command lines dropped and the build
    directory stripped from paths (``main.cpp:12:5: error: ...``); the head kept, where the first errors are.

    >>> clean_build_log("[1/2] c++ -c /b/main.cpp\\nFAILED: main.o\\nc++ -c /b/main.cpp\\n/b/main.cpp:3:1: error: x\\n"
    ...                 "ninja: build stopped: subcommand failed.", "/b")
    'main.cpp:3:1: error: x'
    """
    kept: list[str] = []
    after_failed = False
    for line in output.splitlines():
        if after_failed:  # ninja prints the failed command on the line after ``FAILED: <target>``
            after_failed = False
            continue
        if line.startswith("FAILED: "):
            after_failed = True
            continue
        if re.match(r"\[\d+/\d+\] ", line) or line.startswith("ninja: "):
            continue
        kept.append(line)
    text = "\n".join(kept).strip()
    for d in {build_dir.rstrip("/"), os.path.realpath(build_dir)}:
        text = text.replace(d + "/", "").replace(d, ".")
    return text if len(text) <= limit else text[:limit] + "\n[... build log trimmed]"


def build_key(arguments: dict[str, Any], backend: str) -> str:
    """The content hash of one ``load_inline`` call (its bound arguments)."""
    import torch

    payload = {k: arguments.get(k) for k in KEY_ARGS}
    payload["_env"] = [backend, torch.__version__, os.environ.get("TORCH_CUDA_ARCH_LIST", ""), sys.version_info[:2]]
    blob = json.dumps(payload, sort_keys=True, default=repr).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def main_cpp_pch(pch_root: str | None, arguments: dict[str, Any], light: bool = False) -> str | None:
    """The ready PCH directory (:mod:`._pch`) for the flags this ``load_inline`` call gives main.cpp, or None;
    ``light``: that of the CPU's light prelude for the same flags (its split kernel unit's)."""
    if pch_root is None:
        return None
    from kevin.sandbox.build import pch as _pch

    sources = arguments.get("cuda_sources")
    with_cuda = arguments.get("with_cuda")
    extra = arguments.get("extra_cflags")
    if isinstance(extra, (list, tuple)):  # GCC takes a PCH built without a warning flag: look it up without it
        extra = [f for f in extra if f != FATAL_ERRORS]
    try:
        flags = _pch.main_cpp_flags(with_cuda=bool(sources) if with_cuda is None else bool(with_cuda),
                                    extra_cflags=extra,
                                    extra_include_paths=arguments.get("extra_include_paths"))
        return _pch.find(pch_root, flags, light=light)
    except Exception:  # odd arguments or no CUDA toolkit: compile without it; torch reports real errors
        return None


@contextlib.contextmanager
def object_cache(obj_root: str | None, pch_root: str | None) -> Iterator[None]:
    """Within the block, torch compiles ``main.cpp`` through the :mod:`._objcache` shim (``$CXX``), which serves
    an identical earlier compile from ``obj_root``; no-op for None or when no C++ compiler is found.

    Not thread-safe (it edits ``os.environ``), like `._pch.search_first`.
    """
    from kevin.sandbox.build import objcache as _objcache

    cxx = shutil.which(os.environ.get("CXX", "c++")) if obj_root else None  # as torch calls it (a ccache link kept)
    if cxx is None:
        yield
        return
    import torch
    from torch.utils import cpp_extension as ce

    roots = [*ce.include_paths(), sys.prefix, sys.base_prefix, "/usr", os.environ.get("CUDA_HOME", ""),
             getattr(ce, "CUDA_HOME", None) or ""]  # (torch may have found CUDA through `which nvcc`)
    try:
        shim = _objcache.shim(os.path.dirname(obj_root))
        # the compiler's own identity (version, target, configuration): with ccache in front, `cxx` is ccache
        identity = subprocess.run([cxx, "-v"], capture_output=True, text=True, timeout=60).stderr[-4000:]
    except (OSError, subprocess.SubprocessError):  # an unwritable cache or a broken compiler: no object cache
        yield
        return
    env = {
        "CXX": shim, _objcache.REAL_CXX: cxx, _objcache.CACHE: obj_root,
        _objcache.SALT: json.dumps([torch.__version__, torch.version.git_version, ce.include_paths(), identity]),
        _objcache.ROOTS: os.pathsep.join(r for r in roots if r),
        _objcache.FORBID: os.path.dirname(obj_root),  # the sandbox cache: other builds' files live there
        _objcache.PCH: pch_root or "",
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


T = TypeVar("T")


def call_niced(niceness: int, fn: Callable[[], T]) -> T:
    """``fn()`` in a thread of its own at nice value ``niceness``: the compilers it starts inherit that thread's
    value (Linux keeps one per thread), while this thread keeps its own. ``fn``'s exception is raised here. At or
    below this thread's value, ``fn()`` runs here (an unprivileged thread cannot lower its nice value)."""
    if niceness <= os.getpriority(os.PRIO_PROCESS, threading.get_native_id()):
        return fn()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="kevin-build", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def install(ext_root: str, backend: str, on_build: Any = None, pch_root: str | None = None,
            obj_root: str | None = None, light: bool = True, niceness: int = 0) -> None:
    """Patch ``torch.utils.cpp_extension.load_inline`` to build in a content-addressed directory.

    ``on_build(build_dir)`` is called before each build (the parent uses it to clear the build lock of a
    process it had to kill mid-build). ``pch_root``: where :func:`._pch.ensure` puts precompiled headers
    (None: never use one). ``obj_root``: the :mod:`._objcache` directory (None: every ``main.cpp`` is compiled).
    ``light``: try a light prelude first for CUDA units (`light_arguments`).
    ``niceness``: the nice value the builds run at (`call_niced`): above the worker's own, its compilers yield a core
    they share to a timed worker.
    """
    import torch.utils.cpp_extension as ce

    from kevin.sandbox.build import pch as _pch
    from kevin.sandbox.build import split as _split

    original = ce.load_inline
    signature = inspect.signature(original)

    def load_inline(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        if backend == "cuda" and arguments.get("cuda_sources") and not arguments.get("no_implicit_headers"):
            arguments["cuda_sources"] = drop_extension_header(arguments["cuda_sources"])
            lighter = light_arguments(arguments) if light else None
            if lighter is not None:
                built = try_light(lambda d: build(lighter, d), os.path.join(ext_root, build_key(lighter, backend)),
                                  arguments.get("name"))
                if built is not NOT_BUILT:
                    return built
        elif backend == "cpu" and light and (units := _split.split_sources(arguments)) is not None:
            light_dir = os.path.join(ext_root, build_key({**arguments, "cpp_sources": ["kevin: split", *units]},
                                                         backend))
            built = try_light(lambda d: build(arguments, d, units), light_dir, arguments.get("name"),
                              undefined_symbols_fail=True)
            if built is not NOT_BUILT:
                return built
            if os.path.exists(os.path.join(light_dir, LIGHT_FAILED)):
                return build_after_split(arguments, light_dir)
        return build(arguments, os.path.join(ext_root, build_key(arguments, backend)))

    def build_after_split(arguments: dict[str, Any], light_dir: str) -> Any:
        """The CPU call as written, after its split build failed: GCC stops at the first error (`FATAL_ERRORS`;
        a build that succeeds is the same), and the errors reported are `reported_errors`'."""
        flags = arguments.get("extra_cflags")
        if not (flags is None or isinstance(flags, (list, tuple))):  # torch reads a string's characters as flags
            return build(arguments, os.path.join(ext_root, build_key(arguments, backend)))
        fatal = {**arguments, "extra_cflags": [*(flags or []), FATAL_ERRORS]}
        try:
            return build(fatal, os.path.join(ext_root, build_key(fatal, backend)))
        except BuildError as exc:
            raise BuildError(exc.name, reported_errors(_failure_log(light_dir), exc.log)) from None

    def build(arguments: dict[str, Any], build_dir: str, units: tuple[str, str] | None = None) -> Any:
        os.makedirs(build_dir, exist_ok=True)
        if known := remembered_failure(build_dir):  # this exact call failed before: the same errors
            raise BuildError(str(arguments.get("name")), known)
        # verbose=False: torch then captures ninja's output into its exception (verbose prints it to stdout)
        arguments = {**arguments, "build_directory": build_dir, "verbose": False}
        if on_build is not None:
            on_build(build_dir)
        # the split's main.cpp reads no extension.h: on its include path only once that PCH is ready, the object
        # cache (which keys CPATH) would compile one main.cpp under two keys. Its kernel unit finds its own PCH in
        # its build directory (`_split.build` links it there).
        pch_dir = main_cpp_pch(pch_root, arguments) if units is None else None
        light_dir = main_cpp_pch(pch_root, arguments, light=True) if units is not None else None
        with _pch.search_first(pch_dir), object_cache(obj_root, pch_root):
            try:
                return call_niced(niceness, lambda: original(**arguments) if units is None
                                  else _split.build(arguments, units, build_dir, light_dir))
            except RuntimeError as exc:
                failed = _TORCH_BUILD_ERROR.match(str(exc))
                if failed is None or isinstance(exc, BuildError):
                    raise
                log = clean_build_log(str(exc)[failed.end():], build_dir)
        if source_error(log):  # (outside the block: its $CXX is the object cache's shim, not the toolchain's)
            remember_failure(build_dir, log)
        raise BuildError(str(arguments.get("name")), log) from None  # (no chained CalledProcessError)

    load_inline.__doc__ = original.__doc__
    ce.load_inline = load_inline


def import_candidate(path: str) -> Any:
    """Import the candidate file as module ``candidate`` (this runs its ``load_inline`` calls)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("candidate", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate"] = module
    spec.loader.exec_module(module)
    return module
