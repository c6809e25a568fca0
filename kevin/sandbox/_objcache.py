"""A content-addressed cache of compiled ``main.o`` files, shared by every build directory (standard library only).

Why: on the CUDA backend ``load_inline`` writes a ``main.cpp`` that holds only the candidate's declarations and
their pybind11 bindings, and compiling it costs 6-9 core-seconds per candidate even with the precompiled header
(:mod:`._pch`; most of it is GCC's end-of-unit template instantiation, which a GCC PCH cannot store). Sixteen
trajectories answering one task mostly declare the same wrapper (``torch::Tensor forward(torch::Tensor x);``),
so their ``main.cpp`` files are identical while their kernels differ, and each build directory (keyed by the
whole extension, :mod:`._extension`) compiled the same unit again. With the compilers CPU-bound, those
core-seconds are the sandbox's throughput.

How: the candidate-side ``load_inline`` wrapper points ``$CXX`` at `shim` (an executable in the cache that runs
this file) while torch builds. torch's ninja file uses ``$CXX`` for ``main.cpp`` and for the link, never for
nvcc (nvcc's host compiler comes from ``$CC``, which is left alone). For a call of the form torch writes,
``-MMD -MF <dep> ... -c <source> -o <object> ...``, the shim computes

    key = sha256(compiler binary (path, size, mtime), the argv with the build directory replaced by a marker,
                 sha256(source), the include-path variables, $KEVIN_OBJCACHE_SALT (torch version and headers))

and serves ``<cache>/obj/<key>.o`` with its dependency file (the build directory substituted back) when present;
otherwise it takes ``<key>.lock`` (concurrent identical compiles wait for the first instead of repeating it),
runs the real compiler and stores the result. Every other call (the link, ``-dumpfullversion``, ``-v``) runs the
real compiler unchanged. Nothing is stored when the compile fails or when the dependency file names a header
outside the stable roots of ``$KEVIN_OBJCACHE_ROOTS`` (torch, Python, the system, CUDA, the precompiled
headers): a unit that includes a file beside it is compiled every time.

Safety: the key holds everything the object depends on that can differ between two build directories (the
source bytes, every flag including ``-DTORCH_EXTENSION_NAME``, the compiler, the headers' version); the
precompiled header is left out because ``main.o`` is byte-identical with and without it (:mod:`._pch`).
Candidates run as the same user and could rewrite this cache, as they could rewrite ``<cache>/ext``; the
static layer forbids file access. ``tests/sandbox/test_objcache.py`` drives the shim with a fake compiler
that counts its calls, and with the real one.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile

REAL_CXX = "KEVIN_OBJCACHE_CXX"
"""the compiler the shim stands for (an absolute path)"""
CACHE = "KEVIN_OBJCACHE_DIR"
"""where objects are stored; unset or empty: pass every call through"""
SALT = "KEVIN_OBJCACHE_SALT"
"""what else the object depends on (torch's version and include directory)"""
ROOTS = "KEVIN_OBJCACHE_ROOTS"
"""os.pathsep-separated directories whose headers are fixed for a salt; a dependency elsewhere: not stored"""
SHIM_NAME = "kevin-g++"  # torch accepts a compiler whose resolved path contains "g++" without probing it
MARK = "\x00BUILD\x00"
ENV_KEYED = ("CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH", "SOURCE_DATE_EPOCH")


def shim(cache_dir: str) -> str:
    """The shim executable for ``$CXX`` (written once into ``<cache_dir>/bin``); its path."""
    path = os.path.join(cache_dir, "bin", SHIM_NAME)
    text = f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -I {shlex.quote(os.path.abspath(__file__))} \"$@\"\n"
    try:
        with open(path) as f:
            if f.read() == text:
                return path
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)  # atomic: a concurrent reader sees the old or the new file, never half of one
    return path


def parse(argv: list[str]) -> tuple[str, str, str] | None:
    """(source, object, dependency file) of a ``-MMD -MF dep ... -c source -o object`` call, else None.

    >>> parse(["-MMD", "-MF", "main.o.d", "-O2", "-c", "/b/main.cpp", "-o", "main.o"])
    ('/b/main.cpp', 'main.o', 'main.o.d')
    >>> parse(["main.o", "cuda.o", "-shared", "-o", "x.so"]) is None
    True
    """
    found: dict[str, str] = {}
    for flag in ("-c", "-o", "-MF"):
        at = [i for i, a in enumerate(argv) if a == flag]
        if len(at) != 1 or at[0] + 1 >= len(argv):
            return None
        found[flag] = argv[at[0] + 1]
    if "-MMD" not in argv or not os.path.isabs(found["-c"]) or not found["-c"].endswith(".cpp"):
        return None
    return found["-c"], found["-o"], found["-MF"]


def key(cxx: str, argv: list[str], source: str) -> str:
    """The content key of one compile (see the module docstring)."""
    build = os.path.dirname(source)
    st = os.stat(cxx)
    with open(source, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    payload = [cxx, st.st_size, st.st_mtime_ns, [a.replace(build, MARK) for a in argv], digest,
               [os.environ.get(k) for k in ENV_KEYED], os.environ.get(SALT, "")]
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:40]


def dependencies(text: str) -> list[str]:
    """The prerequisites of a make-style dependency file (``main.o: a.h b.h \\`` lines).

    >>> dependencies("main.o: /b/main.cpp \\\\\\n /usr/include/x.h\\n")
    ['/b/main.cpp', '/usr/include/x.h']
    """
    body = text.replace("\\\n", " ").split(":", 1)[-1]
    return body.split()


def cacheable(deps: list[str], source: str, roots: list[str]) -> bool:
    """Every dependency but the source itself lies under one of ``roots``."""
    roots = [os.path.join(os.path.realpath(r), "") for r in roots if r]
    for dep in deps:
        if dep == source:
            continue
        real = os.path.realpath(dep)
        if not any(real.startswith(r) for r in roots):
            return False
    return True


def _serve(entry: str, obj: str, dep: str, build: str) -> bool:
    """Copy a stored object and its dependency file into place; False when the entry is incomplete."""
    try:
        with open(entry + ".o", "rb") as f:
            blob = f.read()
        with open(entry + ".d") as f:
            deps = f.read().replace(MARK, build)
    except OSError:
        return False
    with open(obj, "wb") as f:  # a fresh file, so ninja sees an output newer than its inputs
        f.write(blob)
    with open(dep, "w") as f:
        f.write(deps)
    return True


def _write(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)  # atomic: a reader sees the whole file or none


def _store(entry: str, obj: str, dep: str, build: str) -> None:
    with open(dep) as f:
        deps = f.read().replace(build, MARK)
    with open(obj, "rb") as f:
        blob = f.read()
    _write(entry + ".d", deps.encode())
    _write(entry + ".o", blob)  # the .o last: its presence means the entry is complete


def run(argv: list[str]) -> int:
    """Compile (or serve) one call; the compiler's exit status."""
    cxx = os.environ.get(REAL_CXX) or "c++"
    cache = os.environ.get(CACHE)
    parsed = parse(argv) if cache else None
    if parsed is None:
        os.execv(cxx, [cxx, *argv])  # not a compile this cache handles: become the real compiler
    source, obj, dep = parsed
    build = os.path.dirname(source)
    os.makedirs(cache, exist_ok=True)
    entry = os.path.join(cache, key(cxx, argv, source))
    with open(entry + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process is killed
        if os.path.exists(entry + ".o") and _serve(entry, obj, dep, build):
            return 0
        rc = subprocess.call([cxx, *argv])
        if rc == 0:
            try:
                with open(dep) as f:
                    deps = dependencies(f.read())
                if cacheable(deps, source, os.environ.get(ROOTS, "").split(os.pathsep)):
                    _store(entry, obj, dep, build)
            except (OSError, UnicodeDecodeError):
                pass  # not stored: the next identical compile runs the compiler again
        return rc


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
