"""The table of native APIs a candidate's C++/CUDA may not use: one table for both static checks.

Each family is a group of APIs with one reason, which both checks print when they reject one of its names:

- the source scan (`source.py`) looks for each name in the C++/CUDA text, in the form its `Api.scan` says;
- the symbol check (`symbols.py`) looks for it among the built extension's undefined dynamic symbols
  (demangled), as each of its `Api.imports` spells it.

A name is judged by both checks unless its entry says otherwise, and then its ``note`` says why: some names only
the scan can see (macros, enum values, struct members, types of C++ classes whose imports vary with the standard
library), some only the symbol check (what a ``#pragma`` compiles to, or an ordinary word such as ``clone`` that
the text cannot tell from a tensor method), and a few honest builds import (``open``, ``syscall`` on CUDA).

Spellings, in names and imports alike: ``*`` stands for any identifier characters (``cudaStreamCreate*`` is also
``cudaStreamCreateWithFlags`` and the per-thread ``_ptsz`` variants), ``**::`` for any nested namespaces, and
``::`` for a scope (the scan allows spaces around it). The threat model these families serve is
``docs/threat-model.md`` (attacks D1, D2, D7, D8, E4, E11 and "Same-user file access").

>>> [f.key for f in FAMILIES]
['files', 'memory', 'processes', 'sockets', 'cuda_streams', 'cuda_limits', 'pools', 'hooks']
>>> pattern("cudaStreamCreate*"), pattern("c10::**::*ThreadPool*")
('cudaStreamCreate\\\\w*', 'c10::(?:\\\\w+::)*\\\\w*ThreadPool\\\\w*')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# How the source scan finds a name (`Api.scan`).
WORD = "word"  # anywhere in the code, as a whole word
CALL = "call"  # an ordinary word: only called (``open(``) or taken by address (``&open``)
QUALIFIED = "qualified"  # an ordinary word: only under PyTorch's namespaces (``at::launch``, ``torch::launch``)
PRAGMA = "pragma"  # an OpenMP clause: in ``#pragma omp ...`` or ``_Pragma("omp ...")``
CONSTRUCT = "construct"  # (unqualified form only) declared or constructed: ``thread t(...)``, ``thread{...}``


@dataclass(frozen=True)
class Api:
    """One forbidden name, and how each check finds it."""

    name: str
    scan: str | None = WORD  # None: the source scan does not look for it (the note says why)
    symbol: bool = True  # False: the symbol check does not judge it (the note says why)
    imports: tuple[str, ...] = ()  # how a built library imports it (demangled); empty: as ``name``
    cuda: bool = True  # False: the symbol check allows it on the CUDA backend (honest CUDA builds import it)
    scan_allows: tuple[str, ...] = ()  # names the scan's pattern covers that stay allowed
    import_allows: tuple[str, ...] = ()  # imports the symbol check's pattern covers that stay allowed
    unqualified: str | None = None  # a std:: name: how the scan finds it bare, after ``using namespace std``
    note: str = ""

    @property
    def symbols(self) -> tuple[str, ...]:
        """The imports the symbol check rejects (empty when it does not judge this name)."""
        return (self.imports or (self.name,)) if self.symbol else ()


@dataclass(frozen=True)
class Family:
    """APIs rejected for one reason, which both checks print."""

    key: str
    title: str
    reason: str  # one line: why, in both checks' messages
    apis: tuple[Api, ...]
    headers: tuple[str, ...] = ()  # ``#include <...>`` the scan refuses for this family
    in_strings: bool = False  # the scan reads string literals too (``_Pragma("omp task")``)
    anywhere: bool = False  # the symbol check finds the imports anywhere in a symbol, arguments included


def pattern(name: str, scope: str = "::") -> str:
    """The regular expression of a name or import spelled with ``*``, ``**::`` and ``::`` (see above)."""
    out = []
    for part in re.split(r"(\*\*::|\*|::)", name):
        if part == "**::":
            out.append(rf"(?:\w+{scope})*")
        elif part == "*":
            out.append(r"\w*")
        elif part == "::":
            out.append(scope)
        elif part:
            out.append(re.escape(part))
    return "".join(out)


_HONEST_CUDA = ("imported by every honest CUDA extension built on the H200 image (static code linked into the .so; "
                "benchmarks/results/sandbox_h200_cuda_symbols.txt), so the CUDA backend cannot forbid it")
_CPP_LIBRARY = ("scan only: a C++ library class, whose imports depend on how the standard library instantiates its "
                "templates")
_NOT_A_FUNCTION = "scan only: {} (nothing is imported)"
_CPP_NOT_READ = ("scan only: the C++ imports of an honest CUDA build were not recorded "
                 "(benchmarks/results/sandbox_h200_cuda_symbols.txt lists C names), so the symbol check does not "
                 "judge this name")
_SYSCALL_NUMBER = _NOT_A_FUNCTION.format("a system-call number, a macro")

FILES = Family(
    "files", "files",
    "file access is not allowed; use only your inputs",
    # The inputs' files, the build cache and the harness's source are on disk, readable by the candidate's user.
    in_strings=True,
    headers=("fstream", "filesystem", "fcntl.h", "dirent.h", "unistd.h"),
    apis=(
        Api("fopen"), Api("fopen64"), Api("freopen"), Api("fdopen"),
        Api("open", scan=CALL, cuda=False, note=_HONEST_CUDA),
        Api("open64"), Api("openat"), Api("openat64"), Api("creat"), Api("creat64"),
        Api("unlink"), Api("unlinkat"), Api("rename", scan=CALL), Api("renameat"), Api("renameat2"),
        Api("opendir"), Api("readlink"), Api("readlinkat"),
        Api("ifstream", symbol=False, note=_CPP_LIBRARY), Api("ofstream", symbol=False, note=_CPP_LIBRARY),
        Api("fstream", symbol=False, note=_CPP_LIBRARY), Api("std::filesystem", symbol=False, note=_CPP_LIBRARY),
    ))

MEMORY = Family(
    "memory", "memory and signals",
    "memory mapping, page protection, signal handlers and foreign memory are not allowed; allocate outputs with "
    "torch::empty",
    # An output in PROT_NONE pages whose SIGSEGV handler computes it when the harness first reads it; outputs
    # wrapped around memory PyTorch did not allocate; raw system calls reach all of the above.
    headers=("sys/mman.h", "signal.h", "csignal"),
    apis=(
        Api("mmap"), Api("mmap64"), Api("munmap"), Api("mprotect"), Api("mremap"), Api("madvise"), Api("userfaultfd"),
        Api("sigaction"), Api("signal", scan=CALL), Api("bsd_signal"), Api("sigset"),
        Api("sigsetjmp", imports=("__sigsetjmp",), note="a macro: glibc's function is __sigsetjmp"),
        Api("siglongjmp"), Api("shm_open"), Api("memfd_create"),
        Api("syscall", cuda=False, note=_HONEST_CUDA),
        Api("SYS_*", symbol=False, note=_SYSCALL_NUMBER), Api("__NR_*", symbol=False, note=_SYSCALL_NUMBER),
        Api("from_blob", symbol=False, note="scan only: inline in PyTorch's headers (nothing of its name is imported)"),
    ))

PROCESSES = Family(
    "processes", "processes, threads and dynamic loading",
    "threads, processes and dynamic loading are not allowed",
    # A thread keeps computing after the timed call returned; a process or a loaded library runs code no check read.
    apis=(
        Api("std::thread", unqualified=CONSTRUCT, imports=("std::thread::_M_start_thread*", "std::thread::detach*"),
            scan_allows=("std::thread::hardware_concurrency", "std::thread::id"),
            note="libstdc++ starts the thread, so pthread_create is not imported; hardware_concurrency() and "
                 "std::thread::id are queries"),
        Api("std::jthread", unqualified=CONSTRUCT, imports=("std::jthread*",),
            scan_allows=("std::jthread::hardware_concurrency", "std::jthread::id")),
        Api("std::async", unqualified=CALL, imports=("std::__future_base*",)),
        Api("std::packaged_task", unqualified=WORD, imports=("std::__future_base*",)),
        Api("pthread_create"), Api("thrd_create"),
        Api("fork", scan=CALL), Api("vfork"),
        Api("clone", scan=None, note="symbols only: the text cannot tell it from a tensor's x.clone()"),
        Api("execve"), Api("execv"), Api("execvp"), Api("execvpe"), Api("execl"), Api("execlp"), Api("execle"),
        Api("system", scan=CALL), Api("popen"), Api("posix_spawn"), Api("posix_spawnp"),
        Api("dlopen"), Api("dlmopen"), Api("dlsym"), Api("dlvsym"),
    ))

SOCKETS = Family(
    "sockets", "sockets, descriptors, ptrace and limits",
    "sockets, duplicating file descriptors, tracing other processes and changing process limits, groups or "
    "priorities are not allowed",
    # The network, the memory of other processes (the parent's golden outputs), the limits the sandbox set, and the
    # worker's own descriptors: a copy of the mark socket kept with dup while dup2 points the harness's descriptor
    # elsewhere would let a kernel send the wall check's marks at times of its choosing. A new process group or
    # session would leave the group that timings stop and kills reach; a lower nice value or another scheduling
    # policy would time the kernel ahead of the compilers the reference was timed beside. Honest builds import none
    # of these (benchmarks/results/sandbox_h200_cuda_symbols.txt: of libc's, only ioctl and close).
    apis=(
        Api("socket", scan=CALL), Api("connect", scan=CALL), Api("ptrace"), Api("process_vm_readv"),
        Api("process_vm_writev"), Api("prctl"), Api("setrlimit"),
        Api("setsid", scan=CALL), Api("setpgid", scan=CALL), Api("setpgrp", scan=CALL),
        Api("setpriority", scan=CALL), Api("nice", scan=CALL), Api("sched_setscheduler"), Api("sched_setparam"),
        Api("sched_setattr"), Api("pthread_setschedparam"), Api("pthread_setschedprio"),
        Api("dup", scan=CALL), Api("dup2"), Api("dup3"), Api("fcntl"), Api("socketpair"), Api("sendmsg"),
        Api("recvmsg"), Api("sendto"), Api("setsockopt"),
        Api("send", scan=None, note="symbols only: the text cannot tell it from a method or function named send"),
    ))

# The CUDA runtime's (``cuda*``) and the driver's (``cu*``) calls. By prefix, so that the per-thread (``_ptsz``) and
# versioned (``_v2``) names are caught. libcuda and libcudart.so.13 are linked dynamically, so each call is an
# import. Of the runtime's names, honest builds import only the ``__cuda*`` registration and launch functions and
# ``cudaGetLastError`` (benchmarks/results/sandbox_h200_cuda_symbols.txt); queries such as ``cudaGetDevice`` and
# ``cudaFuncSetAttribute`` are no family's. The GPU tests' attack library imports ``cudaStreamCreateWithFlags`` and
# the L2 calls, which the symbol check rejects; its dynamic-gate tests run with the check off
# (``kernel_inventory=False``). Linked statically (``-cudart static``), the runtime's calls are defined inside the
# library, not imported; such a library is still rejected, for the libc functions the static runtime imports
# (``dlopen``, ``pthread_create``).
_GRAPHICS = "symbols: graphics interop ({}) is no graph; the scan refuses it all the same"
CUDA_STREAMS = Family(
    "cuda_streams", "CUDA streams, graphs, host callbacks, contexts and entry points",
    "extra streams, graphs, host callbacks, contexts and timing tricks are not allowed; launch on "
    "at::cuda::getCurrentCUDAStream()",
    # Work on another stream, in a graph or in a host callback outlives the timed call's stream; an entry-point
    # lookup reaches any of them without naming it.
    apis=(
        Api("cudaStreamCreate*"), Api("cuStreamCreate*"),
        Api("cudaStreamBeginCapture*"), Api("cuStreamBeginCapture*"),
        Api("cudaGraph*", import_allows=("cudaGraphics*",), note=_GRAPHICS.format("cudaGraphics*")),
        Api("cuGraph*", import_allows=("cuGraphics*",), note=_GRAPHICS.format("cuGraphics*")),
        Api("cudaLaunchHostFunc*"), Api("cuLaunchHostFunc*"),
        Api("cudaStreamAddCallback*"), Api("cuStreamAddCallback*"),
        Api("cudaExecutionCtx*"), Api("cuCtxCreate*"), Api("cuGreenCtx*"),
        Api("cudaGetDriverEntryPoint*"), Api("cuGetProcAddress*"),
        Api("cudaEventDisableTiming", symbol=False, note=_NOT_A_FUNCTION.format("an event flag")),
        Api("getStreamFromPool", symbol=False,
            note="scan only: every honest CUDAGuard or OptionalCUDAGuard imports c10::cuda::getStreamFromPool "
                 "through CUDAGuardImpl's inline virtual functions"),
        Api("getStreamFromExternal", symbol=False,
            note="scan only: it wraps a stream made elsewhere, and making one is what the symbol check judges"),
    ))

_CONSTANT = "scan only: {} of the runtime's headers (nothing is imported)"
CUDA_LIMITS = Family(
    "cuda_limits", "L2 persistence and device limits",
    "L2 persistence and device limits, stack and heap sizes included, are not allowed; leave the cache and the "
    "limits alone",
    # A persisting L2 carve-out or access-policy window keeps the kernel's data cached across the harness's flush.
    apis=(
        Api("cudaStreamSetAttribute*"), Api("cuStreamSetAttribute*"),
        Api("cudaCtxResetPersistingL2Cache*"), Api("cuCtxResetPersistingL2Cache*"),
        Api("cudaDeviceSetLimit*"), Api("cuCtxSetLimit*"),
        Api("cudaStreamAttributeAccessPolicyWindow", symbol=False, note=_CONSTANT.format("an enum value")),
        Api("cudaLimitPersistingL2CacheSize", symbol=False, note=_CONSTANT.format("an enum value")),
        Api("cudaAccessProperty*", symbol=False, note=_CONSTANT.format("an enum")),
        Api("cudaAccessPolicyWindow", symbol=False, note=_CONSTANT.format("a struct")),
        Api("accessPolicyWindow", symbol=False, note=_CONSTANT.format("a struct member")),
    ))

_ATEN_NS = ("at::", "at::internal::")
POOLS = Family(
    "pools", "library thread pools",
    "background work in thread pools or OpenMP tasks can outlive the call: not allowed; at::parallel_for and "
    "`#pragma omp parallel for` are",
    # ATen's and c10's pools run work after the call that queued it has returned (timed as nothing, or finishing
    # once the harness has read the output), and so do OpenMP tasks and target regions; resizing a pool changes the
    # harness's thread count. Synchronous parallelism (at::parallel_for, #pragma omp parallel for) ends before the
    # call returns, as PyTorch's own kernels do, imports none of these, and stays allowed; so do thread-count
    # queries (at::get_num_threads, omp_get_max_threads).
    in_strings=True,
    apis=(
        Api("at::launch", scan=QUALIFIED, imports=tuple(ns + "launch" for ns in _ATEN_NS),
            note="scan: only under PyTorch's namespaces (launch is an ordinary word)"),
        Api("intraop_launch*", imports=tuple(ns + "intraop_launch*" for ns in _ATEN_NS)),
        Api("launch_no_thread_state", imports=tuple(ns + "launch_no_thread_state" for ns in _ATEN_NS)),
        Api("*ThreadPool*", imports=("c10::**::*ThreadPool*", "at::PTThreadPool*")),
        Api("set_num_threads", imports=tuple(ns + "set_num_threads" for ns in _ATEN_NS)),
        Api("set_num_interop_threads", imports=tuple(ns + "set_num_interop_threads" for ns in _ATEN_NS)),
        Api("*get_*thread_pool*", imports=tuple(ns + "*get_*pool*" for ns in _ATEN_NS),
            note="symbols: any pool getter of ATen's; the scan: thread-pool getters only (get_pool is a common name)"),
        Api("_get_intraop_pool", imports=tuple(ns + "_get_intraop_pool" for ns in _ATEN_NS)),
        Api("omp_set_*"),
        Api("task*", scan=PRAGMA, imports=("GOMP_task*", "__kmpc_omp_task*", "__kmpc_taskloop*"),
            note="symbols: the runtime calls of libgomp and LLVM's OpenMP that task pragmas compile to"),
        Api("target", scan=PRAGMA, imports=("GOMP_target*", "__kmpc_omp_target*"),
            note="symbols: the runtime calls that target pragmas compile to"),
        Api("nowait", scan=PRAGMA, symbol=False,
            note="scan only: a clause, compiled to no call of its own; refused even inside a region that joins "
                 "(the scan does not prove the join)"),
    ))

HOOKS = Family(
    "hooks", "allocator, profiler and operator hooks",
    "allocator hooks, profiler callbacks, debug info and operator registration are not allowed: they run inside "
    "the sandbox's own work",
    # Callbacks PyTorch runs inside the harness's own work: an allocator trace tracker or out-of-memory observer
    # (called on every allocation and free, the harness's included: a kernel launched from one runs after the timed
    # window and can fingerprint the harness's buffers), memory history, profiler callbacks (on every operator),
    # thread-local debug info (memory reporting), allocator replacement, and operators registered over ATen's.
    anywhere=True,
    apis=(
        Api("*CachingAllocator*", imports=tuple("*CachingAllocator*::" + x for x in (
            "attach*", "recordHistory", "setAllocatorSettings", "*Tracker*", "*tracker*")),
            note="symbols: only the calls that attach a hook or change the allocator's settings"),
        Api("recordHistory"), Api("*TraceTracker*"), Api("*MemoryObserver*"),
        Api("ThreadLocalDebugInfo"), Api("DebugInfoGuard"), Api("MemoryReportingInfoBase"), Api("reportMemoryUsage"),
        Api("addGlobalCallback"), Api("addThreadLocalCallback"), Api("SetAllocator"), Api("SetCPUAllocator"),
        Api("GetAllocator", symbol=False, note=_CPP_NOT_READ),
        Api("CUDAAllocator", symbol=False, note=_CPP_NOT_READ),
        Api("RecordFunction", symbol=False, note=_CPP_NOT_READ),
        Api("c10::Storage", symbol=False, note=_CPP_NOT_READ),
        Api("StorageImpl", symbol=False, note=_CPP_NOT_READ),
        Api("DataPtr", symbol=False, note=_CPP_NOT_READ),
        Api("set_data_ptr*", symbol=False, note=_CPP_NOT_READ),
        Api("TORCH_LIBRARY*", symbol=False, note=_NOT_A_FUNCTION.format("the registration macros")),
    ))

FAMILIES = (FILES, MEMORY, PROCESSES, SOCKETS, CUDA_STREAMS, CUDA_LIMITS, POOLS, HOOKS)
