"""`check_format`: the static layer of the sandbox (format rules and reward-hacking patterns).

Advisory: it reads the candidate's source and never runs it. It explains rejections cheaply and is what the
paper's format reward uses (Kevin §3.1), but the verdict rests on the dynamic gate. The Python rules work on the
syntax tree (words in strings and comments never count); the C++/CUDA rules on the ``load_inline`` sources after
line splicing, comment stripping and macro expansion. The attacks the rules serve, and what no static rule can
stop, are in ``docs/threat-model.md``; the forbidden native APIs, shared with the symbol check, are the table of
``forbidden.py``.

>>> check_format("import torch\\nclass ModelNew(torch.nn.Module):\\n    def forward(self, x):\\n        return x @ x\\n")[0]
'forward uses the operator `x @ x` on tensors (line 4): that is PyTorch compute; do it in your kernel'
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from kevin.sandbox._resolve import parse_python
from kevin.sandbox.config import RULES
from kevin.sandbox.static import forbidden

BACKENDS = ("cuda", "cpu")
_MAX_CHARS = 500_000

# ---------------------------------------------------------------------------------------------------
# Python name tables

_ALLOWED_NN = {
    "Module", "Parameter", "Buffer", "ParameterList", "ParameterDict", "ModuleList", "ModuleDict",
    "Sequential", "parameter.Parameter", "parameter.Buffer", "Identity",
}
# torch functions allowed on the forward path: allocation, shape, device, dtype and grad-mode helpers.
_ALLOWED_TORCH_CALLS = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "tensor", "as_tensor", "arange", "Size", "device", "dtype", "finfo", "iinfo",
    "is_tensor", "numel", "broadcast_shapes", "no_grad", "inference_mode", "enable_grad",
    "is_grad_enabled", "get_default_dtype", "is_floating_point",
    "cuda.is_available", "cuda.current_device", "cuda.current_stream", "cuda.default_stream",
    "cuda.synchronize", "cuda.device_count", "cuda.get_device_properties",
    "cuda.get_device_capability", "cuda.get_device_name", "cuda.set_device", "cuda.device",
    "utils.cpp_extension.load_inline",
}
_SHAPE_METHODS = {
    "size", "dim", "ndimension", "numel", "nelement", "stride", "data_ptr", "item", "is_contiguous",
    "element_size", "tolist", "get_device", "storage_offset", "is_floating_point", "is_complex",
    "has_names", "untyped_storage", "__len__", "sizes", "strides",
}
_TENSOR_ATTRS = {"T", "mT", "H", "mH", "data", "grad", "real", "imag", "weight", "bias"}
# Tensor methods that compute (a denylist: methods of user objects must not trip it).
_COMPUTE_METHODS = set("""
abs abs_ absolute acos acosh add add_ addbmm addcdiv addcmul addmm addmm_ addmv addr all amax amin
aminmax angle any argmax argmin argsort asin asinh atan atan2 atanh baddbmm bernoulli bitwise_and
bitwise_not bitwise_or bitwise_xor bmm ceil ceil_ cholesky clamp clamp_ clamp_max clamp_min clip
clip_ conv1d conv2d conv3d cos cos_ cosh count_nonzero cross cummax cummin cumprod cumsum deg2rad
det diag diag_embed diagonal diff digamma dist div div_ divide dot eig einsum eq erf erf_ erfc
erfinv exp exp_ exp2 expm1 floor floor_ floor_divide fmax fmin fmod frac gather gcd ge gelu ger
greater gt hardtanh heaviside histc hypot i0 index_add index_add_ index_copy index_fill index_put
index_put_ index_select inner inverse isclose isfinite isinf isnan kron kthvalue lcm ldexp le lerp
lerp_ less lgamma log log10 log1p log2 log_ log_softmax logaddexp logcumsumexp logdet logical_and
logical_not logical_or logical_xor logit logsumexp lt lu masked_fill masked_fill_ masked_scatter
masked_select matmul matrix_exp matrix_power max maximum mean median min minimum mm mode msort mul
mul_ multinomial multiply mv mvlgamma nan_to_num nanmean nanmedian nanquantile nansum ne neg neg_
negative nonzero norm normal_ not_equal orgqr outer pinverse polygamma pow pow_ prod qr quantile
rad2deg reciprocal reciprocal_ relu relu_ remainder renorm repeat_interleave roll rot90 round
round_ rsqrt rsqrt_ scatter scatter_ scatter_add scatter_add_ scatter_reduce searchsorted sgn
sigmoid sigmoid_ sign signbit sin sin_ sinc sinh slogdet softmax sort sqrt sqrt_ square square_ std
sub sub_ subtract sum sum_to_size svd tan tanh tanh_ tensordot topk trace trapz triangular_solve
tril tril_ triu triu_ true_divide trunc unique var vdot where xlogy
""".split())
_PRECISION_METHODS = {"half", "bfloat16"}
_PRECISION_TORCH = {"float16", "half", "bfloat16", "HalfTensor", "BFloat16Tensor", "autocast",
                    "cuda.amp", "amp", "cuda.HalfTensor", "cpu.amp", "float8_e4m3fn", "float8_e5m2"}
_NUMERICS_CALLS = {"set_float32_matmul_precision", "set_default_dtype", "set_default_tensor_type",
                   "set_flush_denormal", "use_deterministic_algorithms"}
_STREAM_TORCH = {"cuda.Stream", "cuda.stream", "cuda.ExternalStream", "cuda.set_stream", "cuda.streams",
                 "cuda.StreamContext", "Stream", "cuda.CUDAGraph", "cuda.graph", "cuda.graphs",
                 "cuda.make_graphed_callables", "cuda.Event", "Event", "cuda.Event.elapsed_time"}
_STREAM_METHODS = {"wait_stream", "record_stream", "wait_event", "elapsed_time"}
_HOOK_METHODS = {"register_forward_hook", "register_forward_pre_hook", "register_module_forward_hook",
                 "register_module_forward_pre_hook", "__torch_function__"}
_COMPILER_TORCH = {"compile", "jit", "_dynamo", "_inductor", "fx", "export"}
_BANNED_MODULES = {
    **dict.fromkeys(["threading", "_thread", "multiprocessing", "concurrent", "asyncio"],
                    "threads and processes are not allowed; do all work in forward on the caller's stream"),
    **dict.fromkeys(["subprocess", "pty", "signal", "atexit"],
                    "processes and signal handlers are not allowed"),
    **dict.fromkeys(["time", "timeit", "sched"], "timers are not allowed; the sandbox times your kernel"),
    **dict.fromkeys(["inspect", "gc", "traceback"],
                    "frame and object introspection is not allowed; use only your inputs"),
    **dict.fromkeys(["ctypes", "cffi"], "raw native calls are not allowed; go through load_inline"),
    **dict.fromkeys(["importlib", "builtins", "runpy"], "dynamic imports are not allowed"),
    **dict.fromkeys(["base64", "binascii", "zlib", "bz2", "lzma", "gzip", "marshal", "pickle", "dill",
                     "codecs"], "encoded payloads are not allowed; write plain source"),
    **dict.fromkeys(["socket", "urllib", "http", "requests", "pip", "ensurepip"],
                    "network access and package installs are not allowed"),
    **dict.fromkeys(["io", "pathlib", "shutil", "tempfile", "glob", "fnmatch", "mmap", "fcntl", "safetensors",
                     "h5py", "sqlite3", "dbm", "shelve"], "file access is not allowed; use only your inputs"),
    **dict.fromkeys(["triton", "cupy", "numba", "jax", "tvm"],
                    "other kernel frameworks are not allowed; write CUDA/C++ for load_inline"),
    **dict.fromkeys(["numpy", "scipy", "tensorflow", "torch_xla"],
                    "other array libraries are not allowed; compute in your kernel"),
    "kevin": "the sandbox's own code is not yours to import (it runs beside your kernel and reports on it)",
}
_BANNED_CALLS = {
    "exec": "dynamic code execution", "eval": "dynamic code execution", "compile": "dynamic code execution",
    "__import__": "dynamic import", "globals": "namespace introspection", "locals": "namespace introspection",
    "vars": "namespace introspection", "breakpoint": "debugger hooks", "open": "file access",
    "os.open": "file access", "os.read": "file access", "os.write": "file access", "os.listdir": "file access",
    "os.scandir": "file access", "os.walk": "file access", "os.remove": "file access", "os.unlink": "file access",
    "os.rename": "file access", "os.replace": "file access", "os.mkdir": "file access", "os.makedirs": "file access",
    "os.chdir": "file access", "os.getcwd": "file access", "os.stat": "file access", "os.path.exists": "file access",
    "os.path.isfile": "file access", "os.path.getsize": "file access", "torch.load": "file access",
    "torch.save": "file access", "numpy.load": "file access", "numpy.save": "file access",
    "numpy.fromfile": "file access", "numpy.memmap": "file access", "torch.from_file": "file access",
    "torch.from_numpy": "foreign memory (allocate outputs with torch.empty)",
    "torch.from_dlpack": "foreign memory (allocate outputs with torch.empty)",
    "torch.utils.dlpack": "handing tensors to other libraries",
    "operator.attrgetter": "reflective access", "operator.methodcaller": "reflective access",
    "sys.modules": "sys.modules access", "sys._getframe": "frame walking",
    "sys.settrace": "tracing hooks", "sys.setprofile": "tracing hooks", "sys.exit": "early exit",
    "sys.stdout": "output redirection", "sys.addaudithook": "audit hooks",
    "os._exit": "early exit", "os.fork": "process creation", "os.forkpty": "process creation",
    "os.system": "process creation", "os.popen": "process creation", "os.kill": "signals",
    "os.posix_spawn": "process creation", "os.posix_spawnp": "process creation", "os.fdopen": "file access",
    "os.truncate": "file access", "os.symlink": "file access", "os.link": "file access", "os.rmdir": "file access",
    "os.removedirs": "file access", "os.chmod": "file access", "os.execv": "process creation",
    "os.execve": "process creation", "os.execvp": "process creation", "os.spawnv": "process creation",
    "contextlib.suppress": "swallowing exceptions (a fallback)",
    "torch.utils.cpp_extension.load": "loading sources from files (use load_inline with a string)",
    "torch.ops.load_library": "loading prebuilt libraries (use load_inline with a string)",
}
_BANNED_ATTRS = {
    "__code__", "__globals__", "__builtins__", "__subclasses__", "__closure__", "f_locals", "f_back",
    "f_globals", "gi_frame", "tb_frame", "__torch_function__", "__torch_dispatch__", "_make_subclass",
    "as_subclass", "__dict__", "__bases__", "__mro__", "__class__", "__setattr__", "__getattribute__",
    "__delattr__", "cr_frame", "ag_frame", "f_code", "f_builtins", "f_trace", "gi_code", "tb_next",
    "__traceback__",
    # tensors handed to other array libraries (numpy, DLPack): compute there is invisible to the operator inventory
    "numpy", "__array__", "__array_interface__", "__array_struct__", "__dlpack__", "__dlpack_device__",
}
# Modules that must not be reached as another module's attribute (``torch.os``, ``torch.serialization.pickle``,
# ``torch.utils.cpp_extension.subprocess``; through ``sys.modules`` such an alias replaced the
# harness's timing loop): every banned module, plus the interpreter and OS modules that may be imported directly
# (``os``, ``sys``) but whose re-exports would dodge the rules written for the direct spelling.
_MODULE_NAMES = frozenset(_BANNED_MODULES) | {"os", "sys", "posix", "nt", "_io", "_posixsubprocess", "_signal",
                                             "_ctypes", "resource", "faulthandler", "tracemalloc", "posixpath"}
# Of those, the ones that are no ordinary word: judged as an attribute of ANY object (``[torch][0].os`` hides the
# module behind a value). Ordinary words (``time``, ``signal``, ``io``, ``glob``, ...) may name a user's own
# attribute (``self.time``), so they are judged on chains rooted at an imported module only.
_MODULE_ATTRS_ANYWHERE = frozenset({
    "os", "sys", "subprocess", "builtins", "importlib", "ctypes", "kevin", "multiprocessing", "threading", "_thread",
    "socket", "pickle", "gc", "inspect", "posix", "_posixsubprocess", "shutil", "pathlib", "mmap", "safetensors",
    "marshal", "runpy", "tempfile", "atexit", "faulthandler", "_io", "_signal", "_ctypes", "posixpath"})
# torch's own packages that share a banned module's name (window functions, not the stdlib's signal handlers).
_TORCH_OWN_PACKAGES = ("torch.signal",)
# os and sys by allow-list: what honest programs use (paths, the environment, the core count, version facts).
# Everything else (signals to other processes, raw file descriptors, argv, process groups...) reaches the
# sandbox's own processes and channels: ``os.killpg(os.getppid(), SIGSTOP)`` stalled the fork server,
# ``os.writev`` on the report pipe's descriptor (from ``sys.argv``) forged a message.
_OS_SYS_ALLOWED = ("os.path", "os.path.join", "os.path.basename", "os.path.dirname", "os.path.splitext", "os.path.normpath",
                   "os.path.sep", "os.environ", "os.getenv", "os.cpu_count", "os.sep", "os.linesep", "sys.version",
                   "sys.version_info", "sys.platform", "sys.maxsize", "sys.byteorder", "sys.float_info")
_REFLECTIVE = ("getattr", "setattr", "delattr", "hasattr")
_PRIVATE_TORCH = ("torch._C", "torch.utils._python_dispatch", "torch._dispatch", "torch._ops", "torch.library",
                  "torch._library", "torch.overrides")
_TENSOR_CLASSES = {"torch.Tensor", "torch.nn.Parameter", "torch.nn.parameter.Parameter",
                   "torch._C.TensorBase", "torch._C._TensorBase", "torch.nn.Buffer"}
_ALLOWED_MODULE_CALL_ROOTS = {"math", "typing"}
_ARITH_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.MatMult,
              ast.LShift, ast.RShift, ast.BitOr, ast.BitXor, ast.BitAnd)
_CMP_OPS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
# Positional slots of torch.utils.cpp_extension.load_inline's arguments.
_LOAD_INLINE_POSITIONS = {"name": 0, "cpp_sources": 1, "cuda_sources": 2, "functions": 3, "extra_cflags": 4,
                          "extra_cuda_cflags": 5, "extra_ldflags": 6}

# ---------------------------------------------------------------------------------------------------
# C++/CUDA tables

_CPP_ALLOWED_ROOT_NAMES = {
    "Tensor", "TensorBase", "TensorOptions", "Scalar", "ScalarType", "Device", "DeviceType",
    "IntArrayRef", "ArrayRef", "Layout", "MemoryFormat", "Dtype", "empty", "empty_like",
    "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "from_blob",
    "arange", "TensorAccessor", "PackedTensorAccessor", "PackedTensorAccessor32",
    "PackedTensorAccessor64", "GenericPackedTensorAccessor", "RestrictPtrTraits", "DefaultPtrTraits",
    "parallel_for", "parallel_reduce", "get_num_threads", "get_thread_num", "get_num_interop_threads",
    "in_parallel_region", "acc_type", "opmath_type", "NoGradGuard", "device", "dtype",
    "elementSize", "toString", "optional", "nullopt", "Half", "BFloat16", "TensorList", "kStrided",
    "check", "Generator", "DeviceGuard", "OptionalDeviceGuard", "ceil_div", "divup",
}
_CPP_ALLOWED_NAMESPACES = {"indexing", "vec", "ScalarType", "Layout", "MemoryFormat", "DeviceType",
                           "detail", "cuda", "kCUDA", "kCPU"}
_CPP_FORBIDDEN_NAMESPACES = {"native", "_ops", "functional", "nn", "linalg", "fft", "special", "jit",
                             "autograd", "cpublas", "blas", "sparse", "meta", "compositeexplicitautograd"}
_CPP_CUDA_HANDLES = {"getCurrentCUDABlasHandle", "getCurrentCUDASolverDnHandle", "getCurrentCUDASparseHandle",
                     "getCurrentCUDABlasLtHandle"}
_CPP_COMPUTE_METHODS = set("""
mm matmul bmm addmm addmm_ baddbmm mv dot sum mean exp exp_ log log_softmax softmax relu relu_ sigmoid
tanh gelu mul mul_ add add_ sub sub_ div div_ pow sqrt rsqrt max min amax amin argmax argmin norm var
std cumsum cumprod clamp clamp_ clamp_min clamp_max abs neg index_select gather scatter scatter_add
sort topk where masked_fill masked_fill_ conv2d conv1d conv3d linear einsum outer tril triu erf
logsumexp prod maximum minimum reciprocal square
""".split())
_CPP_DISPATCHER = re.compile(r"\b(Dispatcher|findSchemaOrThrow|findSchema|callOp|callBoxed|redispatch"
                             r"|call_op|OperatorHandle)\b")
# Dispatch-key and TLS guards switch off what the runtime operator inventory listens to.
_CPP_DISPATCH_KEYS = re.compile(r"\b(ExcludeDispatchKeyGuard|IncludeDispatchKeyGuard|DispatchKeySet|DispatchKey"
                                r"|AutoDispatchBelow\w*|_AutoDispatchBelow\w*|AutoNonVariableTypeMode"
                                r"|ThreadLocalStateGuard|tls_set_dispatch_key\w*|LocalDispatchKeySet)\b")
_CPP_FUNCTION_MACRO = re.compile(r"#\s*define\s+\w+\(([^)]*)\)([^\n]*)")
_CPP_LIBRARIES = re.compile(
    r"\b(cublas\w*|cudnn\w*|cutlass::\w*|cute::\w*|thrust::\w*|cub::Device\w*|cufft\w*|cusparse\w*"
    r"|cusolver\w*|cblas_\w*|Eigen::\w*|dnnl::\w*|mkl_\w*|mkldnn\w*|[sd]gemm_)"
    r"|#\s*include\s*[<\"](cublas|cudnn|cutlass|cute|thrust|cufft|cusparse|cusolver|mkl|Eigen|dnnl|cblas)")
_CPP_PYTHON = re.compile(
    r"\b(Py[A-Z]\w*_\w+|PyEval\w*|PyFrame\w*|PyThreadState\w*|PyImport\w*|PyRun\w*|PySys\w*|_getframe|f_locals|f_back)\b"
    r"|\b(py|pybind11)\s*::\s*(module_?|globals|eval|exec|import|getattr|object|handle|cast|dict|list|str"
    r"|reinterpret_borrow|reinterpret_steal)\b")
# The forbidden native APIs (files, memory and signals, processes, sockets, CUDA streams and limits, thread pools,
# hooks): built from the table in forbidden.py, which the symbol check reads too. Here, how text spells them: a
# word, an ordinary word only where called (``open(``) or taken by address (``&open``), ``at::launch`` only under
# PyTorch's namespaces, an OpenMP clause in ``#pragma omp`` or ``_Pragma("omp ...")``, an ``#include`` of the
# family's headers (also quoted, with the strings), and after ``using namespace std`` the ``std::`` names without it
# (only then: ``dim3 threads(256)`` is common in honest kernels).
_SCOPE = r"\s*::\s*"
_PYTORCH_SCOPE = r"\b(?:at|torch|aten)\s*::\s*(?:internal\s*::\s*)?"


def _cpp_form(api: forbidden.Api, how: str | None, unqualified: bool = False) -> str | None:
    """The scan's regular expression for one API written as ``how`` says (None: not looked for this way)."""
    name = api.name.rsplit("::", 1)[-1] if how == forbidden.QUALIFIED or unqualified else api.name
    n = forbidden.pattern(name, _SCOPE)
    allowed = "".join(rf"(?!{forbidden.pattern(a, _SCOPE)}\b)" for a in api.scan_allows)
    if how == forbidden.WORD:
        return rf"\b{allowed}{n}\b"
    if how == forbidden.CALL:
        return rf"\b{n}\s*\(|&\s*{n}\b"
    if how == forbidden.QUALIFIED:
        return rf"{_PYTORCH_SCOPE}{n}\b"
    if how == forbidden.CONSTRUCT:
        return rf"\b{n}\b\s*(?:\w+\s*)?[({{]"
    return None


def _cpp_family(family: forbidden.Family) -> re.Pattern | None:
    """One pattern for a family: its headers, its names in their forms, its OpenMP clauses."""
    forms = [r"#\s*include\s*[<\"](?:%s)[>\"]" % "|".join(map(re.escape, family.headers))] if family.headers else []
    forms += [f for api in family.apis if (f := _cpp_form(api, api.scan))]
    clauses = "|".join(forbidden.pattern(api.name) for api in family.apis if api.scan == forbidden.PRAGMA)
    if clauses:
        forms += [rf"#\s*pragma\s+omp\b[^\n]*?\b(?:{clauses})\b",
                  rf"\b_Pragma\s*\(\s*\"\s*omp\b[^\"\n]*?\b(?:{clauses})\b"]
    return re.compile("|".join(forms)) if forms else None


_CPP_FORBIDDEN = [(f, p) for f in forbidden.FAMILIES if (p := _cpp_family(f)) is not None]
_CPP_USING_STD = re.compile(r"\busing\s+namespace\s+std\b")
_CPP_UNQUALIFIED_STD = [(f, re.compile("|".join(_cpp_form(a, a.unqualified, True) for a in f.apis if a.unqualified)))
                        for f in forbidden.FAMILIES if any(a.unqualified for a in f.apis)]
# Names that _aten_verdict leaves to the families' messages (``at::set_num_threads``, ``at::cuda::getStreamFromPool``).
_CPP_POOL_NAMES = re.compile("|".join(forbidden.pattern(a.name.rsplit("::", 1)[-1]) for a in forbidden.POOLS.apis
                                      if a.scan in (forbidden.WORD, forbidden.QUALIFIED)))
_CPP_STREAM_NAMES = re.compile("|".join(forbidden.pattern(a.name) for a in forbidden.CUDA_STREAMS.apis
                                        if a.scan == forbidden.WORD))
# Registration of operators over ATen's (``TORCH_LIBRARY_IMPL`` ... ``m.impl("clone", ...)``), code run when the
# library loads, and digraphs (``%:`` is ``#``): beside the hooks family's names.
_CPP_LOAD_TIME = re.compile(r"\.\s*impl\s*\(|torch/library\.h|c10/cuda/CUDACachingAllocator\.h"
                            r"|__attribute__\s*\(\(\s*(constructor|destructor)|%:")
# Trigraphs: ``??/`` is a backslash, so ``??/`` before a newline splices lines in a compiler that translates
# trigraphs and not in one that does not (GCC's ISO and GNU modes differ): no single reading of such a source is
# the compiler's, so any trigraph is refused, comments and strings included.
_CPP_TRIGRAPH = re.compile(r"\?\?[=/'()!<>\-]")
_CPP_EXTERN_C = re.compile(r"\bextern\s*\"C\"")
# Code placed in PyTorch's own namespaces reaches their functions by argument-dependent lookup with no qualifier
# the scan could see (``namespace at { Tensor f(const Tensor& x) { return cpu::clamp_min(x, 0); } }``, then
# ``f(x)``).
_CPP_OWN_NAMESPACE = re.compile(r"\bnamespace\s+(?:\w+\s*::\s*)*(at|torch|c10|aten|caffe2)\b(?!\s*=)")
# Headers of ATen's per-backend kernels (``at::cpu::addmm`` called without the dispatcher) and its internals.
_CPP_ATEN_INTERNALS = re.compile(
    r"#\s*include\s*[<\"]\s*(ATen/(?:ops|native|functorch)/[^>\"]*|ATen/(?!Functions\.h)\w*Functions(?:_inl)?\.h)")
_CPP_COMPUTED_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]+(?![<\"])\S+", re.M)
_CPP_SYSCALL_TEXT = re.compile(r"\b(syscall|sysenter)\b|\bint\s*\$?0x80\b")  # with strings: inline asm
_CPP_MACRO_QUALIFIER = re.compile(r"\b(?!(?:decltype|if|while|for|switch|return|sizeof|alignof)\b)([A-Za-z_]\w*)\s*\([^()]*\)\s*::")
# Precision downgrades are types and conversions, not names: ``__half``, ``at::Half``, ``torch::kFloat16``,
# ``__float2half``, ``wmma::precision::tf32``. A user's constant ``kHalf`` or variable ``half`` is no downgrade, so
# the bare words count only where the scan can see a type: ``half``/``half2`` as a template argument, in a cast, or
# starting a declaration (``half x``, ``__shared__ half2 t[..]``, ``(half* p``: ``half * x`` is a product).
_CPP_PRECISION = re.compile(
    r"\b(__half\w*|__float2half\w*|__half2float\w*|__nv_bfloat16\w*|__nv_half\w*|__float2bfloat16\w*"
    r"|__bfloat162float\w*|__nv_fp8\w*|nv_bfloat162?|_Float16|__fp16|__bf16|__float_to_tf32|__float2tf32\w*)\b"
    r"|\b(?:torch|at|c10)\s*::\s*(?:ScalarType\s*::\s*)?(?:kHalf|kFloat16|kBFloat16|kFloat8\w*|Half|BFloat16|Float8\w*)\b"
    r"|\bScalarType\s*::\s*(?:Half|BFloat16|Float8\w*)\b|\bprecision\s*::\s*tf32\b"
    r"|<\s*(?:const\s+)?half2?\s*[*&]*\s*[>,]|\(\s*(?:const\s+)?half2?\s*[*&]*\s*\)\s*(?=[\w(])"
    r"|(?:^|[;{}(,]|\b(?:const|static|volatile|__shared__|register|extern|constexpr|inline)\b)[ \t]*half2?"
    r"(?:[ \t]*[*&]+(?![ \t])|[*&]+[ \t]*|[ \t]+)(?:__restrict__[ \t]+)?[A-Za-z_]\w*[ \t]*[=;,\[()]", re.M)
# Half-precision types in inline PTX (``cvt.rna.tf32.f32``, ``mma.sync...f16``): read with the strings.
_CPP_PTX_PRECISION = re.compile(r"\b(?:cvt|mma|wmma|ld|st|fma|add|mul)\.[\w.]*?\.(?:tf32|f16|bf16|f16x2|bf16x2|e4m3|e5m2)\b")
_FAST_MATH = re.compile(r"fast[-_]math|-Ofast\b|-?-ftz=true|-?-prec-div=false|-?-prec-sqrt=false")
_CPP_ATEN = re.compile(r"\b(torch|at|aten|c10)\s*::\s*((?:\w+\s*::\s*)*)(\w+)")
_CPP_USING = re.compile(r"\busing\s+namespace\s+(torch|at|aten|c10)\b(?!\s*::\s*(indexing|cuda))"
                        r"|\busing\s+(torch|at|aten)\s*::\s*(\w+)\s*;")


@dataclass(frozen=True)
class _Source:
    """One C++/CUDA source argument of a load_inline call, lines spliced, comments stripped and macros expanded."""

    kind: str  # "cpp_sources" or "cuda_sources"
    text: str
    raw: str = ""  # as written: for the rules about the spelling itself (trigraphs)


# ---------------------------------------------------------------------------------------------------
# Entry point


def check_format(candidate_src: str, *, backend: str = "cuda", allow_libraries: bool = False,
                 rules: str = "kevin") -> list[str]:
    """Static format and reward-hacking check of a candidate program; [] when acceptable.

    Each violation is one short line naming the rule, the offending name and its line, and what to do
    instead (it becomes the model's feedback). Advisory: see the module docstring. ``rules`` names the rule
    set (`config.RULES`): "kernelbench" lets ``__init__`` build ``torch.nn`` layers to hold weights.

    >>> check_format("x = 1", backend="tpu")
    Traceback (most recent call last):
    ...
    ValueError: unknown backend 'tpu'; expected one of ('cuda', 'cpu')
    >>> check_format("def broken(:")
    ['syntax error (line 1): invalid syntax; return one complete, valid Python program']
    """
    return list(dict.fromkeys(message for _, message in check_rules(candidate_src, backend=backend,
                                                                     allow_libraries=allow_libraries, rules=rules)))


RULE_FAMILIES = ("length", "syntax", "model_new", "fallbacks", "reference_model", "nn_layers", "layer_calls",
                 "banned_python", "module_values", "module_assignment", "forward_path", "load_inline")
"""The static rule families, one per check (``check_rules`` names each violation's); telemetry counts them."""


def check_rules(candidate_src: str, *, backend: str = "cuda", allow_libraries: bool = False,
                rules: str = "kevin") -> list[tuple[str, str]]:
    """`check_format`'s violations, each as (rule family of `RULE_FAMILIES`, message), in the same order.

    >>> check_rules("def broken(:")
    [('syntax', 'syntax error (line 1): invalid syntax; return one complete, valid Python program')]
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    if rules not in RULES:
        raise ValueError(f"unknown rules {rules!r}; expected one of {tuple(RULES)}")
    layers_in_init = bool(RULES[rules]["nn_modules_in_init"])
    if len(candidate_src) > _MAX_CHARS:  # keeps the scan's time bounded (about 1 s per 300 kB)
        return [("length", f"program is {len(candidate_src)} characters long (limit {_MAX_CHARS}): write a shorter one")]
    try:
        tree = parse_python(candidate_src)
    except SyntaxError as exc:
        return [("syntax", f"syntax error (line {exc.lineno}): {exc.msg}; return one complete, valid Python program")]
    mod = _Module.build(tree)
    checks = [("model_new", lambda: _check_model_new(mod)), ("fallbacks", lambda: _check_fallbacks(mod)),
              ("reference_model", lambda: _check_reference_model(mod)),
              ("nn_layers", lambda: _check_nn_layers(mod, layers_in_init)),
              ("layer_calls", lambda: _check_layer_calls(mod) if layers_in_init else []),
              ("banned_python", lambda: _check_banned_python(mod)), ("module_values", lambda: _check_module_values(mod)),
              ("module_assignment", lambda: _check_module_assignment(mod)),
              ("forward_path", lambda: _check_forward_path(mod)),
              ("load_inline", lambda: _check_load_inline(mod, backend, allow_libraries))]
    out: dict[str, str] = {}
    for family, check in checks:
        for message in check():
            out.setdefault(message, family)
    return [(family, message) for message, family in out.items()]


# ---------------------------------------------------------------------------------------------------
# Module facts


@dataclass(frozen=True)
class _Module:
    """What the rules need to know about one parsed candidate."""

    tree: ast.Module
    nodes: tuple  # every node of the tree, walked once
    aliases: dict  # local name -> dotted qualname of what it was imported/assigned from
    self_aliases: dict  # self attribute -> qualname ("self.mm = torch.matmul")
    parents: dict  # id(node) -> parent node
    classes: dict  # class name -> ClassDef (every class in the file)
    functions: dict  # module-level function name -> FunctionDef
    strings: dict  # variable name -> value node of its (last) assignment anywhere

    @staticmethod
    def build(tree: ast.Module) -> "_Module":
        nodes = tuple(ast.walk(tree))
        aliases: dict = {}
        for node in nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        aliases[a.asname] = a.name
                    else:
                        root = a.name.split(".")[0]
                        aliases[root] = root
            elif isinstance(node, ast.ImportFrom):
                base = ("." * node.level) + (node.module or "")
                for a in node.names:
                    if a.name != "*":
                        aliases[a.asname or a.name] = f"{base}.{a.name}" if base else a.name
        # Aliases by assignment (mm = torch.matmul; T = torch), to a fixed point.
        self_aliases: dict = {}
        for _ in range(3):
            for node in nodes:
                if isinstance(node, ast.Assign):
                    q = _qualname(node.value, aliases)
                    if q is None:
                        continue
                    for t in node.targets:
                        if isinstance(t, ast.Name):
                            aliases.setdefault(t.id, q)
                        elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            self_aliases[t.attr] = q
        parents = {}
        for node in nodes:
            for child in ast.iter_child_nodes(node):
                parents[id(child)] = node
        classes = {n.name: n for n in nodes if isinstance(n, ast.ClassDef)}
        functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for n in tree.body:  # mix = lambda x, y: x @ y
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Lambda):
                functions.update({t.id: n.value for t in n.targets if isinstance(t, ast.Name)})
        strings: dict = {}
        for node in nodes:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                strings[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                strings[node.target.id] = node.value
        return _Module(tree, nodes, aliases, self_aliases, parents, classes, functions, strings)

    def qualname(self, node: ast.AST) -> str | None:
        """Dotted import path of a Name/Attribute chain, resolving aliases; None if not module-rooted."""
        q = _qualname(node, self.aliases)
        if q is None:
            d = _dotted(node)
            if d and d.startswith("self."):
                attr, _, rest = d[5:].partition(".")
                if attr in self.self_aliases:
                    return self.self_aliases[attr] + (f".{rest}" if rest else "")
        return q

    def model_new(self) -> ast.ClassDef | None:
        return self.classes.get("ModelNew")

    def methods(self, cls: ast.ClassDef) -> dict:
        """Methods of ``cls`` and of its bases defined in this file (the class's own win)."""
        found: dict = {}
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in self.classes and self.classes[base.id] is not cls:
                found.update(self.methods(self.classes[base.id]))
        found.update({n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))})
        return found

    def load_inline_calls(self) -> list:
        return [n for n in self.nodes if isinstance(n, ast.Call)
                and (self.qualname(n.func) or "").endswith("cpp_extension.load_inline")]


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def _qualname(node: ast.AST, aliases: dict) -> str | None:
    d = _dotted(node)
    if d is None:
        return None
    root, _, rest = d.partition(".")
    if root not in aliases:
        return None
    return aliases[root] + (f".{rest}" if rest else "")


def _line(node: ast.AST) -> int:
    return getattr(node, "lineno", 0)


def _short(node: ast.AST, limit: int = 40) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _torch_rest(q: str | None) -> str | None:
    """'torch.nn.functional.relu' -> 'nn.functional.relu'; None if not under torch."""
    if q and q.startswith("torch."):
        return q[len("torch."):]
    return None


# ---------------------------------------------------------------------------------------------------
# Python rules


def _check_model_new(mod: _Module) -> list[str]:
    cls = mod.model_new()
    if cls is None:
        return ["no class `ModelNew`: define `class ModelNew(nn.Module)` with a `forward` method"]
    out = []
    if not _derives_from_module(mod, cls, set()):
        out.append(f"ModelNew (line {cls.lineno}) does not derive from nn.Module: "
                   "write `class ModelNew(nn.Module)`")
    fwd = mod.methods(cls).get("forward")
    if fwd is None:
        out.append(f"ModelNew (line {cls.lineno}) has no `forward` method: define one that calls your kernel")
    elif _is_empty_body(fwd.body):
        out.append(f"ModelNew.forward (line {fwd.lineno}) has an empty body: call your kernel and return its output")
    return out


def _derives_from_module(mod: _Module, cls: ast.ClassDef, seen: set) -> bool:
    for base in cls.bases:
        q = mod.qualname(base)
        if q in ("torch.nn.Module", "torch.nn.modules.module.Module"):
            return True
        if isinstance(base, ast.Name) and base.id in mod.classes and base.id not in seen:
            if _derives_from_module(mod, mod.classes[base.id], seen | {base.id}):
                return True
    return False


def _is_empty_body(body: list) -> bool:
    rest = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return all(isinstance(s, ast.Pass) for s in rest)


def _check_fallbacks(mod: _Module) -> list[str]:
    out = []
    try_types = (ast.Try,) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())
    for node in mod.nodes:
        if isinstance(node, try_types):
            out.append(f"try/except at line {node.lineno}: fallbacks are not allowed; "
                       "remove the try block and let errors surface")
        elif isinstance(node, ast.ClassDef) and _is_empty_body(node.body):
            out.append(f"class {node.name} (line {node.lineno}) has only `pass`/`...` as body: "
                       "empty subclasses are not allowed; implement the class")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__exit__":
            out.append(f"__exit__ defined (line {node.lineno}): custom context managers can swallow "
                       "errors; remove it")
    return out


def _check_reference_model(mod: _Module) -> list[str]:
    out = []
    for node in mod.nodes:
        hit = ((isinstance(node, ast.Name) and node.id == "Model")
               or (isinstance(node, ast.Attribute) and node.attr == "Model")
               or (isinstance(node, ast.ImportFrom) and any(a.name == "Model" for a in node.names)))
        if hit:
            out.append(f"uses the reference class `Model` (line {_line(node)}): do not inherit from, "
                       "create or import Model; write ModelNew's computation in your kernel")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "forward"
                and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Name)
                and node.func.value.func.id == "super"):
            out.append(f"super().forward (line {node.lineno}): delegating to a parent class is not "
                       "allowed; call your kernel")
    return out


def _check_nn_layers(mod: _Module, layers_in_init: bool) -> list[str]:
    """torch.nn layers: nowhere under "kevin"; under "kernelbench" only built by a call in an ``__init__``."""
    out = []
    for node in mod.nodes:
        if not isinstance(node, (ast.Name, ast.Attribute)) or isinstance(mod.parents.get(id(node)), ast.Attribute):
            continue
        if not _is_nn_layer(mod, node):
            continue
        if layers_in_init and _built_in_init(mod, node):
            continue
        rest = _torch_rest(mod.qualname(node))
        if layers_in_init:
            out.append(f"uses torch.{rest} (line {_line(node)}): torch.nn layers may only be built in __init__ "
                       "(to hold weights); pass their .weight/.bias to your kernel")
            continue
        out.append(f"uses torch.{rest} (line {_line(node)}): torch.nn layers are not allowed; hold weights "
                   "in nn.Parameter, initialise them with nn.init, compute in your kernel")
    return out


def _is_nn_layer(mod: _Module, node: ast.AST) -> bool:
    """Whether a name or attribute chain is a torch.nn layer class (not a parameter, container or initialiser)."""
    rest = _torch_rest(mod.qualname(node))
    if rest is None or not rest.startswith("nn."):
        return False
    sub = rest[len("nn."):]
    return not (sub in _ALLOWED_NN or sub.startswith(("init", "functional", "Module.", "Parameter.")) or sub == "")


def _built_in_init(mod: _Module, node: ast.AST) -> bool:
    """Whether ``node`` is called (``nn.Conv2d(...)``) inside a method named ``__init__``."""
    parent = mod.parents.get(id(node))
    if not (isinstance(parent, ast.Call) and parent.func is node):
        return False
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        parent = mod.parents.get(id(parent))
    return isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) and parent.name == "__init__"


def _layer_attrs(mod: _Module) -> set:
    """self attributes whose value builds a torch.nn layer (``self.conv = nn.Conv2d(..)``, ``nn.Sequential(..)``)."""
    found = set()
    for node in mod.nodes:
        if isinstance(node, ast.Assign) and any(
                isinstance(n, ast.Call) and _is_nn_layer(mod, n.func) for n in ast.walk(node.value)):
            found.update(_self_attr(t) for t in node.targets if _self_attr(t))
    return found


def _layer_root(node: ast.AST, attrs: set, names: set) -> str | None:
    """The layer a callee expression is rooted at (``self.conv``, ``self.blocks[0].forward``, a loop variable over
    ``self.blocks``), or None; a chain through a tensor attribute (``self.conv.weight.contiguous``) is no call of
    the layer."""
    while True:
        if _self_attr(node) in attrs:
            return f"self.{_self_attr(node)}"
        if isinstance(node, ast.Name):
            return node.id if node.id in names else None
        if isinstance(node, ast.Attribute):
            if node.attr in _TENSOR_ATTRS:
                return None
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return None


def _check_layer_calls(mod: _Module) -> list[str]:
    """Under "kernelbench": a torch.nn layer held for its weights must not run on the forward path."""
    attrs = _layer_attrs(mod)
    if not attrs:
        return []
    out = []
    for fn, _owner, _tensors in _forward_functions(mod):
        names: set = set()
        for _ in range(2):  # for block in self.blocks: ...; conv = self.conv
            for node in ast.walk(fn):
                if isinstance(node, ast.For) and any(_layer_root(n, attrs, names) for n in ast.walk(node.iter)):
                    names.update(t.id for t in _flatten_targets(node.target) if isinstance(t, ast.Name))
                elif isinstance(node, ast.Assign) and _layer_root(node.value, attrs, names):
                    names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        for node in ast.walk(fn):
            root = _layer_root(node.func, attrs, names) if isinstance(node, ast.Call) else None
            if root:
                out.append(f"forward path runs the torch.nn layer {root} (line {node.lineno}): a layer may hold "
                           "weights, but running it is PyTorch compute; pass .weight/.bias to your kernel")
    return out


def _check_banned_python(mod: _Module) -> list[str]:
    out = []
    for node in mod.nodes:
        line = _line(node)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out += _banned_import(node)
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                if mod.qualname(base) in _TENSOR_CLASSES:
                    out.append(f"class {node.name} subclasses {mod.qualname(base)} (line {line}): tensor "
                               "subclasses are not allowed; return plain tensors")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in _BANNED_ATTRS:
            out.append(f"defines {node.name} (line {line}): tensor hooks are not allowed; return plain tensors")
        elif isinstance(node, ast.Attribute) and node.attr in _BANNED_ATTRS:
            out.append(f"accesses .{node.attr} (line {line}): introspection, tensor hooks and handing tensors to "
                       "other array libraries are not allowed")
        elif (isinstance(node, ast.Attribute) and node.attr in _MODULE_ATTRS_ANYWHERE
              and mod.qualname(node) is None):  # module-rooted chains are judged whole, below
            out.append(f"accesses .{node.attr} (line {line}): the {node.attr} module reached as an attribute: "
                       f"{_module_rule(node.attr)}")
        elif isinstance(node, ast.Call):
            out += _banned_call(mod, node)
        if isinstance(node, (ast.Name, ast.Attribute)) and not isinstance(mod.parents.get(id(node)), ast.Attribute):
            q = mod.qualname(node) or ""
            if any(q == p or q.startswith(p + ".") for p in _PRIVATE_TORCH):
                out.append(f"uses {q} (line {line}): PyTorch's private dispatch internals are not allowed "
                           "(they can hide operators from the sandbox)")
            reached = _reexported_module(q)
            if reached:
                out.append(f"uses {q} (line {line}): the {reached} module reached through another module: "
                           f"{_module_rule(reached)}")
            elif _os_sys_refused(q) and not (q in _BANNED_CALLS and isinstance(mod.parents.get(id(node)), ast.Call)):
                out.append(f"uses {q} (line {line}): {_OS_SYS_RULE}")  # a banned call names its own reason
        if (isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load)
                and not isinstance(mod.parents.get(id(node)), ast.Attribute)):
            out += _banned_torch_ref(mod, node)  # assignment targets are reported by _check_module_assignment
    return out


def _banned_import(node: ast.AST) -> list[str]:
    """``import X.Y`` and ``from X import Y``: a banned root, a module re-exported by another, a banned function."""
    if isinstance(node, ast.Import):
        paths = [a.name for a in node.names]
    else:
        base = node.module or ""
        names = [f"{base}.{a.name}" if base else a.name for a in node.names if a.name != "*"]
        paths = [base] if base.split(".")[0] in _BANNED_MODULES else [base] + names
    out = []
    for path in paths:
        root, reached = path.split(".")[0], _reexported_module(path)
        if root in _BANNED_MODULES:
            out.append(f"imports {path} (line {node.lineno}): {_BANNED_MODULES[root]}")
        elif reached:
            out.append(f"imports {path} (line {node.lineno}): the {reached} module reached through another module: "
                       f"{_module_rule(reached)}")
        elif path in _BANNED_CALLS:
            out.append(f"imports {path} (line {node.lineno}): {_BANNED_CALLS[path]} is not allowed")
        elif _os_sys_refused(path):
            out.append(f"imports {path} (line {node.lineno}): {_OS_SYS_RULE}")
    return out


_OS_SYS_RULE = ("of os and sys only os.path, os.environ, os.getenv, os.cpu_count and sys's version facts are "
                "allowed")


def _os_sys_refused(qualname: str) -> bool:
    """A dotted path under os or sys (``os.killpg``, ``sys.argv``) that is not on the allow-list."""
    parts = qualname.split(".") if qualname else []
    if len(parts) < 2 or parts[0] not in ("os", "sys"):
        return False
    return not any(qualname == a or qualname.startswith(a + ".") for a in _OS_SYS_ALLOWED)


def _reexported_module(qualname: str) -> str | None:
    """The banned or system module a dotted path reaches past its root (``torch.utils.cpp_extension.os.system``
    -> ``os``), or None. A module's attributes include the modules it imported, so every package re-exports
    ``os``, ``sys``, ``subprocess``, ... under its own name; any such step is refused, whatever the root."""
    parts = qualname.split(".") if qualname else []
    for i in range(1, len(parts)):
        if parts[i] in _MODULE_NAMES and ".".join(parts[: i + 1]) not in _TORCH_OWN_PACKAGES:
            return parts[i]
    return None


def _module_rule(name: str) -> str:
    """Why a module reached indirectly is refused: its own ban, or for os/sys the harness they lead to."""
    why = _BANNED_MODULES.get(name)
    if why:
        return why
    return "import it by name if you need it (os and sys through another module lead to the harness's own code)"


def _check_module_values(mod: _Module) -> list[str]:
    """An imported module used as a value (``[torch][0]``, ``f(torch)``) hides the attribute chain behind it from
    the rules above; modules are used through their attributes only, or renamed by a plain assignment."""
    imported = {a.asname or a.name.split(".")[0] for n in mod.nodes if isinstance(n, ast.Import) for a in n.names}
    out = []
    for node in mod.nodes:
        if not (isinstance(node, ast.Name) and node.id in imported and isinstance(node.ctx, ast.Load)):
            continue
        parent = mod.parents.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.value is node:
            continue
        if isinstance(parent, ast.Assign) and parent.value is node and all(
                isinstance(t, ast.Name) or _self_attr(t) for t in parent.targets):
            continue  # T = torch: an alias the rules resolve
        out.append(f"uses the module {node.id} as a value (line {node.lineno}): name what you use from it "
                   f"({node.id}.empty), so that the checks can see it")
    return out


def _banned_call(mod: _Module, node: ast.Call) -> list[str]:
    line = node.lineno
    out = []
    if isinstance(node.func, ast.Name) and node.func.id in _BANNED_CALLS and node.func.id not in mod.aliases:
        out.append(f"calls {node.func.id}() (line {line}): {_BANNED_CALLS[node.func.id]} is not allowed; "
                   "write plain code")
    if isinstance(node.func, ast.Name) and node.func.id == "type" and len(node.args) == 3:
        out.append(f"type(name, bases, dict) (line {line}): building classes at run time is not allowed; "
                   "write a class statement")
    if isinstance(node.func, ast.Name) and node.func.id in _REFLECTIVE and node.args:
        target = mod.qualname(node.args[0])
        name = node.args[1] if len(node.args) > 1 else None
        if target is not None:
            out.append(f"{node.func.id}({target}, ...) (line {line}): reflective access to modules is not "
                       "allowed; name attributes directly")
        elif not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            out.append(f"{node.func.id}() with a computed attribute name (line {line}): reflective access is not "
                       "allowed; name attributes directly")  # getattr(gen, "gi" + "_frame")
        elif name.value in _BANNED_ATTRS:
            out.append(f"{node.func.id}(..., {name.value!r}) (line {line}): introspection, tensor hooks and foreign "
                       "array access are not allowed")
        elif name.value in _MODULE_NAMES:
            out.append(f"{node.func.id}(..., {name.value!r}) (line {line}): the {name.value} module reached as an "
                       f"attribute: {_module_rule(name.value)}")
    if isinstance(node.func, ast.Attribute):
        if node.func.attr in _PRECISION_METHODS:
            out.append(f".{node.func.attr}() (line {line}): precision downgrade; keep float32 "
                       "(the output is checked at the reference precision)")
        if node.func.attr in _HOOK_METHODS:
            out.append(f".{node.func.attr}() (line {line}): module hooks can rewrite outputs outside forward; "
                       "remove them")
        if node.func.attr in _STREAM_METHODS:
            out.append(f".{node.func.attr}() (line {line}): side streams and events are not allowed; run "
                       "on the current stream")
    return out


def _banned_torch_ref(mod: _Module, node: ast.AST) -> list[str]:
    q = mod.qualname(node)
    if q is None:
        return []
    line = _line(node)
    for banned, why in _BANNED_CALLS.items():
        if "." in banned and (q == banned or q.startswith(banned + ".")):
            return [f"uses {q} (line {line}): {why} is not allowed"]
    rest = _torch_rest(q)
    if rest is None:
        return []
    head = rest.split(".")[0]
    parent = mod.parents.get(id(node))
    called = isinstance(parent, ast.Call) and parent.func is node
    last = rest.split(".")[-1]
    if not called and (rest.startswith("nn.functional.") or (last in _COMPUTE_METHODS and "." not in rest)
                       or rest.startswith(("ops.", "Tensor."))):
        return [f"uses torch.{rest} as a value (line {line}): PyTorch compute is not allowed, however it is "
                "called; write it in your kernel"]
    if _matches(rest, _PRECISION_TORCH):
        return [f"uses torch.{rest} (line {line}): precision downgrade; keep float32"]
    if _matches(rest, _STREAM_TORCH):
        return [f"uses torch.{rest} (line {line}): streams, events and CUDA graphs are not allowed; run on "
                "the current stream and let the sandbox time you"]
    if head in _COMPILER_TORCH:
        return [f"uses torch.{rest} (line {line}): PyTorch compilers are not allowed; write the kernel yourself"]
    if head == "backends" or rest.split(".")[-1] in _NUMERICS_CALLS:
        return [f"uses torch.{rest} (line {line}): global numerics flags are not allowed; leave them at defaults"]
    return []


def _matches(rest: str, table: set) -> bool:
    return any(rest == t or rest.startswith(t + ".") for t in table)


def _check_module_assignment(mod: _Module) -> list[str]:
    out = []
    for node in mod.nodes:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        else:
            continue
        for t in targets:
            for leaf in _flatten_targets(t):
                base = leaf.value if isinstance(leaf, (ast.Attribute, ast.Subscript)) else None
                # Plain aliases only: self.mm = torch.matmul stores a value, it does not patch torch.
                q = _qualname(leaf, mod.aliases) if isinstance(leaf, ast.Attribute) else None
                if q is None and base is not None:
                    q = _qualname(base, mod.aliases)
                if (isinstance(leaf, ast.Attribute) and isinstance(leaf.value, ast.Name)
                        and leaf.value.id in mod.classes):
                    out.append(f"assigns to {_short(leaf)} (line {node.lineno}): classes must not be patched "
                               "after their definition; define methods in the class body")
                elif q is not None:
                    out.append(f"assigns to {_short(leaf)} (line {node.lineno}): patching modules "
                               "(torch, timers, comparisons, flags) is not allowed; leave them untouched")
    return out


def _flatten_targets(t: ast.AST) -> list:
    if isinstance(t, (ast.Tuple, ast.List)):
        return [leaf for e in t.elts for leaf in _flatten_targets(e)]
    if isinstance(t, ast.Starred):
        return _flatten_targets(t.value)
    return [t]


# ---------------------------------------------------------------------------------------------------
# The forward path


def _extension_facts(mod: _Module) -> tuple[set, set, set]:
    """(names bound to a load_inline result, self attributes holding one, exposed function names)."""
    calls = mod.load_inline_calls()
    names: set = set()
    attrs: set = set()
    exposed: set = set()
    for call in calls:
        fn_node = _kwarg(call, "functions", _LOAD_INLINE_POSITIONS["functions"])
        if fn_node is not None:
            parts = _resolve_strings(mod, fn_node, 0)
            if parts:
                exposed.update(p for p in parts if p.isidentifier())
    for _ in range(3):
        for node in mod.nodes:
            if not isinstance(node, ast.Assign):
                continue
            v = node.value
            is_ext = (v in calls or (isinstance(v, ast.Name) and v.id in names)
                      or (_self_attr(v) in attrs if _self_attr(v) else False))
            is_fn = isinstance(v, ast.Attribute) and (_is_ext_ref(v.value, names, attrs) or v.attr in exposed)
            if not (is_ext or is_fn):
                continue
            for t in node.targets:
                if isinstance(t, ast.Name):
                    (names if is_ext else exposed).add(t.id)
                elif _self_attr(t):
                    (attrs if is_ext else exposed).add(_self_attr(t))
    return names, attrs, exposed


def _self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _is_ext_ref(node: ast.AST, names: set, attrs: set) -> bool:
    return (isinstance(node, ast.Name) and node.id in names) or (_self_attr(node) in attrs if _self_attr(node) else False)


@dataclass(frozen=True)
class _CallGraph:
    """Where calls inside the forward path can lead, within this file."""

    cls: ast.ClassDef  # ModelNew
    module_classes: frozenset  # names of the other classes in the file
    instance_attrs: dict  # self attribute -> local class instance it holds (self.block = Block())
    self_lambdas: dict  # self attribute -> Lambda (self.f = lambda x: ...)


def _forward_functions(mod: _Module) -> list:
    """(function node, owning class or None, names of its tensor-valued parameters) on the forward path.

    The path starts at ``ModelNew.forward`` and at the ``forward`` of every local nn.Module class that is
    instantiated somewhere (``nn.ModuleList([Block() ...])`` runs ``Block.forward`` however it is
    called), then follows calls to functions, methods, lambdas and classes defined in this file. A
    helper's parameters are tensors where a caller passes a tensor.
    """
    cls = mod.model_new()
    if cls is None or "forward" not in mod.methods(cls):
        return []
    graph = _CallGraph(
        cls=cls,
        module_classes=frozenset(name for name, c in mod.classes.items() if c is not cls),
        instance_attrs=_local_module_attrs(mod),
        self_lambdas={_self_attr(t): n.value for n in mod.nodes if isinstance(n, ast.Assign)
                      and isinstance(n.value, ast.Lambda) for t in n.targets if _self_attr(t)},
    )
    # model(x) runs __call__, which an override can reroute away from forward.
    queue = [(mod.methods(cls)[n], cls, None) for n in ("forward", "__call__") if n in mod.methods(cls)]
    instantiated = {n.func.id for n in mod.nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    for name in sorted(graph.module_classes & instantiated):
        c = mod.classes[name]
        if _derives_from_module(mod, c, set()):
            queue += [(mod.methods(c)[n], c, None) for n in ("forward", "__call__") if n in mod.methods(c)]
    self_attrs = _tensor_self_attrs(mod)
    seen: set = set()
    result = []
    while queue:
        fn, owner, tensor_args = queue.pop(0)
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        tensors = _tensor_params(fn, owner, tensor_args)
        result.append((fn, owner, tensors))
        env = _TensorEnv(mod, tensors, self_attrs)
        env.learn(fn)
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            for target, target_owner in _call_targets(mod, graph, node.func, owner):
                t_params = [a.arg for a in target.args.posonlyargs + target.args.args]
                if target_owner is not None and not _is_staticmethod(target) and t_params:
                    t_params = t_params[1:]
                passed = [p for p, a in zip(t_params, node.args) if env.is_tensor(a)]
                passed += [k.arg for k in node.keywords if k.arg and env.is_tensor(k.value)]
                queue.append((target, target_owner, passed))
    return result


def _tensor_params(fn: ast.AST, owner: ast.ClassDef | None, tensor_args: list | None) -> set:
    """A forward's parameters (minus self/ctx and plain scalars), or the ones callers passed tensors to."""
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
    if fn.args.vararg:
        params.append(fn.args.vararg.arg)
    if params and owner is not None and not _is_staticmethod(fn):
        params = params[1:]
    name = getattr(fn, "name", "<lambda>")
    if name == "forward" and params and params[0] == "ctx":
        params = params[1:]
    tensors = set(params) if (name == "forward" or tensor_args is None) else set(tensor_args)
    return tensors - _scalar_params(fn)


def _call_targets(mod: _Module, graph: _CallGraph, f: ast.AST, owner: ast.ClassDef | None) -> list:
    """(function node, owning class or None) pairs that calling ``f`` may run, within this file."""
    if isinstance(f, ast.Name) and f.id in mod.functions:
        return [(mod.functions[f.id], None)]
    if isinstance(f, ast.Name) and f.id in graph.module_classes:
        c = mod.classes[f.id]
        return [(m, c) for n, m in mod.methods(c).items() if n in ("__init__", "forward", "__call__")]
    if not isinstance(f, ast.Attribute):
        return []
    recv = f.value
    if isinstance(recv, ast.Name) and recv.id in ("self", "cls") and owner is not None:
        if f.attr in mod.methods(owner):
            return [(mod.methods(owner)[f.attr], owner)]
        if f.attr in graph.self_lambdas:
            return [(graph.self_lambdas[f.attr], None)]
        if f.attr in graph.instance_attrs:
            c = graph.instance_attrs[f.attr]
            return [(m, c) for n, m in mod.methods(c).items() if n in ("forward", "__call__")]
        return []
    if isinstance(recv, ast.Name) and recv.id in graph.module_classes:  # AddFn.apply(x), Helper.run(x)
        c = mod.classes[recv.id]
        name = "forward" if f.attr == "apply" else f.attr
        return [(mod.methods(c)[name], c)] if name in mod.methods(c) else []
    if f.attr.startswith("__"):
        return []
    # obj.method(...) on an object of unknown class: any local class's method of that name may run.
    return [(mod.methods(c)[f.attr], c) for c in mod.classes.values()
            if c is not graph.cls and f.attr in mod.methods(c)]


def _scalar_params(fn: ast.AST) -> set:
    """Parameters that are plainly not tensors: annotated int/float/bool/str, or a scalar default."""
    args = fn.args.posonlyargs + fn.args.args
    defaults = [None] * (len(args) - len(fn.args.defaults)) + list(fn.args.defaults)
    pairs = list(zip(args, defaults)) + list(zip(fn.args.kwonlyargs, fn.args.kw_defaults))
    found = set()
    for arg, default in pairs:
        ann = arg.annotation
        if isinstance(ann, ast.Name) and ann.id in ("int", "float", "bool", "str"):
            found.add(arg.arg)
        elif isinstance(default, ast.Constant) and isinstance(default.value, (int, float, bool, str)):
            found.add(arg.arg)
    return found


def _is_staticmethod(fn: ast.AST) -> bool:
    return isinstance(fn, ast.Lambda) or any(
        isinstance(d, ast.Name) and d.id == "staticmethod" for d in getattr(fn, "decorator_list", []))


def _local_module_attrs(mod: _Module) -> dict:
    """self attribute -> local class, for ``self.block = MyBlock(...)`` anywhere."""
    found = {}
    for node in mod.nodes:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
            c = mod.classes.get(node.value.func.id)
            if c is not None and c.name != "ModelNew":
                for t in node.targets:
                    if _self_attr(t):
                        found[_self_attr(t)] = c
    return found


def _tensor_self_attrs(mod: _Module) -> set:
    """self attributes that hold tensors: parameters, buffers, torch-created tensors."""
    found = set()
    for node in mod.nodes:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            q = _torch_rest(mod.qualname(node.value.func)) or ""
            if q and not q.startswith(("cuda.", "utils.", "device", "Size")) and not _is_nn_layer(mod, node.value.func):
                for t in node.targets:
                    if _self_attr(t):
                        found.add(_self_attr(t))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("register_buffer", "register_parameter") and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value)
    return found


class _TensorEnv:
    """Which expressions in one function are tensor-valued (flow-insensitive, conservative)."""

    def __init__(self, mod: _Module, names: set, self_attrs: set) -> None:
        self.mod = mod
        self.names = set(names)
        self.self_attrs = self_attrs
        self.ext_names, self.ext_attrs, self.exposed = _extension_facts(mod)

    def learn(self, fn: ast.AST) -> None:
        for _ in range(4):
            before = len(self.names)
            for node in ast.walk(fn):
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    if self.is_tensor(node.value):
                        for t in targets:
                            self.names.update(leaf.id for leaf in _flatten_targets(t) if isinstance(leaf, ast.Name))
                elif isinstance(node, ast.For) and self.is_tensor(node.iter):
                    self.names.update(leaf.id for leaf in _flatten_targets(node.target) if isinstance(leaf, ast.Name))
                elif isinstance(node, ast.NamedExpr) and self.is_tensor(node.value):
                    self.names.add(node.target.id)
            if len(self.names) == before:
                return

    def is_extension_call(self, node: ast.Call) -> bool:
        f = node.func
        if isinstance(f, ast.Attribute):
            return _is_ext_ref(f.value, self.ext_names, self.ext_attrs) or f.attr in self.exposed
        if isinstance(f, ast.Name):
            return f.id in self.exposed
        return False

    def is_tensor(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.names
        if isinstance(node, ast.Attribute):
            if _self_attr(node):
                return node.attr in self.self_attrs
            return node.attr in _TENSOR_ATTRS and (self.is_tensor(node.value) or node.attr in ("weight", "bias"))
        if isinstance(node, ast.Subscript):
            return self.is_tensor(node.value)
        if isinstance(node, ast.Call):
            if self.is_extension_call(node):
                return True
            rest = _torch_rest(self.mod.qualname(node.func))
            if rest is not None:
                return not rest.startswith(("cuda.", "Size", "device", "dtype", "is_", "finfo", "iinfo", "numel",
                                            "broadcast_shapes", "no_grad", "inference_mode", "get_", "utils."))
            if isinstance(node.func, ast.Attribute) and self.is_tensor(node.func.value):
                return node.func.attr not in _SHAPE_METHODS
            return False
        if isinstance(node, ast.BinOp):
            return self.is_tensor(node.left) or self.is_tensor(node.right)
        if isinstance(node, ast.UnaryOp):
            return self.is_tensor(node.operand)
        if isinstance(node, ast.IfExp):
            return self.is_tensor(node.body) or self.is_tensor(node.orelse)
        if isinstance(node, (ast.Tuple, ast.List)):
            return any(self.is_tensor(e) for e in node.elts)
        if isinstance(node, ast.Starred):
            return self.is_tensor(node.value)
        return False


def _check_forward_path(mod: _Module) -> list[str]:
    out = []
    self_attrs = _tensor_self_attrs(mod)
    path = _forward_functions(mod)
    for fn, _owner, tensors in path:
        env = _TensorEnv(mod, tensors, self_attrs)
        env.learn(fn)
        where = "forward" if fn is path[0][0] else f"forward path ({getattr(fn, 'name', 'lambda')})"
        for node in ast.walk(fn):
            line = _line(node)
            if isinstance(node, ast.Call):
                out += _forward_call(mod, env, node, where)
            elif (isinstance(node, ast.BinOp) and isinstance(node.op, _ARITH_OPS) and env.is_tensor(node)
                  and not isinstance(mod.parents.get(id(node)), ast.BinOp)):  # report a + b * c once
                out.append(f"{where} uses the operator `{_short(node)}` on tensors (line {line}): "
                           "that is PyTorch compute; do it in your kernel")
            elif isinstance(node, ast.AugAssign) and (env.is_tensor(node.target) or env.is_tensor(node.value)):
                out.append(f"{where} uses the operator `{_short(node)}` on tensors (line {line}): "
                           "that is PyTorch compute; do it in your kernel")
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Invert)) and env.is_tensor(node):
                out.append(f"{where} negates a tensor `{_short(node)}` (line {line}): that is PyTorch "
                           "compute; do it in your kernel")
            elif isinstance(node, ast.Compare) and any(isinstance(o, _CMP_OPS) for o in node.ops) and (
                    env.is_tensor(node.left) or any(env.is_tensor(c) for c in node.comparators)):
                out.append(f"{where} compares tensors `{_short(node)}` (line {line}): that is PyTorch "
                           "compute; do it in your kernel")
    return out


def _forward_call(mod: _Module, env: _TensorEnv, node: ast.Call, where: str) -> list[str]:
    line = node.lineno
    q = mod.qualname(node.func)
    if env.is_extension_call(node):
        return []
    if q is not None and (_banned_torch_ref(mod, node.func) or q.split(".")[0] in _BANNED_MODULES
                          or _reexported_module(q)):
        return []  # already reported by _check_banned_python
    if (isinstance(node.func, ast.Name) and node.func.id in ("sum", "max", "min", "abs", "pow", "round", "divmod")
            and node.func.id not in mod.aliases and any(env.is_tensor(a) for a in node.args)):
        return [f"{where} calls {node.func.id}() on tensors (line {line}): that is PyTorch compute; do it in "
                "your kernel"]
    if q is not None:
        rest = _torch_rest(q)
        root = q.split(".")[0]
        if rest is not None:
            if rest in _ALLOWED_TORCH_CALLS or (rest.startswith("nn.") and not rest.startswith("nn.functional.")):
                return []  # nn layers are reported by _check_nn_layers wherever they appear
            if rest.startswith("nn.functional."):
                return [f"{where} calls F.{rest[len('nn.functional.'):]} (line {line}): torch.nn.functional is "
                        "PyTorch compute; write it in your kernel"]
            return [f"{where} calls torch.{rest} (line {line}): PyTorch compute is not allowed; write it in "
                    "your kernel"]
        if root in _ALLOWED_MODULE_CALL_ROOTS or root in mod.classes or root == "__future__":
            return []
        if q.endswith("cpp_extension.load_inline"):
            return []
        # Other libraries compute only when handed tensors: reduce(operator.mul, x.shape, 1) is fine,
        # numpy.matmul(a, b) is not.
        if any(env.is_tensor(a) for a in node.args) or any(env.is_tensor(k.value) for k in node.keywords):
            return [f"{where} calls {q} on tensors (line {line}): only your compiled kernels may compute; "
                    "call them instead"]
        return []
    if isinstance(node.func, ast.Attribute):
        attr = node.func.attr
        recv_q = mod.qualname(node.func.value)
        if attr.startswith("__") and attr.endswith("__") and attr != "__init__":
            return [f"{where} calls .{attr}() (line {line}): dunder calls are not allowed; call your kernel"]
        if attr in _COMPUTE_METHODS and recv_q is None:
            return [f"{where} calls .{attr}() (line {line}): tensor methods that compute are PyTorch compute; "
                    "do it in your kernel"]
    return []


# ---------------------------------------------------------------------------------------------------
# load_inline, its sources and the C++/CUDA rules


def _kwarg(call: ast.Call, name: str, position: int) -> ast.AST | None:
    for k in call.keywords:
        if k.arg == name:
            return k.value
    if len(call.args) > position:
        return call.args[position]
    return None


def _resolve_strings(mod: _Module, node: ast.AST, depth: int) -> list | None:
    """The string pieces a source expression evaluates to, or None when it is built at run time.

    Handles literals, module variables, +, f-strings, %, .format, .join, textwrap.dedent, .strip,
    lists and tuples. ``"cudaSt" + "reamCreate"`` -> ['cudaStreamCreate'].
    """
    if depth > 12 or node is None:
        return None
    if isinstance(node, ast.Constant):
        if node.value is None:
            return []
        return [str(node.value)] if isinstance(node.value, (str, int, float)) else None
    if isinstance(node, ast.Name):
        if node.id in mod.strings:
            return _resolve_strings(mod, mod.strings[node.id], depth + 1)
        return None
    if isinstance(node, (ast.List, ast.Tuple)):
        out = []
        for e in node.elts:
            part = _resolve_strings(mod, e, depth + 1)
            if part is None:
                return None
            out += part
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _resolve_strings(mod, node.left, depth + 1), _resolve_strings(mod, node.right, depth + 1)
        if left is None or right is None:
            return None
        if len(left) == 1 and len(right) == 1:
            return [left[0] + right[0]]
        return left + right
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Sub, ast.FloorDiv, ast.Pow, ast.Mod)):
        return _fold_binop(mod, node, depth)
    if isinstance(node, ast.JoinedStr):
        text = ""
        for v in node.values:
            part = _resolve_strings(mod, v.value if isinstance(v, ast.FormattedValue) else v, depth + 1)
            if part is None:
                return None
            text += "".join(part)
        return [text]
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in ("strip", "lstrip", "rstrip", "format", "replace", "join"):
            recv = _resolve_strings(mod, f.value, depth + 1)
            args = [_resolve_strings(mod, a, depth + 1) for a in node.args]
            if recv is None or any(a is None for a in args) or len(recv) != 1:
                return None
            try:
                if f.attr == "join":
                    return [recv[0].join(args[0] if args else [])]
                if f.attr == "format":
                    kw = {k.arg: "".join(_resolve_strings(mod, k.value, depth + 1) or []) for k in node.keywords}
                    return [recv[0].format(*["".join(a) for a in args], **kw)]
                if f.attr == "replace":
                    return [recv[0].replace(*["".join(a) for a in args])]
                return [getattr(recv[0], f.attr)()]
            except (IndexError, KeyError, ValueError, TypeError, AttributeError):
                return None
        if (mod.qualname(f) or "").endswith("dedent") and node.args:
            return _resolve_strings(mod, node.args[0], depth + 1)
    return None


def _fold_binop(mod: _Module, node: ast.BinOp, depth: int) -> list | None:
    left, right = _resolve_strings(mod, node.left, depth + 1), _resolve_strings(mod, node.right, depth + 1)
    if not left or not right or len(left) != 1 or len(right) != 1:
        return None
    a, b = _num_or_str(left[0]), _num_or_str(right[0])
    try:
        if isinstance(node.op, ast.Mod) and isinstance(a, str):
            return [a % b]
        if isinstance(a, str) or isinstance(b, str):
            return None
        if isinstance(node.op, ast.Pow) and abs(b) > 64:
            return None
        value = {ast.Mult: lambda: a * b, ast.Sub: lambda: a - b, ast.FloorDiv: lambda: a // b,
                 ast.Pow: lambda: a ** b, ast.Mod: lambda: a % b}[type(node.op)]()
        return [str(value)]
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        return None


def _num_or_str(s: str):
    for cast in (int, float):
        try:
            return cast(s)
        except ValueError:
            pass
    return s


def _check_load_inline(mod: _Module, backend: str, allow_libraries: bool) -> list[str]:
    calls = mod.load_inline_calls()
    if not calls:
        return ["no load_inline call: compile your kernel with torch.utils.cpp_extension.load_inline and "
                "call it from forward"]
    out = []
    sources: list[_Source] = []
    exposed: list[str] = []
    for call in calls:
        for kind in ("cpp_sources", "cuda_sources"):
            node = _kwarg(call, kind, _LOAD_INLINE_POSITIONS[kind])
            if node is None:
                continue
            parts = _resolve_strings(mod, node, 0)
            if parts is None:
                out.append(f"{kind} of load_inline (line {call.lineno}) is built at run time: pass a string "
                           "literal or a module-level string so it can be checked")
                continue
            raw = "\n".join(parts)
            sources.append(_Source(kind, _prepare_cpp(raw), raw))
        out += _check_build_arguments(mod, call)
        for kind in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags"):
            node = _kwarg(call, kind, _LOAD_INLINE_POSITIONS[kind])
            flags = " ".join(_resolve_strings(mod, node, 0) or []) if node is not None else ""
            if _FAST_MATH.search(flags):
                out.append(f"{kind} (line {call.lineno}) enables fast math `{_FAST_MATH.search(flags).group(0)}`: "
                           "precision downgrade; remove the flag")
            lib = re.search(r"-l\s*(cublas\w*|cudnn\w*|cufft\w*|cusparse\w*|cusolver\w*|mkl\w*|openblas|blas|dnnl)", flags)
            if lib and not allow_libraries:
                out.append(f"{kind} (line {call.lineno}) links {lib.group(1)}: library kernels are not "
                           "allowed; write your own")
        fn_node = _kwarg(call, "functions", _LOAD_INLINE_POSITIONS["functions"])
        if fn_node is not None:
            names, problem = _bound_functions(mod, fn_node)
            if problem:
                out.append(f"functions of load_inline (line {call.lineno}) {problem}")
            exposed += names
    out += _check_kernel_called(mod)
    out += _check_sources(sources, exposed, backend, allow_libraries)
    return out


# Build flags a kernel may pass, word by word (torch's ninja file runs them through ``sh``, and GCC and nvcc take
# options that run programs, load plugins or read files: ``-wrapper``, ``-fplugin``, ``-B``, ``-ccbin``, ``@file``).
_MACRO_FLAG = r"-[DU][A-Za-z_]\w*(=[\w.+-]*)?"
_ALLOWED_FLAGS = {
    "extra_cflags": re.compile(
        r"-O[0-3s]?|-std=(c|gnu)\+\+\w+|-m(arch|tune)=[\w.+-]+|-m(avx\w*|sse[\w.]*|fma|f16c|bmi2?|popcnt|ssse3)"
        r"|-fopenmp(-simd)?|-f(no-)?(unroll-loops|strict-aliasing|tree-vectorize|pic|PIC|exceptions|rtti"
        r"|omit-frame-pointer|signed-char)|-w|-W(?![lpa],)[\w=+-]*|-g[0-3]?|-pthread|" + _MACRO_FLAG),
    "extra_cuda_cflags": re.compile(
        r"-O[0-3]|-std=c\+\+\w+|-arch=(sm|compute)_\w+|-gencode=arch=compute_\w+,code=\[?(sm|compute)_\w+"
        r"(,(sm|compute)_\w+)*\]?|--?expt-relaxed-constexpr|--?expt-extended-lambda|--?extended-lambda|-lineinfo"
        r"|--?ptxas-options=[\w=,.-]+|-Xptxas(=[\w=,.-]+)?|-v|--?maxrregcount=?\d*|\d+|--?resource-usage|-w|"
        + _MACRO_FLAG),
    "extra_ldflags": re.compile(r"-l\w+|-fopenmp|-pthread|-Wl,-O[0-3]|-Wl,--as-needed"),
}


def _check_build_arguments(mod: _Module, call: ast.Call) -> list[str]:
    """The extension name must be an identifier and every flag word on `_ALLOWED_FLAGS`'s list; arguments after
    ``cuda_sources`` must be passed by keyword (torch versions differ in the positions that follow: ``sycl_sources``
    came before ``functions``), none through ``*``/``**``, and ``extra_include_paths`` not at all."""
    out = []
    if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args) \
            or len(call.args) > _LOAD_INLINE_POSITIONS["cuda_sources"] + 1:
        out.append(f"load_inline (line {call.lineno}) takes ``*``/``**`` arguments or more than three positional "
                   "ones: pass each argument after cuda_sources by keyword, as literals or module-level constants, "
                   "so it can be checked")
    if any(k.arg == "extra_include_paths" for k in call.keywords):
        out.append(f"load_inline (line {call.lineno}) passes extra_include_paths: kernels include only the system's, "
                   "torch's and CUDA's headers")
    name = _kwarg(call, "name", _LOAD_INLINE_POSITIONS["name"])
    resolved = _resolve_strings(mod, name, 0) if name is not None else None
    if name is not None and (resolved is None or len(resolved) != 1 or not str(resolved[0]).isidentifier()):
        out.append(f"the name of load_inline (line {call.lineno}) must be a literal identifier (letters, digits, _)")
    for kind, allowed in _ALLOWED_FLAGS.items():
        node = _kwarg(call, kind, _LOAD_INLINE_POSITIONS[kind])
        if node is None:
            continue
        flags = _resolve_strings(mod, node, 0)
        if flags is None:
            out.append(f"{kind} of load_inline (line {call.lineno}) is built at run time: pass literal flags")
            continue
        refused = [w for f in flags for w in str(f).split() if not allowed.fullmatch(w) and not _FAST_MATH.search(w)]
        if refused:
            out.append(f"{kind} of load_inline (line {call.lineno}) passes {', '.join(map(repr, refused[:3]))}: only "
                       "optimisation, language-standard, target, OpenMP, warning and plain -D/-U macro flags are "
                       "allowed (and -l libraries at link time)")
    return out


def _bound_functions(mod: _Module, node: ast.AST) -> tuple[list[str], str | None]:
    """The names ``functions`` binds, and what is wrong with it: load_inline pastes names and docstrings into C++
    (``m.def("name", name, "doc")``), so they must be literal identifiers and plain one-line text."""
    if isinstance(node, ast.Dict):
        names, docs = [], []
        for k, v in zip(node.keys, node.values):
            key = _resolve_strings(mod, k, 0) if k is not None else None
            doc = _resolve_strings(mod, v, 0)
            if key is None or doc is None or len(key) != 1 or len(doc) != 1:
                return [], "is built at run time: pass literal names (and docstrings)"
            names.append(str(key[0]))
            docs.append(str(doc[0]))
    else:
        resolved = _resolve_strings(mod, node, 0)
        if resolved is None:
            return [], "is built at run time: pass literal names"
        names, docs = [str(x) for x in resolved], []
    if not all(n.isidentifier() for n in names):
        return [n for n in names if n.isidentifier()], "must name C++ functions (identifiers)"
    if any(re.search(r'["\\\n\r]', d) for d in docs):
        return names, "has a docstring with a quote, backslash or line break: keep docstrings plain text"
    return names, None


def _check_kernel_called(mod: _Module) -> list[str]:
    path = _forward_functions(mod)
    if not path:
        return []
    self_attrs = _tensor_self_attrs(mod)
    for fn, _owner, tensors in path:
        env = _TensorEnv(mod, tensors, self_attrs)
        if any(isinstance(n, ast.Call) and env.is_extension_call(n) for n in ast.walk(fn)):
            return []
    return ["the compiled extension is never called from forward: call your kernel in ModelNew.forward "
            "(a kernel that is compiled but not used does not count)"]


def _prepare_cpp(text: str) -> str:
    """Splice lines, strip comments (keeping line numbers), expand object-like macros and namespace aliases."""
    text = _strip_cpp_comments(_splice_lines(text))
    aliases = {}
    for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+(\S[^\n]*)$", text, re.M):
        aliases[m.group(1)] = m.group(2).strip()
    for m in re.finditer(r"\bnamespace\s+(\w+)\s*=\s*([\w:\s]+?)\s*;", text):
        aliases[m.group(1)] = m.group(2)
    if not aliases:
        return text
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(aliases, key=len, reverse=True))) + r")\b")
    body_lines = []
    for line in text.split("\n"):
        if re.match(r"^[ \t]*#[ \t]*define\b", line):
            body_lines.append(line)
        else:
            body_lines.append(pattern.sub(lambda m: aliases[m.group(1)], line))
    return "\n".join(body_lines)


LINE_END = r"\r\n|\r|\n"
"""Where GCC ends a physical line: LF, CRLF or a lone CR."""

SPLICE_BLANKS = r"[ \t\f\v\0]"
"""What GCC lets stand between a splice's backslash and its line end: spaces, tabs, form feeds, vertical tabs, NULs."""

SPLICE = re.compile(rf"\\{SPLICE_BLANKS}*(?:{LINE_END})")
"""A line splice as GCC reads one: a backslash, then blanks (a warning, no error), then a line end. The static rules
and the build's scan (`kevin.sandbox.build.split.join_splices`) both read lines through it."""


def _splice_lines(text: str) -> str:
    r"""Join each line ending in a `SPLICE` to the next, as the preprocessor does before it reads any token
    (``Py\<newline>Run_SimpleString`` is ``PyRun_SimpleString`` to the compiler). The joined lines are padded with
    empty ones, so line numbers after them still match the source.

    >>> _splice_lines("at::ma\\\nt\\  \nmul(a, b);\nx;")
    'at::matmul(a, b);\n\n\nx;'
    """
    out: list[str] = []
    pending, joined = "", 0
    text = re.sub(rf"\\{SPLICE_BLANKS}*\Z", "", text)  # a splice at the file's end: GCC reads a line end there
    pieces = re.split(f"({SPLICE.pattern}|{LINE_END})", text)  # line, its end, line, its end, ..., last line
    for line, end in zip(pieces[::2], pieces[1::2] + [""]):
        if SPLICE.fullmatch(end):
            pending += line
            joined += 1
            continue
        out.append(pending + line)
        out += [""] * joined
        pending, joined = "", 0
    return "\n".join(out)


def _strip_cpp_comments(text: str) -> str:
    """Remove // and /* */ comments outside string and char literals; newlines are kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i: j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _blank_strings(text: str) -> str:
    """Replace the contents of C++ string literals by spaces (same length, so positions still match)."""
    return re.sub(r'"(?:\\.|[^"\\\n])*"', lambda m: '"' + " " * (len(m.group(0)) - 2) + '"', text)


def _check_sources(sources: list, exposed: list, backend: str, allow_libraries: bool) -> list[str]:
    out = []
    cuda = "\n".join(s.text for s in sources if s.kind == "cuda_sources")
    cpp = "\n".join(s.text for s in sources if s.kind == "cpp_sources")
    if backend == "cuda" and not re.search(r"\b__global__\b", cuda):
        out.append("no __global__ kernel in cuda_sources: write the computation as a CUDA kernel "
                   "and launch it from a host function")
    if backend == "cpu":
        if cuda.strip():
            out.append("cuda_sources given for the cpu backend: put your C++ in cpp_sources")
        if not re.search(r"\b(for|while|do)\b", cpp):
            out.append("no loop in cpp_sources: write the computation yourself as C++ loops")
    everything = cpp + "\n" + cuda
    for name in dict.fromkeys(exposed):
        if not re.search(rf"\b{re.escape(name)}\s*\(", everything):
            out.append(f"functions lists `{name}` but the sources define no function `{name}`: define it "
                       "in cpp_sources/cuda_sources")
    for src in sources:
        out += _scan_cpp(src, allow_libraries)
    return out


def _lineno(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _scan_cpp(src: _Source, allow_libraries: bool) -> list[str]:
    out = []
    text = src.text
    code = _blank_strings(text)

    def hit(m: re.Match, what: str, why: str) -> None:
        token = re.sub(r"\s+", " ", m.group(0)).strip()
        out.append(f"{src.kind} {what} `{token}` (source line {_lineno(code, m.start())}): {why}")

    for m in _CPP_ATEN.finditer(code):
        verdict = _aten_verdict(m.group(1), [p.strip() for p in m.group(2).split("::") if p.strip()], m.group(3))
        if verdict == "compute":
            hit(m, "calls", "ATen/PyTorch compute is not allowed in C++; write it in your kernel")
        elif verdict == "thread":
            pass  # reported with the pools family's reason
        elif verdict == "dispatcher":
            hit(m, "uses", "the operator dispatcher is not allowed; write the computation yourself")
        elif verdict == "stream":
            hit(m, "uses", "extra streams are not allowed; launch on at::cuda::getCurrentCUDAStream()")
        elif verdict == "library" and not allow_libraries:
            hit(m, "uses", "library kernels are not allowed; write your own")
    for pos, method in _tensor_method_calls(code):
        out.append(f"{src.kind} calls the tensor method `.{method}(` (source line {_lineno(code, pos)}): PyTorch "
                   "compute is not allowed in C++; write it in your kernel")
    for m in _CPP_DISPATCHER.finditer(code):
        hit(m, "uses", "the operator dispatcher is not allowed; write the computation yourself")
    for m in _CPP_DISPATCH_KEYS.finditer(code):
        hit(m, "uses", "dispatch-key guards are not allowed; call your own kernels directly")
    for m in _CPP_FUNCTION_MACRO.finditer(code):
        params = [p.strip() for p in m.group(1).split(",") if p.strip()]
        if any(re.search(rf"(\b{re.escape(p)}\s*::|::\s*{re.escape(p)}\b)", m.group(2)) for p in params):
            hit(m, "defines", "a macro that builds qualified names hides what is called; write names out in full")
    for m in _CPP_USING.finditer(code):
        if m.group(4) and _aten_verdict(m.group(3), [], m.group(4)) == "ok":
            continue  # using torch::Tensor;
        hit(m, "has", "`using` torch/ATen names hides what is called; qualify names (torch::empty)")
    if not allow_libraries:
        for m in _CPP_LIBRARIES.finditer(text):  # with strings: #include "cublas_v2.h"
            hit(m, "uses", "library kernels are not allowed; write your own (allow_libraries is off)")
    for family, pattern in _CPP_FORBIDDEN:
        for m in pattern.finditer(text if family.in_strings else code):  # with strings: _Pragma("omp task")
            hit(m, "uses", family.reason)
    for m in _CPP_TRIGRAPH.finditer(src.raw):
        hit(m, "has the trigraph", "trigraphs change what the compiler reads; write the character itself")
    if _CPP_USING_STD.search(code):
        for family, pattern in _CPP_UNQUALIFIED_STD:
            for m in pattern.finditer(code):
                hit(m, "uses", family.reason)
    for m in _CPP_PRECISION.finditer(code):
        hit(m, "uses", "half/bfloat16/tf32 is a precision downgrade; compute in float32")
    for m in _CPP_PTX_PRECISION.finditer(text):  # with strings: inline PTX
        hit(m, "uses", "half/bfloat16/tf32 is a precision downgrade; compute in float32")
    for m in _CPP_SYSCALL_TEXT.finditer(text):
        hit(m, "uses", "system calls are not allowed; use only your inputs")
    for m in _CPP_EXTERN_C.finditer(text):
        hit(m, "uses", "C linkage declarations are not allowed; call only what the headers declare")
    for m in _CPP_OWN_NAMESPACE.finditer(code):
        hit(m, "opens", "code in PyTorch's namespaces is not allowed (it reaches ATen without a qualifier); "
                        "use your own namespace")
    for m in _CPP_ATEN_INTERNALS.finditer(text):  # with strings: #include "ATen/ops/addmm_cpu_dispatch.h"
        hit(m, "includes", "ATen's per-backend kernels and internals are ATen compute; write it in your kernel")
    for m in _CPP_COMPUTED_INCLUDE.finditer(text):
        hit(m, "has", "an #include must name its header in <> or quotes")
    for m in _CPP_LOAD_TIME.finditer(code):
        hit(m, "uses", "operator registration, load-time constructors and digraphs are not allowed; write plain "
                       "kernels")
    for m in _CPP_MACRO_QUALIFIER.finditer(code):
        hit(m, "qualifies a name through", "a macro call before `::` hides what is called; write names out in full")
    for m in _CPP_PYTHON.finditer(code):
        hit(m, "uses", "Python objects, frames and modules are not reachable from C++; use only your inputs")
    for m in re.finditer(r"##", code):
        hit(m, "uses token pasting", "`##` hides names from checks; write names out in full")
    for m in _FAST_MATH.finditer(text):  # with strings: #pragma GCC optimize("fast-math")
        hit(m, "enables", "fast math is a precision downgrade; remove it")
    for start, body, tensors in _host_functions(code, _tensor_functions(code)):
        lines_seen = set()
        for m in sorted(_tensor_operator_matches(body, tensors), key=lambda m: m.start()):
            line = _lineno(code, start + m.start())
            if line in lines_seen:
                continue  # a + b matches as left and right operand; report the line once
            lines_seen.add(line)
            out.append(f"{src.kind} applies `{m.group(0).strip()}` to a tensor in host code (source line {line}): "
                       "tensor operators are ATen compute; do it in your kernel")
    return out


_CPP_TENSOR_DECL = re.compile(r"\bTensor\s*(?:&|\*)?\s*(\w+)\s*(?=[,)=;{]|$)")
_CPP_AUTO_DECL = re.compile(r"\bauto\s*&?\s*(\w+)\s*=\s*([^;]+);")
_CPP_ALLOCATORS = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
                   "full_like", "from_blob", "arange"}
_CPP_NON_TENSOR_METHODS = {
    "size", "sizes", "numel", "dim", "stride", "strides", "data_ptr", "const_data_ptr", "mutable_data_ptr",
    "item", "scalar_type", "dtype", "device", "options", "is_contiguous", "is_cuda", "element_size",
    "accessor", "packed_accessor32", "packed_accessor64", "get_device", "nbytes", "storage_offset",
    "defined", "ndimension",
}


def _host_functions(code: str, tensor_fns: frozenset = frozenset()) -> list:
    """(body offset, body, tensor variable names) for each host (not __global__/__device__) function.

    Tensor variables: parameters and locals declared ``Tensor``, and ``auto`` locals initialised from an
    allocator (``torch::empty_like``) or a layout method of another tensor (``x.contiguous()``).
    """
    found = []
    depth, boundary, i = 0, 0, 0
    open_at = None
    while i < len(code):
        c = code[i]
        if c == "{":
            if depth == 0:
                open_at = i
            depth += 1
        elif c == "}":
            depth = max(depth - 1, 0)
            if depth == 0 and open_at is not None:
                signature, body = code[boundary:open_at], code[open_at + 1: i]
                if re.search(r"\bnamespace\b", signature):
                    found += [(open_at + 1 + s, b, t) for s, b, t in _host_functions(body, tensor_fns)]
                elif "(" in signature and not re.search(r"__global__|__device__", signature):
                    params = signature[signature.find("("): signature.rfind(")") + 1]
                    found.append((open_at + 1, body, _tensor_names(params, body, tensor_fns)))
                boundary, open_at = i + 1, None
        elif c == ";" and depth == 0:
            boundary = i + 1
        i += 1
    return found


def _tensor_names(params: str, body: str, tensor_fns: frozenset = frozenset()) -> set:
    """Names of tensors (and of containers of tensors, whose elements are tensors) in one host function."""
    decls = params + "\n" + body
    names = {m.group(1) for m in _CPP_TENSOR_DECL.finditer(decls)}
    names |= {m.group(1) for m in _CPP_TENSOR_CONTAINER.finditer(decls)}
    for _ in range(3):
        for m in _CPP_AUTO_DECL.finditer(body):
            rhs = m.group(2).strip()
            alloc = re.match(r"(?:torch|at)\s*::\s*(\w+)", rhs)
            method = re.match(r"(\w+)\s*(?:\[[^\]]*\]\s*)?\.\s*(\w+)", rhs)
            call = re.match(r"(\w+)\s*\(", rhs)
            if (alloc and alloc.group(1) in _CPP_ALLOCATORS) or (call and call.group(1) in tensor_fns) or (
                    method and method.group(1) in names and method.group(2) not in _CPP_NON_TENSOR_METHODS):
                names.add(m.group(1))
        for m in _CPP_RANGE_FOR.finditer(body):  # for (auto& t : tensors), for (auto t : std::vector<Tensor>{a, b})
            header = body[m.end(): _balanced_end(body, m.start(1)) - 1]
            if re.search(r"\bTensor\b", header) or set(re.findall(r"\w+", header)) & names:
                names.add(m.group(2))
    return names - {"const"}


_CPP_TENSOR_CONTAINER = re.compile(
    r"\b(?:TensorList|ITensorListRef|(?:std\s*::\s*)?(?:vector|array|optional|tuple|pair|initializer_list)\s*<"
    r"[^;{}()]*?\bTensor\b[^;{}()]*?>)\s*(?:const\s*)?[&*]?\s*(\w+)\s*(?=[,)=;{\[]|$)")
_CPP_RANGE_FOR = re.compile(r"\bfor\s*(\()\s*(?:const\s+)?(?:auto|(?:\w+\s*::\s*)*Tensor)\s*&{0,2}\s*(\w+)\s*:(?!:)")
_CPP_TENSOR_FN = re.compile(r"\bTensor\s*&?\s+(\w+)\s*\(")


def _tensor_functions(code: str) -> frozenset:
    """The source's own functions that return a tensor (``torch::Tensor scale(...)``)."""
    return frozenset(m.group(1) for m in _CPP_TENSOR_FN.finditer(code))


def _balanced_end(code: str, i: int) -> int:
    """Index just past the bracket group opening at ``code[i]`` (``(``/``[``/``<``), or len(code)."""
    pairs = {"(": ")", "[": "]", "<": ">"}
    opener, closer, depth = code[i], pairs[code[i]], 0
    for j in range(i, len(code)):
        if code[j] == opener:
            depth += 1
        elif code[j] == closer:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(code)


def _method_chain(code: str, i: int) -> list:
    """(position, name) of each ``.name(...)``/``->name(...)`` call chained from index ``i`` (after a receiver)."""
    found = []
    while True:
        m = re.compile(r"\s*(?:\[|(?:\.|->)\s*(\w+)\s*(?:<[^<>;{}()]*>\s*)?\()").match(code, i)
        if not m:
            return found
        if m.group(1) is None:  # v[0].sum(): an element of a container of tensors
            i = _balanced_end(code, m.end() - 1)
            continue
        found.append((m.start(1), m.group(1)))
        i = _balanced_end(code, m.end() - 1)


def _tensor_method_calls(code: str) -> list:
    """(position, method) of compute methods called on a tensor: a tensor variable of a host function, a tensor
    factory's result (``torch::ones(..)``) or a tensor-returning function of the source, and what chains from them
    (``x.contiguous().sum()``). Only tensors: ``at::vec::Vectorized<float>`` and a user's own structs have
    ``.exp()``, ``.max()`` and ``.sum()`` methods too, and those are honest kernel code."""
    tensor_fns = _tensor_functions(code)
    receivers = [(0, code, r"(?:torch|at)\s*::\s*\w+\s*(?=\()")]
    if tensor_fns:
        receivers.append((0, code, r"(?<![\w.>:])(?:" + "|".join(map(re.escape, sorted(tensor_fns))) + r")\s*(?=\()"))
    for start, body, tensors in _host_functions(code, tensor_fns):
        if tensors:
            alt = "|".join(map(re.escape, sorted(tensors, key=len, reverse=True)))
            receivers.append((start, body, rf"(?<![\w.>:])(?:{alt})\b"))
    found = {}
    for start, text, pattern in receivers:
        for m in re.finditer(pattern, text):
            i = _balanced_end(text, m.end()) if text.startswith("(", m.end()) else m.end()
            for pos, name in _method_chain(text, i):
                if name in _CPP_COMPUTE_METHODS:
                    found[start + pos] = name
    return sorted(found.items())


def _tensor_operator_matches(body: str, tensors: set) -> list:
    """Arithmetic with a tensor variable as a direct operand: ``a + b``, ``out *= 2``, ``x / n``."""
    if not tensors:
        return []
    alt = "|".join(map(re.escape, sorted(tensors, key=len, reverse=True)))
    left = re.compile(rf"(?<![\w.>:])({alt})\s*([-+*/%]=?)(?![-+>*/=])\s*[\w(]+")
    right = re.compile(rf"(?<![-+<>=!&|*/%])([-+*/%])\s*({alt})\b(?!\s*(?:\.|->|\[|\(|::))")
    return [m for m in list(left.finditer(body)) + list(right.finditer(body))
            if not re.match(r"\s*[-+*/%]\s*$", m.group(0))]


def _aten_verdict(root: str, path: list, name: str) -> str:
    """'ok', 'compute', 'dispatcher', 'stream' or 'library' for root::path::name in C++."""
    full = path + [name]
    if _CPP_POOL_NAMES.fullmatch(name):
        return "thread"
    if _CPP_STREAM_NAMES.fullmatch(name):
        return "stream"
    if name in _CPP_CUDA_HANDLES:
        return "library"
    if any(p in ("blas", "cpublas") for p in full):
        return "library"
    if "_ops" in full:
        return "dispatcher"  # Dispatcher/findSchemaOrThrow themselves are matched by _CPP_DISPATCHER
    if any(p in _CPP_FORBIDDEN_NAMESPACES for p in path):
        return "compute"
    if root == "c10":
        return "dispatcher" if "impl" in path else "ok"  # c10 holds types, guards and streams
    if path:
        return "ok" if path[0] in _CPP_ALLOWED_NAMESPACES or path[0] in _CPP_ALLOWED_ROOT_NAMES else "compute"
    if name in _CPP_ALLOWED_ROOT_NAMES or re.fullmatch(r"k[A-Z]\w*", name):
        return "ok"
    return "compute"
