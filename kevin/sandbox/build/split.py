"""CPU builds in two units: the kernel with a light prelude, the bindings shared (used by :mod:`.extension`).

Why: ``load_inline`` puts a CPU candidate's whole ``cpp_sources`` into ``main.cpp`` after ``#include
<torch/extension.h>`` and before the pybind11 bindings. GCC then spends most of a compile on the header and the
bindings' templates, not on the kernel: on the 2-core CPU machine (torch 2.13, GCC 12, ``-O3``) a GroupNorm
kernel's ``main.cpp`` took 20.4 s, the same file without the kernel 19.1 s, and the kernel alone after
``extension.LIGHT_PRELUDE`` 3.2 s (``benchmarks/LOG.md``).

How: `split_sources` turns the call into two units,

    main.cpp    `BINDINGS_PRELUDE`, a declaration of each bound function, the bindings load_inline writes
    kernel.cpp  ``#include "kevin_light_prelude.h"`` (`extension.CPU_LIGHT_PRELUDE`, precompiled by :mod:`.pch` on the
                CPU), then the candidate's sources with ``#include <torch/extension.h>`` dropped

and `build` compiles them with ``torch.utils.cpp_extension.load`` and the call's own flags, under a module name
taken from ``main.cpp`` (`module_name`). ``main.o`` then depends only on the functions' signatures, so the object
cache (:mod:`.objcache`) serves it to every later candidate that declares the same functions, whatever it named
its extension.

``main.cpp`` starts with `BINDINGS_PRELUDE`, not ``<torch/extension.h>``: the light prelude's tensor class and
pybind11 with torch's casters, without the C++ frontend that ``extension.h`` adds (``torch/all.h``). A declaration
that names a type only the frontend defines fails the split build, and the call is built whole, as after any failed
split. The bound functions convert their arguments alike, because the headers ``extension.h`` adds specialise nothing
of pybind11 (no caster, opaque or holder type, type hook; checked against the installed torch by
``tests/sandbox/build/test_split_build.py``). It compiles in less time without a precompiled header than
``extension.h`` takes with one (``benchmarks/README.md``), and its text is in ``main.cpp`` itself, so the object
cache, which stores no object that depends on a file of the build directory, still shares ``main.o``.

When it does not apply (`split_sources` returns None) the call builds as ``load_inline`` would: no bound
``functions``, CUDA or SYCL sources, ``no_implicit_headers``, a torch header other than ``extension.h``,
``requires_grad`` (the light prelude's factories are ATen's), raw strings, line splices, conditional
preprocessor directives, or a function whose definition is not one plain file-scope definition (`declarations`).
When the split build fails (a name the light prelude lacks, a declaration main.cpp cannot read), the caller
builds the original call, which decides the verdict, and stops it at its first error (`extension.reported_errors`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from typing import Any, Sequence

from kevin.sandbox.build.extension import CPU_LIGHT_PRELUDE, LIGHT_PRELUDE, drop_extension_header
from kevin.sandbox.build.pch import LIGHT_GCH, LIGHT_HEADER
from kevin.sandbox.static.source import SPLICE

MAIN, KERNEL = "main.cpp", "kernel.cpp"

# file-scope words a plain function definition's head never needs; with one of them the split is not tried
_REFUSED_HEAD = re.compile(r"\b(template|static|inline|extern|constexpr|consteval|friend|operator|namespace|typedef|"
                           r"using|struct|class|enum|union|__attribute__|__declspec|asm|__asm__)\b|\[\[")
BINDINGS_PRELUDE = "\n".join([
    LIGHT_PRELUDE,
    "#include <torch/csrc/utils/pybind.h>  // pybind11 with the casters of torch's types (Tensor, IntArrayRef, ...)",
    "#include <torch/csrc/Exceptions.h>  // torch::wrap_pybind_function",
])
"""What the split's ``main.cpp`` starts with in place of ``#include <torch/extension.h>`` (module doc)."""
DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w*)(.*)$", re.M)
PLAIN_DIRECTIVES = {"include", "pragma", "define", "undef", ""}  # no conditional ones: a scan reads every line
_TORCH_HEADER = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](torch/|ATen/ATen\.h|ATen/Functions\.h)', re.M)


def join_splices(source: str) -> tuple[str, list[int]]:
    """``source`` as the preprocessor reads it after its second phase (each `SPLICE` deleted, in one pass), and for
    each character kept its index in ``source``: a scan of the joined text reads the lines a multi-line macro or a
    continued comment make, and its offsets map back to ``source``.

    >>> join_splices("#define TWO 1 \\\\ \\n + 1")
    ('#define TWO 1  + 1', [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 17, 18, 19, 20])
    """
    kept, i = [], 0
    for m in SPLICE.finditer(source):
        kept.extend(range(i, m.start()))
        i = m.end()
    kept.extend(range(i, len(source)))
    return "".join(source[k] for k in kept), kept


def mask(source: str) -> str | None:
    """``source`` with comments blanked to spaces and the insides of string and character literals to ``_`` (same
    length, newlines kept), or None for what this scanner does not read (raw strings, line splices, an unclosed
    comment or literal).

    >>> mask('int f() { return g("a;{"); } // }')
    'int f() { return g("___"); }     '
    """
    if re.search(r'\bu?8?[RLU]?R"', source) or SPLICE.search(source):
        return None
    out, i, n = list(source), 0, len(source)
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
            out[i:j] = " " * (j - i)
            i = j
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            if j < 0:
                return None
            out[i:j + 2] = [ch if ch == "\n" else " " for ch in source[i:j + 2]]
            i = j + 2
        elif c == '"' or (c == "'" and not (i and source[i - 1].isalnum())):  # 1'000: a digit separator
            j = i + 1
            while j < n and source[j] != c:
                if source[j] == "\n":
                    return None
                j += 2 if source[j] == "\\" else 1
            if j >= n:
                return None
            out[i + 1:j] = "_" * (j - i - 1)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def declarations(source: str, names: Sequence[str]) -> list[str] | None:
    """A declaration (``<head>;``, whitespace collapsed) of each of ``names``, taken from its one definition at file
    scope of ``source``, or None when some name has no such definition, more than one, or one this does not copy
    safely (a template, static, inline or extern function, attributes; a macro the file defines in its head).

    >>> declarations("#include <torch/extension.h>\\n// f(x)\\ntorch::Tensor f(torch::Tensor x,\\n int k) {\\n"
    ...              "  return x; }", ["f"])
    ['torch::Tensor f(torch::Tensor x, int k);']
    """
    masked = mask(source)
    if masked is None:
        return None
    macros = set()
    for m in DIRECTIVE.finditer(masked):
        if m.group(1) not in PLAIN_DIRECTIVES:  # #if / #ifdef / #else ...: scopes this scan cannot follow
            return None
        if m.group(1) in ("define", "undef") and (word := re.match(r"\s*(\w+)", m.group(2))):
            macros.add(word.group(1))
    masked = DIRECTIVE.sub(lambda m: " " * len(m.group(0)), masked)
    clean = "".join(" " if m == " " else s for s, m in zip(source, masked))  # comments dropped, literals kept
    heads: dict[str, list[str]] = {name: [] for name in names}
    depth, start = 0, 0
    i = 0
    while i < len(masked):
        c = masked[i]
        if c == "{":
            depth += 1
            if depth == 1:
                start = i + 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                return None
            if depth == 0:
                start = i + 1
        elif c == ";" and depth == 0:
            start = i + 1
        elif c == "(" and depth == 0:
            word = re.search(r"(\w+)\s*$", masked[start:i])
            close = _matching_paren(masked, i)
            if close is None:
                return None
            after = masked[close + 1:].lstrip()
            if word and word.group(1) in heads and after.startswith("{"):
                heads[word.group(1)].append(" ".join(clean[start:close + 1].split()))
            i = close
        i += 1
    if depth != 0:
        return None
    out = []
    for name in names:
        if len(heads[name]) != 1:
            return None
        head = heads[name][0]
        if _REFUSED_HEAD.search(head) or macros & set(re.findall(r"\w+", head)):
            return None
        out.append(head + ";")
    return out


def _matching_paren(text: str, i: int) -> int | None:
    """Index of the ``)`` closing the ``(`` at ``i`` (``text`` masked), or None."""
    level = 0
    for j in range(i, len(text)):
        level += {"(": 1, ")": -1}.get(text[j], 0)
        if level == 0:
            return j
        if text[j] in "{};":
            return None
    return None


def bindings(functions: Any, with_pytorch_error_handling: bool) -> list[str]:
    """The ``PYBIND11_MODULE`` block load_inline writes for ``functions`` (a name, a list, or name -> docstring)."""
    functions = {functions: functions} if isinstance(functions, str) else functions
    functions = {f: f for f in functions} if isinstance(functions, list) else functions
    wrap = "torch::wrap_pybind_function({})" if with_pytorch_error_handling else "{}"
    return ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {",
            *(f'm.def("{f}", {wrap.format(f)}, "{doc}");' for f, doc in functions.items()), "}"]


def split_sources(arguments: dict[str, Any]) -> tuple[str, str] | None:
    """``(main.cpp, kernel.cpp)`` for the bound ``load_inline`` arguments of a CPU build, or None (module doc)."""
    if arguments.get("cuda_sources") or arguments.get("sycl_sources") or arguments.get("no_implicit_headers"):
        return None
    functions = arguments.get("functions")
    cpp = arguments.get("cpp_sources")
    cpp = [cpp] if isinstance(cpp, str) else list(cpp or [])
    if not functions or not isinstance(functions, (str, list, dict)) or not all(isinstance(x, str) for x in cpp):
        return None
    names = [functions] if isinstance(functions, str) else list(functions)
    if not all(isinstance(x, str) and x.isidentifier() for x in names):
        return None
    source = "\n".join(drop_extension_header(cpp))
    if _TORCH_HEADER.search(source) or "requires_grad" in source:
        return None
    heads = declarations(source, names)
    if heads is None:
        return None
    main = "\n".join([BINDINGS_PRELUDE, *heads,
                      *bindings(functions, bool(arguments.get("with_pytorch_error_handling", True)))])
    return main, "\n".join([f'#include "{LIGHT_HEADER}"', source])


_LOADED: dict[str, str] = {}  # module name -> the build directory this process loaded it from


def module_name(main: str, kernel: str, build_dir: str) -> str:
    """The name a split build's module gets: from ``main.cpp``'s text, so that two candidates declaring the same
    functions under other extension names compile the same ``main.o`` (the name is a macro in it). The candidate
    reaches its functions through the returned module, whatever its name. A second build with the same bindings in
    one process takes a name from both units instead: Python hands back the first module for a name it has loaded.
    """
    name = "kevin_" + hashlib.sha256(main.encode()).hexdigest()[:16]
    if _LOADED.setdefault(name, build_dir) != build_dir:
        name = "kevin_" + hashlib.sha256((main + "\0" + kernel).encode()).hexdigest()[:16]
        _LOADED.setdefault(name, build_dir)
    return name


def build(arguments: dict[str, Any], sources: tuple[str, str], build_dir: str, light_dir: str | None = None) -> Any:
    """Compile and import the split units with ``torch.utils.cpp_extension.load`` and the call's flags; the kernel
    unit's prelude from ``light_dir``'s precompiled `LIGHT_HEADER` when there is one (:func:`.pch.find` with
    ``light=True``; linked beside the header, where GCC looks first; a ``.gch`` built with other flags is skipped by
    GCC, and the header read instead)."""
    from torch.utils import cpp_extension as ce

    paths = []
    for file, text in zip((MAIN, KERNEL, LIGHT_HEADER), (*sources, CPU_LIGHT_PRELUDE)):
        path = os.path.join(build_dir, file)
        if not os.path.exists(path) or open(path).read() != text:  # as load_inline: ninja keeps an unchanged unit
            with open(path, "w") as f:
                f.write(text)
        paths.append(path)
    _link_gch(os.path.join(light_dir, LIGHT_GCH) if light_dir else None, os.path.join(build_dir, LIGHT_GCH))
    return ce.load(module_name(*sources, build_dir), paths[:2], extra_cflags=arguments.get("extra_cflags"),
                   extra_ldflags=arguments.get("extra_ldflags"),
                   extra_include_paths=arguments.get("extra_include_paths"), build_directory=build_dir,
                   verbose=False, with_cuda=False, is_python_module=arguments.get("is_python_module", True),
                   keep_intermediates=arguments.get("keep_intermediates", True))


def _link_gch(target: str | None, link: str) -> None:
    """Make ``link`` a symbolic link to ``target`` when that file exists, else make sure nothing is at ``link``."""
    if target is not None and os.path.isfile(target):
        if os.path.islink(link) and os.readlink(link) == target:
            return
        tmp = f"{link}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        os.symlink(target, tmp)
        os.replace(tmp, link)
        return
    with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
        os.unlink(link)
