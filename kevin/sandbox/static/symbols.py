"""What a candidate's compiled extensions import: a check of the built library, not of its source text.

The static layer reads C++ source, so a spelling it does not know (a macro call before ``::``, a function
pointer, a new trick) can hide a call from it. The built library cannot hide what it links against: an
ATen operator called from C++ is an undefined symbol ``at::_ops::<op>::call`` (or ``redispatch``), and a
libc function is an undefined symbol of its own name. After the candidate's module has imported, the
parent lists the libraries the candidate process has mapped from the extension cache
(``/proc/<pid>/maps``) and reads their undefined dynamic symbols with ``nm -D``.

Rejected: ATen operators outside the runtime inventory's allow-list (allocation, copies, views); ATen's
per-backend kernels called without the dispatcher (``at::cpu::<op>``, ``at::cuda::<op>``, ...) and its native
implementations (``at::native::``); Python C-API functions outside the allow-list of what pybind11's bindings import
(``PYTHON_ALLOWED``: no ``PyRun_*``, ``PyImport_*``, ``PyEval_GetFrame``, ``PyObject_Call``, ...; the same table for
both backends); and the imports of the forbidden native APIs of ``forbidden.py``, the table the source scan reads
too: files, memory mapping and signals, processes, threads and dynamic loading, sockets, ptrace and limits, CUDA
streams, graphs, host callbacks, contexts and entry points, L2 persistence and device limits, library thread pools,
allocator and profiler hooks (with, per name, where the two checks differ: ``open`` and ``syscall`` stay allowed
on CUDA, c10's stream pool is left to the scan).
Python's C API can be judged only in part: pybind11's own binding code imports a few generic calls in every
extension (``PYTHON_ALLOWED``'s comment says which), so the source scan stays the defence against those.

Known false positive: on the H200 image (Ubuntu GCC 13.3, torch 2.11) an honest CPU extension imports ``open``
and ``syscall`` as well, so the CPU backend rejects honest kernels built there
(``benchmarks/results/sandbox_h200.md``; the source is not found: GCC 12 with torch 2.11's headers imports
neither). The CPU machines this backend is for (GCC 12, torch 2.13) are not affected.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from kevin.sandbox.static import forbidden

_ATEN = re.compile(r"\bat::_ops::(\w+)::(?:call|redispatch)\b")
# ATen's per-backend kernels, called without the dispatcher (``at::cpu::clamp_min`` from
# ``<ATen/ops/clamp_min_cpu_dispatch.h>``), and its native implementations.
_ATEN_BACKEND = re.compile(
    r"^at::(cpu|cuda|meta|mps|xpu|compositeexplicitautograd\w*|compositeimplicitautograd\w*|quantized\w*"
    r"|sparse\w*|mkldnn\w*|nestedtensor\w*)::(\w+)\(")
_ATEN_NATIVE = re.compile(r"^at::native::(\w+)")
# Python's C API: an ALLOW-list. pybind11's binding code and torch's casters import these in every honest build
# (CPU and CUDA link the same pybind11 bindings, the CPU's after a lighter prelude when its kernel is compiled
# apart; a .cu unit that includes <torch/extension.h> imports a subset):
# the exact names below were read with ``nm -D --undefined-only`` from honest load_inline builds (ReLU, Linear +
# ReLU, and one with parallel_for, Vectorized and every common argument type: doubles, ints, bools, lists,
# optionals, strings, scalars, dtypes, devices, tuples and vectors of tensors; torch 2.13, Python 3.11), plus the
# same calls' spellings in other Python versions (3.12's raised-exception API, 3.13's thread-state and critical
# sections). Besides, value conversions and containers of whole families (``PyLong_*``, ``PyTuple_*``, ...),
# exception objects and type objects: an argument type or a Python version changes which of them are imported,
# and none runs code. Everything else Py-prefixed is refused: running source (``PyRun_*``, ``Py_CompileString``,
# ``PyEval_EvalCode``), imports (``PyImport_*``), frames and the interpreter's state (``PyEval_GetFrame``,
# ``PyThreadState_GetFrame``, ``PySys_*``), and generic calls (``PyObject_Call*``, ``PyObject_Vectorcall*``).
# The last line's names are imported by every honest CUDA build on the H200 image (torch 2.11, Python 3.12; its
# pybind11 binds ``__dict__`` and calls through ``PyObject_CallObject``).
# Not proof against everything: pybind11's own error path imports ``PyEval_GetBuiltins``,
# ``PyObject_GetAttrString``, ``PyObject_CallFunctionObjArgs`` and ``PyObject_CallObject``, enough in principle to reach ``__import__``; the
# static layer bans every Python C-API name and ``pybind11::`` object access in the source.
PYTHON_ALLOWED = frozenset("""
PyBaseObject_Type PyByteArray_AsString PyByteArray_Size PyByteArray_Type PyBytes_AsString PyBytes_AsStringAndSize
PyBytes_Size PyCFunction_Type PyCMethod_New PyCapsule_GetContext PyCapsule_GetName PyCapsule_GetPointer
PyCapsule_New PyCapsule_SetContext PyCapsule_SetDestructor PyDict_Contains PyDict_GetItemWithError PyDict_New
PyDict_SetDefault PyDict_Type PyErr_Clear PyErr_Fetch PyErr_Format PyErr_NormalizeException PyErr_Occurred
PyErr_Restore PyErr_SetObject PyErr_SetString PyErr_WarnEx PyErr_WriteUnraisable PyEval_AcquireThread
PyEval_GetBuiltins PyEval_SaveThread PyEval_RestoreThread PyException_SetCause PyException_SetContext
PyException_SetTraceback PyFloat_AsDouble PyFloat_Type PyFrame_GetBack PyFrame_GetCode PyFrame_GetLineNumber
PyFrozenSet_Type PyGILState_Check PyGILState_Ensure PyGILState_GetThisThreadState PyGILState_Release PyGen_Type
PyIndex_Check PyInstanceMethod_New PyInstanceMethod_Type PyInterpreterState_GetDict PyInterpreterState_Get
PyIter_Next PyList_New PyList_Size PyLong_AsLong PyLong_FromSsize_t PyMem_Calloc PyMem_Free PyMem_Malloc
PyModuleDef_Init PyModule_AddObject PyModule_AddObjectRef PyModule_NewObject PyModule_Type PyNumber_Add
PyNumber_Check PyNumber_Float PyNumber_Long PyObject_CallFunctionObjArgs PyObject_ClearWeakRefs PyObject_Free
PyObject_GC_UnTrack PyObject_GetAttrString PyObject_GetItem PyObject_GetIter PyObject_HasAttrString
PyObject_IsInstance PyObject_Repr PyObject_SetAttrString PyObject_SetItem PyObject_Str PyProperty_Type
PySequence_Check PySequence_Size PySequence_Tuple PySet_Type PyThreadState_Clear PyThreadState_DeleteCurrent
PyThreadState_New PyThreadState_Get PyThreadState_GetUnchecked PyThread_tss_create PyThread_tss_delete
PyThread_tss_get PyThread_tss_set PyTuple_New PyTuple_SetItem PyType_FromSpec PyType_IsSubtype PyType_Ready
PyType_Type PyType_GetFlags PyUnicode_AsEncodedString PyUnicode_AsUTF8AndSize PyUnicode_AsUTF8String
PyUnicode_Compare PyUnicode_DecodeUTF8 PyUnicode_FromString PyUnicode_InternFromString PyWeakref_NewRef
Py_GetVersion Py_IsFinalizing Py_IncRef Py_DecRef PyErr_GetRaisedException PyErr_SetRaisedException
PyMutex_Lock PyMutex_Unlock PyCriticalSection_Begin PyCriticalSection_End PyCriticalSection2_Begin
PyCriticalSection2_End _PyObject_GetDictPtr _PyObject_New _PyThreadState_UncheckedGet _PyType_Lookup _Py_Dealloc
_Py_IncRef _Py_DecRef _Py_IsFinalizing _Py_FalseStruct _Py_NoneStruct _Py_NotImplementedStruct _Py_TrueStruct
_Py_EllipsisObject
PyDict_Copy PyDict_DelItemString PyDict_Next PyDict_Size PyObject_CallObject PyObject_GenericGetDict
PyObject_GenericSetDict
""".split())
PYTHON_ALLOWED_FAMILIES = re.compile(
    r"^(?:Py(?:Long|Float|Bool|Complex|Bytes|ByteArray|Unicode|Tuple|List|Set|FrozenSet|Slice|Index|Number|Sequence"
    r"|Iter|Capsule|Mem|Exc|Exception|Weakref|GILState|Thread_tss|MemoryView|Buffer)_\w+|Py\w+_Type)$")
_PYTHON = re.compile(r"^_?Py")


def python_api_allowed(name: str) -> bool:
    """Whether an imported Python C-API symbol is one an honest pybind11/torch extension imports.

    >>> python_api_allowed("PyTuple_New"), python_api_allowed("PyLong_AsLongLong"), python_api_allowed("PyRun_SimpleStringFlags")
    (True, True, False)
    >>> python_api_allowed("PyImport_ImportModule"), python_api_allowed("PyEval_GetFrame"), python_api_allowed("PyObject_Call")
    (False, False, False)
    """
    return name in PYTHON_ALLOWED or bool(PYTHON_ALLOWED_FAMILIES.match(name))


_ALLOWED_STRUCTS: frozenset[str] | None = None


def aten_op_allowed(struct: str) -> bool:
    """Whether ``at::_ops::<struct>`` is an allowed op: struct names are ``op`` or ``op_<overload>``, matched
    exactly against the dispatcher's registered (op, overload) pairs of the allow-list (a prefix match let
    ``unfold_backward`` through as if it were ``unfold``).

    >>> aten_op_allowed("empty_memory_format"), aten_op_allowed("copy_"), aten_op_allowed("addmm")
    (True, True, False)
    >>> aten_op_allowed("relu_"), aten_op_allowed("unfold"), aten_op_allowed("unfold_backward")
    (False, True, False)
    """
    global _ALLOWED_STRUCTS
    if _ALLOWED_STRUCTS is None:
        import torch

        from kevin.sandbox.worker.inventory import ALLOWED  # imports torch: only when there is a symbol to judge

        structs = set()
        for full in torch._C._dispatch_get_all_op_names():
            ns, _, rest = full.partition("::")
            op, _, overload = rest.partition(".")
            if ns == "aten" and op in ALLOWED and overload != "out":
                structs.add(f"{op}_{overload}" if overload else op)
        _ALLOWED_STRUCTS = frozenset(structs)
    return struct in _ALLOWED_STRUCTS


_OP_NAMES: frozenset[str] | None = None


def is_aten_op(name: str) -> bool:
    """Whether ``name`` (of a per-backend ATen function such as ``at::cpu::add_out``) names an ATen operator:
    its base name, or with ``_out``/``_outf``/``_symint`` dropped, is registered as ``aten::<name>``.

    >>> is_aten_op("clamp_min"), is_aten_op("addmm_out"), is_aten_op("getCurrentDeviceProperties")
    (True, True, False)
    """
    global _OP_NAMES
    if _OP_NAMES is None:
        import torch

        _OP_NAMES = frozenset(full.partition("::")[2].partition(".")[0] for full in torch._C._dispatch_get_all_op_names()
                              if full.startswith("aten::"))
    base = re.sub(r"(_symint)?(_outf?)?$", "", name)
    return name in _OP_NAMES or base in _OP_NAMES


def _allocation(name: str) -> bool:
    """Whether a per-backend function is one of the runtime inventory's allowed ops (``at::cuda::empty``...)."""
    from kevin.sandbox.worker.inventory import ALLOWED

    return re.sub(r"(_symint)?(_outf?)?$", "", name) in ALLOWED


def mapped_extensions(pid: int, ext_root: str) -> list[str]:
    """Shared libraries under ``ext_root`` that process ``pid`` has mapped (empty if /proc is unreadable)."""
    root = os.path.realpath(ext_root) + os.sep
    try:
        with open(f"/proc/{pid}/maps") as f:
            paths = {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}
    except OSError:
        return []
    return sorted(p for p in paths if p.endswith(".so") and os.path.realpath(p).startswith(root))


def undefined_symbols(path: str) -> list[str] | None:
    """Demangled undefined dynamic symbols of one library (None when ``nm`` is missing or fails)."""
    nm = shutil.which("nm")
    if nm is None:
        return None
    try:
        out = subprocess.run([nm, "-D", "--undefined-only", "--demangle", path], capture_output=True, text=True,
                             timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [line.split(None, 1)[1].split("@")[0].strip() for line in out.splitlines() if len(line.split(None, 1)) == 2]


# What a C++ class's import may start with besides its name.
_CLASS_DATA = r"(?:vtable for |typeinfo for |typeinfo name for |VTT for |construction vtable for )?"


def _family_pattern(family: forbidden.Family, backend: str) -> re.Pattern | None:
    """The imports of ``family`` the symbol check rejects on ``backend``: anchored at the symbol's start (after a
    vtable's or typeinfo's words) and ending at a word's end, or anywhere in it for a family judged ``anywhere``."""
    alternatives = []
    for api in family.apis:
        if backend == "cuda" and not api.cuda:
            continue
        allowed = "".join(f"(?!{forbidden.pattern(a)})" for a in api.import_allows)
        alternatives += [allowed + forbidden.pattern(imp) for imp in api.symbols]
    if not alternatives:
        return None
    body = "|".join(alternatives)
    return re.compile(f"(?:{body})" if family.anywhere else rf"^{_CLASS_DATA}(?:{body})(?!\w)")


FORBIDDEN = {backend: [(f, p) for f in forbidden.FAMILIES if (p := _family_pattern(f, backend)) is not None]
             for backend in ("cpu", "cuda")}
_CUDA_RUNTIME, _CUDA_DRIVER = re.compile(r"^cuda[A-Z]"), re.compile(r"^cu[A-Z]")


def forbidden_imports(symbol: str, backend: str) -> list[str]:
    """The reasons ``symbol`` (one demangled undefined symbol) may not be imported, one per family it belongs to.

    >>> forbidden_imports("mmap", "cuda")
    [' (memory mapping, page protection, signal handlers and foreign memory are not allowed; allocate outputs with torch::empty)']
    >>> forbidden_imports("open", "cuda"), forbidden_imports("cudaGraphicsMapResources", "cuda")
    ([], [])
    >>> forbidden_imports("cudaStreamCreateWithFlags", "cuda")[0].split(" (")[0]
    ' from the CUDA runtime'
    """
    out = []
    for family, rx in FORBIDDEN[backend]:
        if rx.search(symbol):
            source = (" from the CUDA runtime" if _CUDA_RUNTIME.match(symbol) else
                      " from the CUDA driver" if _CUDA_DRIVER.match(symbol) else "")
            out.append(f"{source} ({family.reason})")
    return out


def violations(paths: list[str], *, backend: str) -> tuple[list[str], bool]:
    """(messages, checked): what the libraries import that a kernel may not; checked is False without nm."""
    out: list[str] = []
    checked = True
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
            m = _ATEN_BACKEND.match(s)
            if (m and is_aten_op(m.group(2)) and not _allocation(m.group(2))) or _ATEN_NATIVE.match(s):
                op = m.group(2) if m else _ATEN_NATIVE.match(s).group(1)
                out.append(f"the built extension {name} calls ATen's kernel {s.split('(')[0]} (aten.{op}) "
                           "without the dispatcher (ATen compute is not allowed; write it in your kernel)")
            bare = s.split("(")[0]
            if _PYTHON.match(bare) and not python_api_allowed(bare):
                out.append(f"the built extension {name} imports {bare} from Python's C API (only what pybind11's "
                           "bindings use is allowed: no running code, imports, frames or interpreter state)")
            out += [f"the built extension {name} imports {bare}{why}" for why in forbidden_imports(s, backend)]
    return sorted(set(out)), checked
