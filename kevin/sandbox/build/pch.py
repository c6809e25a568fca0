"""A precompiled ``<torch/extension.h>`` (GCC PCH) for the C++ unit of ``load_inline`` builds.

Why: ``load_inline`` starts ``main.cpp`` with ``#include <torch/extension.h>``. On the CUDA backend that unit
holds only declarations and the pybind11 bindings, yet parsing the header costs ~9 of its ~14.5
core-seconds per candidate (see Measured). With 16 candidates compiling at once, core-seconds per
candidate are throughput.

Why not torch's own ``use_pch=True``: it writes ``extension.h.gch`` into torch's site-packages, and every
``load_inline`` call with ``use_pch=False`` deletes it again, so concurrent candidates race on one file.

How:

- `ensure` (trusted parent, e.g. a background thread at Sandbox creation) builds, per backend and
  ``extra_cflags`` variant, ``<cache>/pch/<key>/torch/extension.h.gch`` where ``key = sha256(compiler
  binary, the exact flags of main.cpp, torch version, python)``. It builds under an exclusive ``flock``
  into a temporary directory, then renames it into place (a directory either is complete or does not
  exist); a failed build leaves only a ``<key>.failed`` marker (with the log) and is not retried for that
  key; the files are made read-only.
- A ``torch/extension.h`` beside the ``.gch`` forwards to torch's header (`FORWARD`).
- The candidate-side ``load_inline`` wrapper (:mod:`._extension`) computes the flags its call gives
  main.cpp (`main_cpp_flags`), looks the directory up (`find`) and, only if it is ready, compiles with
  ``CPATH=<dir>`` (`search_first`). GCC searches ``CPATH`` like ``-I``: before torch's ``-isystem``
  directories, so main.cpp's first line finds ``torch/extension.h.gch`` there. The ninja command line,
  and so the build directory's key and ninja's up-to-date check, are the same with or without the PCH
  (an ``extra_include_paths`` entry would change the command, and ninja would rebuild every cached
  extension once the PCH appears). Flags that differ from a built variant (``-O2``, include paths)
  simply find no PCH.

Safety (checked by hand with ``-H``/``-Winvalid-pch``; the use is checked in ``tests/sandbox/build/test_pch.py``):
GCC uses a ``.gch`` only when it was made by the same compiler with compatible options and macros;
otherwise it skips it (``-Winvalid-pch`` says why, e.g. "not used because `__NO_INLINE__' not defined"
for a ``-O3`` use of a plain PCH; ``-H`` marks it ``x`` instead of ``!``) and reads the real header
through `FORWARD`. A mismatch is only slower, never a different build. ``-DTORCH_EXTENSION_NAME``
differs per candidate, is not used by torch's headers, and is left out of the PCH build (GCC accepts
macros defined at use that the header never mentions). ``main.o`` is byte-identical with and without the
PCH (CUDA and CPU test extensions, GCC 12). ``nvcc`` ignores it: it preprocesses with ``gcc -E``.

Measured (2-core CPU machine, GCC 12.2, torch 2.13, page cache warm, 3 runs each; ``core-s`` = user + sys):

=============================================================  ===============  ============
main.cpp                                                        without PCH      with PCH
=============================================================  ===============  ============
CUDA honest candidate (bindings only), no ``extra_cflags``      14.2-14.7 s      5.6-5.9 s
the same with ``-O3``                                           16.9-17.8 s      8.5-8.9 s
CPU ReLU test extension (kernel in main.cpp), ``-O3``           16.9-19.2 s      8.5-10.0 s
=============================================================  ===============  ============

On the H200 host (torch 2.11, GCC 13.3, 32 vCPUs; ``benchmarks/results/sandbox_h200.md``): ``main.o``
of the CUDA honest candidate 15.3 s without the PCH, 6.4 s with it (6.6-9.2 s with 16 compiles at once).

Building one PCH: ~29 core-s (28-29 s wall warm, 46 s with a cold disk), once per cache and variant;
each ``.gch`` is ~790 MB. On the CPU backend `LIGHT_HEADER` is precompiled too, the prelude of the kernel units that
:mod:`.split` compiles apart from their bindings (8 s, 240 MB; such a unit then compiles in 1.3 s instead of 3.2 s),
first and into a directory of its own (``<key>.light``, `find` with ``light=True``): the kernels a run compiles while
the torch header still builds, most of its first step's, already use it. Their bindings (the split's ``main.cpp``)
start with a lighter prelude than ``extension.h`` and use neither; on the CPU the ``extension.h`` PCH serves the
whole builds: calls the split does not take, and the build after a failed split that reports a compile error. A
compile with it maps the ``.gch`` privately: ~1.15 GB resident, against ~1.45 GB without.

Not covered: clang (no ``.gch`` lookup; `ensure` builds nothing), compiler wrappers such as ccache.
Candidates run as the same user and could rewrite the cache, as they could rewrite ``<cache>/ext``.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import inspect
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator, Sequence

logger = logging.getLogger(__name__)

HEADER = os.path.join("torch", "extension.h")
GCH = HEADER + ".gch"
LIGHT_HEADER = "kevin_light_prelude.h"
"""the CPU kernel unit's prelude (`kevin.sandbox.build.split`), precompiled beside the torch header on the CPU"""
LIGHT_GCH = LIGHT_HEADER + ".gch"

DEFAULT_VARIANTS: dict[str, tuple[tuple[str, ...], ...]] = {"cuda": ((), ("-O3",)), "cpu": (("-O3",),)}
"""``extra_cflags`` variants `ensure` builds per backend: on CUDA none (the KernelBench template) and the common
``-O3`` (an optimisation level changes ``__OPTIMIZE__``, so it needs its own PCH); on the CPU ``-O3`` only, which
the CPU prompt's template passes (each build takes half a minute of both cores of a 2-core machine)."""


def root(cache_dir: str) -> str:
    """Where the precompiled headers of a sandbox cache live."""
    return os.path.join(cache_dir, "pch")


def main_cpp_flags(*, with_cuda: bool, extra_cflags: Sequence[str] | None = (),
                   extra_include_paths: Sequence[str] | None = ()) -> list[str]:
    """The argv words torch gives the compiler for ``main.cpp``, minus ``-DTORCH_EXTENSION_NAME`` (and the
    per-file ``-MMD -MF x -c x -o x``).

    Asked of torch itself: its ninja writer (``torch.utils.cpp_extension._write_ninja_file_to_build_library``,
    which ``load_inline`` uses) writes a build file into a temporary directory, and its ``cflags`` line, which
    ninja runs through ``sh``, is split like ``sh`` would. The flags differ between torch versions (e.g.
    ``-std=c++20`` in torch 2.13, ``-std=c++17`` in 2.11), and GCC silently skips a PCH built with other flags.
    Raises RuntimeError when the writer is missing or fails.
    """
    from torch.utils import cpp_extension as ce

    writer = getattr(ce, "_write_ninja_file_to_build_library", None)
    if writer is None:
        raise RuntimeError("this torch has no _write_ninja_file_to_build_library")
    wanted = {
        "name": "kevin_pch", "sources": ["main.cpp"], "extra_cflags": list(extra_cflags or ()),
        # an arch flag, so the writer does not look for GPUs to pick one (it only affects nvcc's flags)
        "extra_cuda_cflags": ["-arch=sm_90"], "extra_sycl_cflags": [], "extra_ldflags": [],
        "extra_include_paths": list(extra_include_paths or ()), "with_cuda": with_cuda, "with_sycl": False,
        "is_standalone": False,
    }
    accepted = inspect.signature(writer).parameters
    with tempfile.TemporaryDirectory(prefix="kevin-pch-flags-") as tmp:
        path = os.path.join(tmp, "build.ninja")
        try:
            writer(path=path, **{k: v for k, v in wanted.items() if k in accepted})
            with open(path) as f:
                line = next(x for x in f if x.startswith("cflags = "))
        except Exception as exc:  # noqa: BLE001 - a private function: any change in it means no PCH
            raise RuntimeError(f"torch's ninja writer failed: {exc!r}") from exc
    return [w for w in shlex.split(line[len("cflags = "):]) if not w.startswith("-DTORCH_EXTENSION_NAME=")]


def compiler() -> str | None:
    """The absolute path of the C++ compiler torch uses (``$CXX`` or ``c++``), symlinks resolved."""
    path = shutil.which(os.environ.get("CXX", "c++"))
    return os.path.realpath(path) if path else None


def pch_key(flags: Sequence[str], cxx: str | None = None) -> str | None:
    """The content key of one PCH: compiler binary (path, size, mtime), flags, torch and python versions.

    None when no compiler is found. GCC checks its own identity in the ``.gch`` too; the key only keeps
    PCHs of different toolchains apart.
    """
    import torch

    cxx = cxx or compiler()
    if cxx is None:
        return None
    st = os.stat(cxx)
    from kevin.sandbox.build.extension import CPU_LIGHT_PRELUDE

    payload = [cxx, st.st_size, st.st_mtime_ns, list(flags), torch.__version__, list(sys.version_info[:3]),
               hashlib.sha256(CPU_LIGHT_PRELUDE.encode()).hexdigest()]
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:32]


LIGHT_SUFFIX = ".light"
"""``<key><LIGHT_SUFFIX>``: the directory of the CPU's precompiled `LIGHT_HEADER`, beside ``<key>``'s torch header"""


def find(pch_root: str, flags: Sequence[str], light: bool = False) -> str | None:
    """The ready PCH directory for these main.cpp flags (to put first on the include path), or None; ``light``: the
    directory of the precompiled `LIGHT_HEADER` for the same flags instead.

    A directory under ``pch_root`` only appears complete (`build` renames it into place).
    """
    key = pch_key(flags)
    if key is None:
        return None
    path = os.path.join(pch_root, key + (LIGHT_SUFFIX if light else ""))
    return path if os.path.isfile(os.path.join(path, LIGHT_GCH if light else GCH)) else None


@contextlib.contextmanager
def search_first(pch_dir: str | None) -> Iterator[None]:
    """Within the block, compilers started by this process search ``pch_dir`` like a ``-I`` directory
    (``CPATH``: after the command line's ``-I``, before its ``-isystem``); no-op for None.

    Not thread-safe (it edits ``os.environ``); the candidate process imports its module on one thread.
    """
    if pch_dir is None:
        yield
        return
    old = os.environ.get("CPATH")
    os.environ["CPATH"] = pch_dir + (os.pathsep + old if old else "")
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CPATH", None)
        else:
            os.environ["CPATH"] = old


def is_gcc(cxx: str) -> bool:
    """True when ``cxx -v`` reports GCC (clang does not look up ``.gch`` files next to headers)."""
    try:
        out = subprocess.run([cxx, "-v"], capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"},
                             timeout=30).stderr
    except (OSError, subprocess.SubprocessError):
        return False
    return "gcc version" in out and "clang" not in out


def build(pch_root: str, flags: Sequence[str], *, timeout_s: float = 900, light: bool = False,
          pausable: Any = None) -> str | None:
    """Build the PCH for ``flags`` once (concurrent callers wait for the first); its directory, or None.
    ``light``: precompile `LIGHT_HEADER` first, into ``<key>.light`` (the CPU backend's kernel units start with it;
    `find`). ``pausable``: a device gate's `pausable` (the CPU backend's: timings stop the compiler meanwhile).

    Returns None at once when an earlier build of this key failed (``<key>.failed`` holds its log; delete
    it to retry) or no compiler is found. Never raises for a failed compile.
    """
    cxx = compiler()
    key = pch_key(flags, cxx)
    if cxx is None or key is None:
        return None
    final = os.path.join(pch_root, key)
    failed = final + ".failed"
    os.makedirs(pch_root, exist_ok=True)
    parts = [(final + LIGHT_SUFFIX, True, LIGHT_GCH)] if light else []
    parts.append((final, False, GCH))
    with open(final + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        # a part in place stays: the light one of a build that stopped before the torch header, or the torch one of a
        # cache from before the light prelude had a directory of its own
        todo = [(path, light_part) for path, light_part, gch in parts if not os.path.isfile(os.path.join(path, gch))]
        if not todo:
            return final
        if os.path.exists(failed):
            return None
        for stale in glob.glob(glob.escape(final) + "*.tmp-*"):  # left by a builder that was killed
            shutil.rmtree(stale, ignore_errors=True)
        t0 = time.monotonic()
        for path, light_part in todo:
            if not _install(cxx, flags, path, timeout_s, light_part, pausable, failed):
                return None
        logger.info("built precompiled header %s in %.1f s", final, time.monotonic() - t0)
        return final


def _install(cxx: str, flags: Sequence[str], path: str, timeout_s: float, light: bool, pausable: Any,
             failed: str) -> bool:
    """Compile one part of a PCH (`_compile`) into a temporary directory beside ``path``, make it read-only and
    rename it to ``path`` (a directory either is complete or does not exist); on a failed compile write ``failed``
    with the log. Whether ``path`` is in place. The caller holds the key's lock."""
    tmp = tempfile.mkdtemp(prefix=os.path.basename(path) + ".tmp-", dir=os.path.dirname(path))
    log = _compile(cxx, flags, tmp, timeout_s, light=light, pausable=pausable)
    if log is not None:
        shutil.rmtree(tmp, ignore_errors=True)
        with open(failed, "w") as f:
            f.write(log)
        logger.warning("precompiled header build failed (%s; not retried): %s", failed, log[-2000:])
        return False
    for name in (LIGHT_GCH, LIGHT_HEADER) if light else (GCH, HEADER):
        os.chmod(os.path.join(tmp, name), 0o444)
    os.chmod(tmp, 0o755)  # mkdtemp makes it 0o700; candidates may run as another uid some day
    try:
        os.rename(tmp, path)  # atomic; fails if something else (not a builder: we hold the lock) is there
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        logger.warning("precompiled header not installed at %s: %s", path, exc)
        return False
    return True


NICENESS = 10
"""the scheduling priority `ensure`'s compiler runs at (``nice -n``): below the training process and candidates"""


FORWARD = "#include_next <torch/extension.h>  // kevin: the .gch beside this file is tried first\n"
"""``<dir>/torch/extension.h``. Once GCC has seen ``torch/extension.h.gch`` in a directory it opens the
header from that same directory whenever it cannot use the ``.gch`` (e.g. a second ``#include
<torch/extension.h>``, which most candidates write below load_inline's own): without this file that is a
fatal "No such file"; with it, the search goes on to torch's real header."""


def _run(argv: list[str], env: dict[str, str], timeout_s: float, pausable: Any = None) -> subprocess.CompletedProcess:
    """Run the compiler in a process group of its own, registered with ``pausable()`` (a device gate's: timings
    stop the group meanwhile) when given. Raises `subprocess.TimeoutExpired` after killing the group."""
    with pausable() if pausable is not None else contextlib.nullcontext() as hold:
        # a process group of its own, in this session: a new session would be a scheduler autogroup of its own,
        # which Linux gives an equal share of the cores whatever its niceness, so the nice would not hold
        group = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **group)
        try:
            if hold is not None:
                hold.register(proc.pid)
            out, err = proc.communicate(timeout=timeout_s)
        except BaseException:  # a timeout, or anything else: no compiler is left running unpaused
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _compile(cxx: str, flags: Sequence[str], out_dir: str, timeout_s: float, light: bool = False,
             pausable: Any = None) -> str | None:
    """Compile ``<torch/extension.h>`` to ``out_dir/torch/extension.h.gch`` and write the `FORWARD`
    header beside it (``light``: `LIGHT_HEADER` and its ``.gch`` instead); None on success, else the log.

    A header is compiled through a one-line stub that includes it, so its ``#pragma once`` is recorded
    as for any included header (compiling it as the main file warns and ignores the pragma).
    """
    from kevin.sandbox.build.extension import CPU_LIGHT_PRELUDE

    if light:
        with open(os.path.join(out_dir, LIGHT_HEADER), "w") as f:
            f.write(CPU_LIGHT_PRELUDE)
        line, gch = f'#include "{LIGHT_HEADER}"', LIGHT_GCH
    else:
        os.makedirs(os.path.join(out_dir, "torch"))
        line, gch = "#include <torch/extension.h>", GCH
    stub = os.path.join(out_dir, "stub.h")
    with open(stub, "w") as f:
        f.write(line + "\n")
    argv = [cxx, "-x", "c++-header", *flags, stub, "-o", os.path.join(out_dir, gch)]
    try:
        # the environment candidates compile in (a CPATH or CPLUS_INCLUDE_PATH of the caller's would bake other
        # headers into the PCH, and GCC checks flags, not header contents)
        from kevin.sandbox._process import scrubbed_env

        # at a lower priority: at a run's start the build overlaps the policy's first generation, whose threads
        # wait for each other at every op when a core is taken (16.7 s against 2.9 s alone on 2 cores)
        nice_bin = shutil.which("nice")
        nice = [nice_bin, "-n", str(NICENESS)] if nice_bin else []
        run = _run([*nice, *argv], scrubbed_env(out_dir), timeout_s, pausable)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{shlex.join(argv)}\n{exc}"
    finally:
        os.remove(stub)
    if run.returncode != 0:
        return f"{shlex.join(argv)}\n{run.stdout}{run.stderr}"
    if not light:
        with open(os.path.join(out_dir, HEADER), "w") as f:
            f.write(FORWARD)
    return None


def ensure(cache_dir: str, backend: str, variants: Sequence[Sequence[str]] | None = None,
           pausable: Any = None) -> list[str | None]:
    """Build the PCH of main.cpp for ``backend`` ("cpu" or "cuda") and each ``extra_cflags`` variant (None: the
    backend's `DEFAULT_VARIANTS`).

    For the trusted parent; safe to run in a background thread while candidates compile (those that start
    earlier compile without it) and from several processes at once. Returns each variant's directory, or
    None where there is none (not GCC, no CUDA toolkit, a failed build). Never raises for a toolchain
    problem.
    """
    variants = DEFAULT_VARIANTS[backend] if variants is None else variants
    cxx = compiler()
    if cxx is None or not is_gcc(cxx):
        logger.info("no precompiled header: the C++ compiler is not GCC (%s)", cxx)
        return [None] * len(variants)
    dirs: list[str | None] = []
    for extra in variants:
        try:
            flags = main_cpp_flags(with_cuda=backend == "cuda", extra_cflags=extra)
        except (OSError, RuntimeError) as exc:  # e.g. CUDA_HOME not found, or torch's ninja writer changed
            logger.warning("no precompiled header for %s %s: %s", backend, list(extra), exc)
            dirs.append(None)
            continue
        dirs.append(build(root(cache_dir), flags, light=backend == "cpu", pausable=pausable))
    return dirs
