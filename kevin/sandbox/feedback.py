"""One short message per status, what the model reads on its next turn (the paper's five categories).

Format/parse error, compile error (the first compiler errors, mapped to the candidate's own source lines),
runtime error, incorrect (with the max error), correct (with the speedup), plus timeout. Every message is
free of the sandbox's own paths (`scrub_paths`): they say nothing useful to the model and tell it where the
sandbox lives. Standard library only.

>>> correct_feedback(0.5, 1.0)
'Correct. Your kernel took 0.5 ms against 1 ms for the PyTorch reference: a speedup of 2.00x.'
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from typing import Any, NamedTuple, Sequence

from kevin.sandbox._resolve import parse_python

MAX_CHARS = 1200
_NOT_COMPILER = ("Error building extension", "CalledProcessError")
_ERROR_LINE = re.compile(r"(\berror\b|Error:|undefined reference|fatal)", re.IGNORECASE)


def trim(text: str, limit: int = MAX_CHARS) -> str:
    """At most ``limit`` characters: the head, a marker, nothing else."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 15].rstrip() + "\n[... trimmed]"


# ---------------------------------------------------------------- paths

_KEVIN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the ``kevin`` package
_CHECKOUT = os.path.dirname(_KEVIN_DIR)
_PATH_CHARS = r"[^\s\"'`,;:()<>\[\]{}|=]"  # a path ends at blanks, quotes, ``file:line`` and ``file(line)``
_TOKEN = _PATH_CHARS + "*"
_HEX_DIR = re.compile(r"(?:^|/)[0-9a-f]{16,64}/")  # content-addressed build, object and header cache entries
_RUN_DIR = re.compile(r"kevin-run-[A-Za-z0-9_]+(?:/|$)")
_SANDBOX_DIR = re.compile(r"kevin-sandbox-[A-Za-z0-9_]+(?:/|$)")  # a Sandbox's scratch root (holds the run dirs)
_TORCH = re.compile(r"(?:site|dist)-packages/torch(?:/|$)")
_PYLIB = re.compile(r"(?:(?:site|dist)-packages|/lib/python3\.\d+)(?:/|$)")
_PATH_TOKEN = re.compile(_PATH_CHARS + "+")
_MARKER = re.compile(r"kevin-run-|kevin-sandbox-|(?:site|dist)-packages|lib/python3\.\d|/kevin/sandbox/|/kevin/[\w/]*\.py$|"
                     r"(?:^|/)[0-9a-f]{16,64}/|/(?:tmp|var/tmp|dev/shm|home|root|Users)/")
_FLAG = re.compile(r"^-{1,2}[A-Za-z][\w-]*=?")  # ``-I/path``, ``--include-path=/path``


def _roots() -> list[str]:
    """Directories of this machine whose paths the model must not see, longest first."""
    found = {_CHECKOUT, _KEVIN_DIR, tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm", os.path.expanduser("~"),
             os.environ.get("KEVIN_CACHE_DIR", ""), sys.prefix, sys.exec_prefix, sys.base_prefix}
    for key in ("purelib", "platlib", "stdlib", "platstdlib"):
        found.add(sysconfig.get_paths().get(key) or "")
    system = {"", "/", "/usr", "/usr/local", "/opt", "/bin", "/lib", "/usr/lib"}
    roots = {os.path.normpath(r) for r in found if r}
    return sorted(roots - system, key=len, reverse=True)


_ROOTS = _roots()
_ROOT_PATHS = re.compile(r"(?:(?<![\w.+@%%~/-])|(?<=-I)|(?<=-L)|(?<=-isystem))(?:%s)(?=/|[^\w.+@%%~-]|$)%s"
                         % ("|".join(re.escape(r) for r in _ROOTS), _TOKEN))


def _neutral(path: str) -> str:
    """The short token standing for one (possibly left-truncated) path of the sandbox."""
    m = _TORCH.search(path)
    if m:
        return "<torch>/" + path[m.end():] if path[m.end():] else "<torch>"
    m = _PYLIB.search(path)
    if m:
        return "<python>/" + path[m.end():] if path[m.end():] else "<python>"
    if (path == _CHECKOUT or path.startswith(_CHECKOUT + "/") or "/kevin/sandbox/" in path
            or re.search(r"/kevin/[\w/]*\.py$", path)):
        return "<sandbox>"
    for rx in (_RUN_DIR, _HEX_DIR):  # the candidate's scratch directory, a build directory
        found = list(rx.finditer(path))
        if found:
            rest = path[found[-1].end():]
            return rest or "<dir>"
    found = list(_SANDBOX_DIR.finditer(path))
    if found:  # elsewhere in a Sandbox's root (golden data): the file's name only
        return os.path.basename(path[found[-1].end():].rstrip("/")) or "<dir>"
    if os.path.normpath(path) in _ROOTS:
        return "<dir>"
    return os.path.basename(path.rstrip("/")) or "<dir>"


def _scrub_token(token: str) -> str:
    if "/" not in token or token.startswith("//") or not _MARKER.search(token):  # (``//`` of a URL)
        return token
    flag = _FLAG.match(token)
    head = flag.group(0) if flag and token[flag.end():].startswith("/") else ""
    return head + _neutral(token[len(head):])


def _scrub_text(text: str) -> str:
    text = _ROOT_PATHS.sub(lambda m: _neutral(m.group(0)), text)  # this machine's roots, wherever they appear
    return _PATH_TOKEN.sub(lambda m: _scrub_token(m.group(0)), text)  # other machines' paths, truncated ones


def scrub_paths(obj: Any) -> Any:
    """``obj`` with every path of the sandbox, its checkout, Python's libraries, a temporary directory or the
    home directory replaced by a short token (``candidate.py``, ``cuda.cu``, ``<sandbox>``, ``<torch>/include/...``),
    the left-truncated forms of cut logs included. Strings inside lists, tuples and dicts (keys too) are scrubbed;
    other values are returned unchanged.

    >>> scrub_paths({"log": "/tmp/kevin-run-ab12/candidate.py:3", "n": [1, "mp/kevin-run-x9/candidate.py"]})
    {'log': 'candidate.py:3', 'n': [1, 'candidate.py']}
    """
    if isinstance(obj, str):
        return _scrub_text(obj)
    if isinstance(obj, dict):
        return {scrub_paths(k): scrub_paths(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [scrub_paths(x) for x in obj]
    if isinstance(obj, tuple):
        items = [scrub_paths(x) for x in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    return obj


# ---------------------------------------------------------------- compiler logs

_GCC = re.compile(r"^(?P<file>[^\s:][^:\n]*):(?P<line>\d+):(?:\d+:)? (?P<kind>(?:fatal )?error): (?P<msg>.*)$")
_NVCC = re.compile(r"^(?P<file>[^\s(][^(\n]*)\((?P<line>\d+)\): (?P<kind>(?:catastrophic )?error)(?: #[\w-]+)?: "
                   r"(?P<msg>.*)$")
_TOOL = re.compile(r"^(?:\S*/)?(?:nvcc|ptxas|nvlink|cicc|cc1plus|cudafe\+\+|c\+\+|g\+\+|gcc|clang\+\+|collect2|"
                   r"ld(?:\.\w+)?)(?: (?:error|fatal))?\s*:\s*(?P<msg>.*)$")
_GUTTER = re.compile(r"^\s*\d*\s*\| ?")  # gcc's ``   12 |     code`` and ``      |     ^~~``
_UNIT = {"main.cpp": ("cpp_sources", 1), "cuda.cu": ("cuda_sources", 3)}  # load_inline's prelude lines


class Diagnostic(NamedTuple):
    file: str
    line: int
    text: str  # the error line as the compiler wrote it (paths scrubbed)
    kind: str  # ``error``, ``fatal error``, ``catastrophic error``
    message: str  # after ``error: ``
    context: list[str]  # the lines after it that belong to it (quoted code, caret)
    code: str | None  # the quoted source line, gutter removed


def _is_diagnostic(line: str) -> bool:
    return bool(_GCC.match(line) or _NVCC.match(line) or _tool_error(line))


def _tool_error(line: str) -> bool:
    m = _TOOL.match(line)
    return bool(m) and bool(re.search(r"\b(error|fatal)\b|undefined reference|cannot find", line))


def compiler_diagnostics(log: str, *, max_errors: int = 3, context: int = 2) -> list[Diagnostic]:
    """The first ``max_errors`` error diagnostics of g++, nvcc, ptxas or the linker in ``log``."""
    lines = _scrub_text(log).splitlines()
    found: list[Diagnostic] = []
    i = 0
    while i < len(lines) and len(found) < max_errors:
        line = lines[i].rstrip()
        m = _GCC.match(line) or _NVCC.match(line)
        if m is None and not _tool_error(line) and "undefined reference to" not in line:
            i += 1
            continue
        after: list[str] = []
        for nxt in lines[i + 1 : i + 1 + context]:
            if (_is_diagnostic(nxt) or not nxt.strip() or nxt.startswith(("FAILED:", "ninja:", "[", "In file included"))
                    or re.match(r"^\S+: (In|At) ", nxt) or "detected in the compilation of" in nxt):
                break
            after.append(nxt.rstrip())
        code = None
        if m is not None and after:
            first = after[0]
            if m.re is _GCC and _GUTTER.match(first) and re.match(r"^\s*\d+\s*\|", first):
                code = _GUTTER.sub("", first)
            elif m.re is _NVCC and first.strip() and first.strip() != "^":
                code = first
        if m is not None:
            found.append(Diagnostic(m.group("file"), int(m.group("line")), line, m.group("kind"), m.group("msg"), after,
                                    code))
        else:
            found.append(Diagnostic("", 0, line, "error", line, after, None))
        i += 1 + len(after)
    return found


def first_compiler_errors(log: str, *, max_errors: int = 3, context: int = 2) -> str:
    """The first ``max_errors`` compiler error lines of a build log, each with ``context`` lines after it.

    >>> first_compiler_errors("c++ -O3 x.cpp\\nx.cpp:3:5: error: 'y' was not declared\\n    y = 1;\\n")
    "x.cpp:3:5: error: 'y' was not declared\\n    y = 1;"
    """
    found = compiler_diagnostics(log, max_errors=max_errors, context=context)
    if found:
        return "\n".join("\n".join([d.text, *d.context]) for d in found).strip()
    lines = _scrub_text(log).splitlines()
    picked: list[str] = []
    n = i = 0
    while i < len(lines) and n < max_errors:  # anything that looks like an error (another tool's format)
        line = lines[i]
        noise = line.lstrip().startswith(("FAILED:", "ninja:", "[")) or any(s in line for s in _NOT_COMPILER)
        if _ERROR_LINE.search(line) and not noise:
            picked.extend([line] + lines[i + 1 : i + 1 + context])
            n += 1
            i += 1 + context
            continue
        i += 1
    return "\n".join(picked).strip() if picked else _scrub_text(log).strip()[-MAX_CHARS:]


class _Literal(NamedTuple):
    lines: list[str]
    pyline: int  # the program line of the literal's first line
    exact: bool  # its n-th line is on program line ``pyline + n - 1`` (no escaped newlines, no concatenation)


def _literals(source: str) -> list[_Literal]:
    """The string literals of the candidate's program (where its C++/CUDA sources are); an f-string's fields are
    blanked."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return []
    parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts:
            value = node.value
        elif isinstance(node, ast.JoinedStr):
            value = "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "\0"
                            for v in node.values)
        else:
            continue
        if not value.strip():
            continue
        raw = ast.get_source_segment(source, node) or ""
        out.append(_Literal(value.split("\n"), node.lineno, raw.count("\n") == value.count("\n")))
    return out


def _locate(d: Diagnostic, source: str | None) -> str:
    """Where a diagnostic is, in the candidate's own terms: ``cuda_sources line 14 (your program line 52)``."""
    name = os.path.basename(d.file)
    unit, prelude = _UNIT.get(name, (None, 0))
    if unit is None:
        return f"{name}:{d.line}" if name else ""
    expected = d.line - prelude
    if source and d.code is not None and d.code.strip():
        want = d.code.strip()
        hits = [(lit, k) for lit in _literals(source) for k, text in enumerate(lit.lines, 1) if text.strip() == want]
        if hits:
            lit, k = min(hits, key=lambda h: abs(h[1] - expected))
            return f"{unit} line {k}" + (f" (your program line {lit.pyline + k - 1})" if lit.exact else "")
    return f"{unit} line {expected}" if expected >= 1 else f"{name}:{d.line}"


_BINDING = re.compile(r'm\.def\("(?P<name>[^"]*)"')


def _render(d: Diagnostic, source: str | None) -> str:
    if not d.file:
        return "\n".join([d.text, *d.context])
    binding = _BINDING.search(d.code or "")
    if os.path.basename(d.file) == "main.cpp" and binding:
        name = binding.group("name")
        return (f"load_inline(functions=[...]) names {name!r}, but cpp_sources declares no such function "
                f"(the generated binding failed: {d.message})")
    where = _locate(d, source)
    body = [f"{where}: {d.kind}: {d.message}"]
    if d.code is not None:
        body.append(d.code)
        body += [_GUTTER.sub("", c) if _GUTTER.match(c) else c for c in d.context[1:]]
    else:
        body += d.context
    return "\n".join(body)


# ---------------------------------------------------------------- Python errors

_FRAME = re.compile(r'File "[^"\n]*candidate\.py", line (\d+)')
_EXC = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::[ ]?(?P<msg>.*))?$")
_BUILD_FAILED = re.compile(r"Error building extension '[^'\n]*'(?::[ ]?)?")
_UNDEFINED = re.compile(r"undefined symbol: (?P<sym>\S+)")


def _demangle(symbol: str) -> str:
    tool = shutil.which("c++filt")
    if tool is None or not symbol.startswith("_Z"):
        return symbol
    try:
        done = subprocess.run([tool, symbol], capture_output=True, text=True, timeout=5)
        return done.stdout.strip() or symbol
    except (OSError, subprocess.SubprocessError):
        return symbol


def python_error(text: str) -> str | None:
    """One line for a Python exception in a traceback: ``NameError at your program line 12: name 'x' is not defined``;
    None when ``text`` holds no exception line."""
    lines = text.rstrip().splitlines()
    exc = None
    for i in range(len(lines) - 1, -1, -1):
        m = _EXC.match(lines[i])
        if m and not lines[i].startswith(("Traceback", "During handling", "The above exception")) and (
                m.group("msg") is not None or re.search(r"(Error|Exception|Interrupt|Exit)$", m.group("type"))):
            exc = (i, m)
            if re.search(r"(Error|Exception|Warning|Interrupt|Exit|Iteration)$", m.group("type")):
                break
    if exc is None:
        return None
    i, m = exc
    kind = m.group("type").rsplit(".", 1)[-1]
    message = (m.group("msg") or "").strip()
    frames = _FRAME.findall("\n".join(lines[:i]))
    where = f" at your program line {frames[-1]}" if frames else ""
    undefined = _UNDEFINED.search(message)
    if undefined:
        symbol = _demangle(undefined.group("sym"))
        message = (f"the compiled extension has an undefined symbol {symbol} (declared, or named in functions=, "
                   "but never defined, or defined with another name or signature)")
    elif kind == "SyntaxError" or kind == "IndentationError":
        code = [x.strip() for x in lines[max(0, i - 3) : i] if x.strip() and not set(x.strip()) <= set("^~ ")]
        if code and not code[-1].startswith("File "):
            message += f" (`{code[-1]}`)"
    elif kind == "AttributeError" and re.match(r"module '(?!(?:torch|numpy|math|triton|os|sys|einops)')[^'.]*' has no "
                                                 r"attribute", message):  # an extension, most likely
        message += " (an extension has only the functions named in load_inline's functions=)"
    elif kind == "TypeError" and "load_inline" in text and "load_inline" not in message:
        message = f"load_inline: {message}"
    return _scrub_text(f"{kind}{where}: {message}" if message else f"{kind}{where}")


# ---------------------------------------------------------------- the messages


def format_error_feedback(violations: Sequence[str]) -> str:
    body = "\n".join(f"- {v}" for v in violations[:8])
    more = f"\n(and {len(violations) - 8} more)" if len(violations) > 8 else ""
    return trim(_scrub_text(f"Format error: your program was rejected before compiling.\n{body}{more}"))


def compile_error_feedback(log: str, source: str | None = None) -> str:
    """The compiler's first errors, at the candidate's own source lines when ``source`` (its program) is given;
    one line for a Python error while loading (a bad load_inline argument, a NameError, an undefined symbol)."""
    found = compiler_diagnostics(log)
    if found:
        body = "\n".join(_render(d, source) for d in found)
        return trim(_scrub_text(f"Compilation failed. The first errors:\n{body}"))
    build = _BUILD_FAILED.search(log)
    if build is None:
        line = python_error(log)
        if line is not None:
            return trim(f"Your program failed to load: {line}")
        return trim(_scrub_text(f"Compilation failed. The first errors:\n{first_compiler_errors(log)}"))
    output = log[build.end():].strip()
    if not output:
        return "Compilation failed (the compiler's output was not captured)."
    return trim(_scrub_text(f"Compilation failed. The first errors:\n{first_compiler_errors(output)}"))


def runtime_error_feedback(message: str) -> str:
    return trim(_scrub_text(f"Runtime error: {message.strip()}"))


def timeout_feedback(phase: str, seconds: float) -> str:
    return _scrub_text(
        f"Timeout: {phase} did not finish within {seconds:g} s (an infinite loop, a deadlock or far too slow).")


def incorrect_feedback(reason: str, max_abs_error: float | None = None, max_rel_error: float | None = None) -> str:
    tail = ""
    if max_rel_error is not None and "max rel error" not in reason:
        tail = f" (max rel error {max_rel_error:.2g})"  # no abs error: it gives a golden value back (compare.py)
    return trim(_scrub_text(f"Incorrect: {reason}{tail}."))


def correct_feedback(runtime_ms: float | None, baseline_ms: float | None) -> str:
    if runtime_ms is None or baseline_ms is None or runtime_ms <= 0:
        return "Correct. (Speed was not measured.)"
    return (
        f"Correct. Your kernel took {runtime_ms:.4g} ms against {baseline_ms:.4g} ms for the PyTorch reference: "
        f"a speedup of {baseline_ms / runtime_ms:.2f}x."
    )
