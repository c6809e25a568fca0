"""What a candidate's compiled extensions import: a check of the built library, not of its source text.

The static layer reads C++ source, so a spelling it does not know (a macro call before ``::``, a function
pointer, a new trick) can hide a call from it. The built library cannot hide what it links against: an
ATen operator called from C++ is an undefined symbol ``at::_ops::<op>::call`` (or ``redispatch``), and a
libc function is an undefined symbol of its own name. After the candidate's module has imported, the
parent lists the libraries the candidate process has mapped from the extension cache
(``/proc/<pid>/maps``) and reads their undefined dynamic symbols with ``nm -D``.

Rejected: ATen operators outside the runtime inventory's allow-list (allocation, copies, views), and libc
functions for files, memory mapping, signals, processes, threads, dynamic loading and raw system calls.
Python's C API cannot be judged this way: pybind11's own binding code imports it in every extension.

Not judged: libc functions that the toolchain links into every extension, honest or not
(`toolchain_imports`). A RHEL-style GCC (gcc-toolset, as on the H200 image) links ``libstdc++.so`` through a
linker script that adds the static ``libstdc++_nonshared.a``, whose code for newer C++ features calls
``open`` and ``syscall``; every extension built there imports them, so they cannot tell a hack from an
honest kernel (run 14: an honest CPU ReLU extension on that image was rejected for importing both). On the
CUDA backend ``open`` and ``syscall`` are never judged (`HONEST_CUDA_IMPORTS`, seen in every honest CUDA
extension on that image). The static checks still reject those calls in the candidate's source.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess

FORBIDDEN_LIBC = frozenset("""
fopen fopen64 freopen fdopen open open64 openat openat64 creat creat64 unlink unlinkat rename renameat
renameat2 opendir readlink readlinkat mmap mmap64 mremap mprotect madvise sigaction signal sigset bsd_signal
syscall pthread_create dlopen dlmopen dlsym dlvsym fork vfork clone execve execv execvp execvpe execl execlp
execle system popen posix_spawn posix_spawnp shm_open memfd_create socket connect ptrace process_vm_readv
process_vm_writev prctl setrlimit
""".split())
# Imported by every honest CUDA extension built on the H200 image (static code linked into the .so; the
# list is in benchmarks/results/sandbox_h200_run7/cuda_symbols.txt), so the CUDA backend cannot forbid them.
HONEST_CUDA_IMPORTS = frozenset({"open", "syscall"})
FORBIDDEN_LIBC_CUDA = FORBIDDEN_LIBC - HONEST_CUDA_IMPORTS
_LIBRARY = re.compile(r"-l([^\s()]+)|(/[^\s()]+\.a)(?![^\s()])")


def linker_script_archives(text: str, resolve) -> list[str]:
    """The static archives a ``libstdc++.so`` linker script adds: its ``-lNAME`` words (``resolve("libNAME.a")``
    gives the path, or None) and absolute ``.a`` paths. An ELF library (not a script) adds none.

    >>> linker_script_archives("INPUT(libstdc++.so.6 -lstdc++_nonshared)", lambda f: "/gcc/" + f)
    ['/gcc/libstdc++_nonshared.a']
    """
    if text.startswith("\x7fELF"):
        return []
    out = []
    for name, path in _LIBRARY.findall(text):
        found = resolve(f"lib{name}.a") if name else path
        if found:
            out.append(found)
    return out


@functools.lru_cache(maxsize=None)
def toolchain_imports(cxx: str | None = None) -> frozenset[str]:
    """The forbidden libc functions that the C++ compiler ``cxx`` (default ``$CXX`` or ``c++``) links into every
    extension: those the archives of its ``libstdc++.so`` linker script import (`linker_script_archives`).
    Empty where ``libstdc++.so`` is the shared library itself (Debian, Ubuntu) or anything fails."""
    cxx = cxx or shutil.which(os.environ.get("CXX", "c++"))
    if not cxx:
        return frozenset()

    def print_file_name(name: str) -> str | None:
        try:
            out = subprocess.run([cxx, f"-print-file-name={name}"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        path = out.strip()
        return path if os.path.isabs(path) and os.path.isfile(path) else None  # else gcc echoes the bare name

    script = print_file_name("libstdc++.so")
    if script is None:
        return frozenset()
    try:
        with open(script, "rb") as f:
            text = f.read(4096).decode("latin-1")
    except OSError:
        return frozenset()
    imported: set[str] = set()
    for archive in linker_script_archives(text, print_file_name):
        imported.update(undefined_symbols(archive, dynamic=False) or ())
    return frozenset(imported & FORBIDDEN_LIBC)


_ATEN = re.compile(r"\bat::_ops::(\w+)::(?:call|redispatch)\b")


_ALLOWED_STRUCTS: frozenset[str] | None = None


def aten_op_allowed(struct: str) -> bool:
    """Whether ``at::_ops::<struct>`` is an allowed op: struct names are ``op`` or ``op_<overload>``, matched
    exactly against the dispatcher's registered (op, overload) pairs of the allow-list (a prefix match let
    ``unfold_backward`` through as if it were ``unfold``: a red-team finding).

    >>> aten_op_allowed("empty_memory_format"), aten_op_allowed("copy_"), aten_op_allowed("addmm")
    (True, True, False)
    >>> aten_op_allowed("relu_"), aten_op_allowed("unfold"), aten_op_allowed("unfold_backward")
    (False, True, False)
    """
    global _ALLOWED_STRUCTS
    if _ALLOWED_STRUCTS is None:
        import torch

        from ._inventory import ALLOWED  # imports torch: only when there is a symbol to judge

        structs = set()
        for full in torch._C._dispatch_get_all_op_names():
            ns, _, rest = full.partition("::")
            op, _, overload = rest.partition(".")
            if ns == "aten" and op in ALLOWED and overload != "out":
                structs.add(f"{op}_{overload}" if overload else op)
        _ALLOWED_STRUCTS = frozenset(structs)
    return struct in _ALLOWED_STRUCTS


def mapped_extensions(pid: int, ext_root: str) -> list[str]:
    """Shared libraries under ``ext_root`` that process ``pid`` has mapped (empty if /proc is unreadable)."""
    root = os.path.realpath(ext_root) + os.sep
    try:
        with open(f"/proc/{pid}/maps") as f:
            paths = {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}
    except OSError:
        return []
    return sorted(p for p in paths if p.endswith(".so") and os.path.realpath(p).startswith(root))


def undefined_symbols(path: str, dynamic: bool = True) -> list[str] | None:
    """Demangled undefined symbols of one library (its dynamic ones) or, ``dynamic=False``, of an object file or
    archive; None when ``nm`` is missing or fails."""
    nm = shutil.which("nm")
    if nm is None:
        return None
    try:
        out = subprocess.run([nm, *(["-D"] if dynamic else []), "--undefined-only", "--demangle", path],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [line.split(None, 1)[1].split("@")[0].strip() for line in out.splitlines() if len(line.split(None, 1)) == 2]


def violations(paths: list[str], *, backend: str) -> tuple[list[str], bool]:
    """(messages, checked): what the libraries import that a kernel may not; checked is False without nm."""
    out: list[str] = []
    checked = True
    forbidden = (FORBIDDEN_LIBC if backend == "cpu" else FORBIDDEN_LIBC_CUDA) - toolchain_imports()
    for path in paths:
        symbols = undefined_symbols(path)
        if symbols is None:
            checked = False
            continue
        name = os.path.basename(path)
        for s in symbols:
            m = _ATEN.search(s)
            if m and not aten_op_allowed(m.group(1)):
                out.append(f"the built extension {name} calls the PyTorch operator aten.{m.group(1)} "
                           "(ATen compute is not allowed; write it in your kernel)")
            bare = s.split("(")[0]
            if bare in forbidden:
                out.append(f"the built extension {name} imports {bare} (files, memory mapping, signals, processes "
                           "and system calls are not allowed)")
    return sorted(set(out)), checked
