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

    key = sha256(compiler (as called, and its binary's path, size, mtime), the argv with the build directory
                 replaced by a marker, sha256(source), the variables GCC reads (include paths, PATH, ...; the
                 precompiled-header directory replaced by a marker), $KEVIN_OBJCACHE_SALT (torch's version, headers))

and serves ``<cache>/obj/<key>.o`` with its dependency file (the build directory substituted back) when present;
otherwise it takes ``<key>.lock`` (concurrent identical compiles wait for the first instead of repeating it),
runs the real compiler and stores the result. Every other call (the link, ``-dumpfullversion``, ``-v``) runs the
real compiler unchanged, and so does any compile when the cache cannot be read or written.

What is never stored (`cacheable`; a ``<key>.skip`` marker then lets later identical compiles skip the lock):
a compile error; a unit whose dependency file names a file outside the stable roots of
``$KEVIN_OBJCACHE_ROOTS`` (torch, Python, the system, CUDA; the precompiled headers) or inside the build
directory or the sandbox cache (``$KEVIN_OBJCACHE_FORBID``); a call whose include flags name such a place, or
that has a word outside the short list of harmless ones (`flag_paths`: preprocessor, assembler, plugin and
``-march=native`` flags, response files and long options are refused); a source that mentions ``asm``,
``incbin``, ``embed``, ``section``, token pasting or character escapes (`source_is_plain`: an assembler
``.incbin`` of a file beside it appears in no dependency file). GCC leaves headers of system directories out of
``-MMD`` output: that is safe because such directories can only come from the flags checked here, or from the
variables in the key.

Safety: the key holds what the object depends on that can differ between two build directories; the
precompiled header is left out because ``main.o`` is byte-identical with and without it (:mod:`._pch`). Not
byte-identical: a ``__FILE__`` in ``main.cpp`` (e.g. a ``TORCH_CHECK`` in a CPU candidate's kernel) names the
build directory of the first compile, which only shows in error messages. Candidates run as the same user and
could rewrite this cache, as they could rewrite ``<cache>/ext``; here one rewritten object would reach every
later extension with the same bindings. The static layer forbids file access. ``tests/sandbox/build/test_objcache.py``
drives the shim with a fake compiler that counts its calls, and with the real one.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

REAL_CXX = "KEVIN_OBJCACHE_CXX"
"""the compiler the shim stands for, as torch would call it (``shutil.which($CXX)``, a ccache wrapper kept)"""
CACHE = "KEVIN_OBJCACHE_DIR"
"""where objects are stored; unset or empty: pass every call through"""
SALT = "KEVIN_OBJCACHE_SALT"
"""what else the object depends on (torch's version and include directory)"""
ROOTS = "KEVIN_OBJCACHE_ROOTS"
"""os.pathsep-separated directories whose headers are fixed for a salt; a dependency elsewhere: not stored"""
FORBID = "KEVIN_OBJCACHE_FORBID"
"""os.pathsep-separated directories under the roots that still do not count as stable (the sandbox cache)"""
PCH = "KEVIN_OBJCACHE_PCH"
"""the precompiled headers' root: stable, and replaced by a marker in ``CPATH`` for the key"""
MARK = "\x00BUILD\x00"
ENV_KEYED = ("CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH", "OBJC_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH",
             "PATH", "SOURCE_DATE_EPOCH", "DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES", "GCC_COMPARE_DEBUG")
PATH_FLAGS = ("-isystem", "-idirafter", "-iquote", "-include", "-imacros", "-I")
"""flags whose value is a file or directory the compiler reads (separate or joined): each must be stable"""
SAFE_PREFIXES = ("-D", "-U", "-O", "-std=", "-f", "-W", "-g", "-m", "-pthread", "-pipe", "-w", "-pedantic")
"""the other words a compile may have and still be stored (torch's rule writes only these)"""
UNSAFE_PREFIXES = ("-fplugin", "-Wp,", "-Wa,", "-Wl,", "-march=native", "-mtune=native", "-mcpu=native",
                   "-fdebug-prefix-map", "-ffile-prefix-map", "-fmacro-prefix-map", "-fprofile", "-fauto-profile")
"""words that match `SAFE_PREFIXES` but read other files, reach other tools or depend on the host: never stored"""
SOURCE_WORDS = ("asm", "incbin", "##", "\\x", "\\u", "\\U", *(f"\\{d}" for d in "01234567"))
SOURCE_PATTERNS = (re.compile(r"\bsection\b"), re.compile(r"(#|%:)(\s|/\*[\s\S]*?\*/)*embed\b"))
"""a source holding one of these (after joining continued lines) is never stored: inline assembly (``asm``, or a
``section`` attribute) can read a file (``.incbin``) that no dependency file names, ``#embed`` reads one, and
token pasting or escapes could spell them"""


def _shim_text() -> str:
    return f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -I {shlex.quote(os.path.abspath(__file__))} \"$@\"\n"


def shim(cache_dir: str) -> str:
    """The shim executable for ``$CXX`` (written once into ``<cache_dir>/bin``, named for its text, so that two
    installs sharing a cache never rewrite each other's); its path. torch accepts a compiler whose resolved path
    contains "g++" without probing it."""
    text = _shim_text()
    path = os.path.join(cache_dir, "bin", f"kevin-{hashlib.sha256(text.encode()).hexdigest()[:12]}-g++")
    if os.path.isfile(path):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    _write(path, text.encode(), mode=0o755)
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


def flag_paths(argv: list[str]) -> list[str] | None:
    """The paths that `PATH_FLAGS` give the compiler, or None when some other word of the call is not one the cache
    knows to be harmless (`SAFE_PREFIXES`, minus `UNSAFE_PREFIXES`; the ``-MMD -MF -c -o`` words and their values).

    >>> flag_paths(["-MMD", "-MF", "m.d", "-isystem", "/t/include", "-I.", "-O2", "-c", "/b/m.cpp", "-o", "m.o"])
    ['/t/include', '.']
    >>> flag_paths(["--include-directory-after=."]) is None, flag_paths(["-Wp,-isystem,."]) is None
    (True, True)
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag = next((f for f in PATH_FLAGS if arg.startswith(f)), None)
        if arg in ("-MF", "-c", "-o"):
            i += 1  # its value is checked by `parse` (the object, the dependency file, the source)
        elif arg == "-MMD":
            pass
        elif flag is not None:
            if arg == flag:
                if i + 1 >= len(argv):
                    return None
                out.append(argv[i + 1])
                i += 1
            else:
                out.append(arg[len(flag):])
        elif not arg.startswith(SAFE_PREFIXES) or arg.startswith(UNSAFE_PREFIXES):
            return None
        i += 1
    return out


def source_is_plain(text: str) -> bool:
    r"""Whether the source, with continued lines joined, holds none of `SOURCE_WORDS`.

    >>> source_is_plain("int f();"), source_is_plain("as\\\nm(\".incbin x\");"), source_is_plain("#/**/embed <x>")
    (True, False, False)
    >>> source_is_plain("at::Tensor embedding_intersection(at::Tensor x);")
    True
    """
    joined = text.replace("\\\n", "")
    return not any(w in joined for w in SOURCE_WORDS) and not any(p.search(joined) for p in SOURCE_PATTERNS)


def _under(path: str, dirs: list[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == d or real.startswith(os.path.join(d, "")) for d in dirs)


def cacheable(deps: list[str], source: str, argv: list[str], env: dict[str, str]) -> bool:
    """Whether the object of this compile depends only on what the key holds (see the module docstring).

    ``deps``: the prerequisites of its dependency file; ``env``: the variables of this module's protocol.
    """
    roots = [os.path.realpath(r) for r in env.get(ROOTS, "").split(os.pathsep) if r]
    pch = [os.path.realpath(env[PCH])] if env.get(PCH) else []
    forbid = [os.path.realpath(d) for d in env.get(FORBID, "").split(os.pathsep) if d]
    forbid.append(os.path.realpath(os.path.dirname(source)))

    def stable(path: str) -> bool:
        if not os.path.isabs(path):
            return False
        return _under(path, pch) or (_under(path, roots) and not _under(path, forbid))

    paths = flag_paths(argv)
    if paths is None or not all(stable(p) for p in paths):
        return False
    with open(source, "rb") as f:
        if not source_is_plain(f.read().decode(errors="replace")):
            return False
    return all(stable(d) for d in deps if d != source)


def key(cxx: str, argv: list[str], source: str) -> str:
    """The content key of one compile (see the module docstring)."""
    build = os.path.dirname(source)
    real = os.path.realpath(cxx)
    st = os.stat(real)
    with open(source, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    env = {k: os.environ.get(k) for k in ENV_KEYED}
    if env["CPATH"] and os.environ.get(PCH):
        env["CPATH"] = env["CPATH"].replace(os.environ[PCH], MARK)
    payload = [cxx, real, st.st_size, st.st_mtime_ns, [a.replace(build, MARK) for a in argv], digest, env,
               os.environ.get(SALT, "")]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:40]


def dependencies(text: str) -> list[str]:
    """The prerequisites of a make-style dependency file (``main.o: a.h b.h \\`` lines).

    >>> dependencies("main.o: /b/main.cpp \\\\\\n /usr/include/x.h\\n")
    ['/b/main.cpp', '/usr/include/x.h']
    """
    body = text.replace("\\\n", " ").split(":", 1)[-1]
    return body.split()


def _write(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``path`` atomically: a reader sees the whole file or none; no temporary file is left on failure."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


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
        os.execvp(cxx, [cxx, *argv])  # not a compile this cache handles: become the real compiler
    source, obj, dep = parsed
    build = os.path.dirname(source)
    try:
        os.makedirs(cache, exist_ok=True)
        entry = os.path.join(cache, key(cxx, argv, source))
        lock = open(entry + ".lock", "w")
    except OSError:  # an unwritable cache never fails a build
        os.execvp(cxx, [cxx, *argv])
    with lock:
        try:
            if not os.path.exists(entry + ".skip"):  # known not to be stored: no need to wait for each other
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process is killed
        except OSError:
            pass  # no lock: at worst two identical compiles both run
        if os.path.exists(entry + ".skip"):
            lock.close()
            return subprocess.call([cxx, *argv])
        if os.path.exists(entry + ".o") and _serve(entry, obj, dep, build):
            return 0
        rc = subprocess.call([cxx, *argv])
        try:
            if rc == 0:
                with open(dep) as f:
                    deps = dependencies(f.read())
                if cacheable(deps, source, argv, dict(os.environ)):
                    _store(entry, obj, dep, build)
                else:  # depends on more than the key: compiled every time, without waiting for each other
                    _write(entry + ".skip", b"")
            elif rc == 1:  # a compile error (deterministic; a killed compiler or an internal error is not)
                _write(entry + ".skip", b"")
        except (OSError, UnicodeDecodeError):
            pass  # not stored: the next identical compile runs the compiler again
        return rc


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
