"""check_format: honest candidates pass, and one candidate per attack of docs/threat-model.md is rejected.

Every attack is built from the honest element-wise-add candidate by changing one thing, so a rejection
can only come from that change. Assertions look for the offending name in the messages.
"""

import textwrap

import pytest

from kevin.sandbox.static.source import check_format, check_rules

CUDA_SRC = r'''
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// a + b, one thread per element
__global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b,
                           float* __restrict__ out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

torch::Tensor add_forward(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "inputs must be CUDA tensors");
    auto a_c = a.contiguous();
    auto b_c = b.contiguous();
    auto out = torch::empty_like(a_c);
    const int64_t n = a_c.numel();
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    add_kernel<<<blocks, threads, 0, stream>>>(a_c.data_ptr<float>(), b_c.data_ptr<float>(),
                                               out.data_ptr<float>(), n);
    /*EXTRA_CUDA*/
    return out;
}
'''


def cuda_candidate(*, forward="return self.ext.add_forward(a, b)", head="", tail="", cuda_extra="",
                   base="nn.Module", load_kwargs="", init=""):
    """The honest element-wise-add candidate, with one piece swapped for an attack."""
    src = CUDA_SRC.replace("/*EXTRA_CUDA*/", cuda_extra)
    forward = textwrap.indent(textwrap.dedent(forward), " " * 8).lstrip()
    init = textwrap.indent(textwrap.dedent(init), " " * 8).lstrip()
    return f'''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
{head}
cuda_source = r"""{src}"""

cpp_source = "torch::Tensor add_forward(torch::Tensor a, torch::Tensor b);"

add_ext = load_inline(
    name="add_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["add_forward"],{load_kwargs}
    verbose=False,
)


class ModelNew({base}):
    def __init__(self) -> None:
        super().__init__()
        self.ext = add_ext
        {init}

    def forward(self, a, b):
        {forward}
{tail}'''


CPU_CANDIDATE = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
    auto x_c = x.contiguous();
    auto out = torch::empty_like(x_c);
    const float* px = x_c.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < x_c.numel(); ++i) {
        po[i] = px[i] > 0.0f ? px[i] : 0.0f;
    }
    return out;
}
"""

relu_ext = load_inline(name="relu_cpu", cpp_sources=cpp_source, functions=["relu_forward"],
                       extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_ext.relu_forward(x)
'''

LINEAR_CANDIDATE = '''\
import math
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = """
#include <torch/extension.h>
__global__ void linear_kernel(const float* x, const float* w, const float* b, float* y,
                              int n, int k, int m) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n && col < m) {
        float acc = b[col];
        for (int i = 0; i < k; ++i) acc += x[row * k + i] * w[col * k + i];
        y[row * m + col] = acc;
    }
}
torch::Tensor linear_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    int n = x.size(0), k = x.size(1), m = w.size(0);
    auto y = torch::empty({n, m}, x.options());
    dim3 block(16, 16);
    dim3 grid((m + 15) / 16, (n + 15) / 16);
    linear_kernel<<<grid, block>>>(x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(),
                                   y.data_ptr<float>(), n, k, m);
    return y;
}
"""
cpp_src = "torch::Tensor linear_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b);"
linear = load_inline("linear_ext", cpp_src, cuda_src, functions=["linear_forward"])


class ModelNew(nn.Module):
    """Same parameters, same order, same initialisers as nn.Linear, so seeded weights match."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        batch = x.shape[0]
        x2 = x.contiguous().view(batch, -1)
        return linear.linear_forward(x2, self.weight, self.bias)
'''


def has(violations, *needles):
    """True when one message contains every needle."""
    return any(all(n in v for n in needles) for v in violations)


# --- honest candidates --------------------------------------------------------------------------------


def test_accepts_honest_cuda_elementwise_add():
    assert check_format(cuda_candidate()) == []


def test_accepts_honest_cpu_loop_with_cpu_backend():
    assert check_format(CPU_CANDIDATE, backend="cpu") == []


def test_accepts_parameters_initialised_with_nn_init_like_linear():
    assert check_format(LINEAR_CANDIDATE) == []


def test_unknown_backend_raises():
    with pytest.raises(ValueError, match="unknown backend"):
        check_format(cuda_candidate(), backend="tpu")


def test_cpu_candidate_fails_cuda_backend_for_want_of_a_global_kernel():
    assert has(check_format(CPU_CANDIDATE, backend="cuda"), "__global__")


def test_rejects_missing_model_new():
    assert has(check_format(cuda_candidate().replace("ModelNew", "Fast")), "ModelNew")


def test_rejects_syntax_error():
    assert has(check_format("class ModelNew(:\n"), "syntax error (line 1)")


# --- false-positive guards --------------------------------------------------------------------------


def test_word_pass_in_string_and_comment_is_allowed():
    src = cuda_candidate(forward='''
        # this pass bypasses nothing; it passes a and b to the kernel
        note = "pass"
        return self.ext.add_forward(a, b)''')
    assert check_format(src) == []


def test_try_inside_cuda_source_comment_is_allowed():
    src = cuda_candidate(cuda_extra="// try: we could except a fallback here, but we don't (pass)")
    assert check_format(src) == []


def test_integer_size_arithmetic_in_forward_is_allowed():
    src = cuda_candidate(forward='''
        n = a.numel()
        blocks = (n + 255) // 256
        total = n * 4 + a.size(0) - b.shape[0]
        assert a.dim() == b.dim() and blocks >= 0 and total >= 0
        return self.ext.add_forward(a, b)''')
    assert check_format(src) == []


def test_contiguous_view_layout_helpers_are_allowed():
    src = cuda_candidate(forward='''
        flat_a = a.contiguous().view(-1)
        flat_b = b.contiguous().reshape(-1)
        out = self.ext.add_forward(flat_a, flat_b)
        return out.view(a.shape)''')
    assert check_format(src) == []


# --- A1: reference ops in Python --------------------------------------------------------------------


def test_rejects_forward_calling_torch_matmul():
    v = check_format(cuda_candidate(forward="return torch.matmul(a, b)"))
    assert has(v, "torch.matmul", "line")


def test_rejects_forward_calling_functional_relu():
    v = check_format(cuda_candidate(head="import torch.nn.functional as F",
                                    forward="return F.relu(self.ext.add_forward(a, b))"))
    assert has(v, "F.relu")


def test_rejects_torch_nn_layer_module():
    v = check_format(cuda_candidate(init="self.proj = nn.Linear(4, 4)"))
    assert has(v, "torch.nn.Linear")


def test_rejects_tensor_method_compute_in_forward():
    v = check_format(cuda_candidate(forward="return self.ext.add_forward(a, b).sum(dim=0)"))
    assert has(v, ".sum()")


def test_rejects_tensor_operator_in_forward():
    v = check_format(cuda_candidate(forward="return self.ext.add_forward(a, b) * 2"))
    assert has(v, "operator", "* 2")


def test_rejects_torch_compute_in_a_helper_called_from_forward():
    v = check_format(cuda_candidate(forward="return self.ext.add_forward(_mix(a, b), b)",
                                    tail="\n\ndef _mix(x, y):\n    return x @ y\n"))
    assert has(v, "_mix", "x @ y")


# --- A2: library or ATen calls in C++ ---------------------------------------------------------------


def test_rejects_cpp_calling_at_matmul():
    v = check_format(cuda_candidate(cuda_extra="out = at::matmul(a, b);"))
    assert has(v, "at::matmul", "cuda_sources")


def test_rejects_cpp_tensor_method_mm():
    v = check_format(cuda_candidate(cuda_extra="out = a.mm(b);"))
    assert has(v, ".mm(")


def test_rejects_cpp_dispatcher_call():
    extra = 'auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mm", "");'
    assert has(check_format(cuda_candidate(cuda_extra=extra)), "Dispatcher")


def test_rejects_cublas_unless_libraries_allowed():
    extra = "cublasHandle_t h; cublasCreate(&h);"
    assert has(check_format(cuda_candidate(cuda_extra=extra)), "cublasCreate")
    assert check_format(cuda_candidate(cuda_extra=extra), allow_libraries=True) == []


def test_rejects_define_alias_of_torch_namespace():
    extra = "\n#define NS torch\nout = NS::matmul(a, b);"
    assert has(check_format(cuda_candidate(cuda_extra=extra)), "torch::matmul")


# --- A3: try/except fallback ------------------------------------------------------------------------


def test_rejects_try_except_fallback():
    v = check_format(cuda_candidate(forward='''
        try:
            return self.ext.add_forward(a, b)
        except RuntimeError:
            return a + b'''))
    assert has(v, "try/except")


def test_a_try_except_fallback_is_named_by_its_rule_family_and_its_pytorch_fallback_by_another():
    src = cuda_candidate(forward='''
        try:
            return self.ext.add_forward(a, b)
        except RuntimeError:
            return a + b''')
    found = check_rules(src)
    assert {family for family, _ in found} == {"fallbacks", "forward_path"}, found  # the try block; `a + b` on tensors
    assert [message for _, message in found] == check_format(src)


def test_rejects_contextlib_suppress():
    v = check_format(cuda_candidate(head="import contextlib", forward='''
        with contextlib.suppress(Exception):
            return self.ext.add_forward(a, b)'''))
    assert has(v, "contextlib.suppress")


# --- A4: inherit or delegate ------------------------------------------------------------------------


def test_rejects_pass_subclass_of_model():
    src = "import torch.nn as nn\nfrom reference import Model\n\nclass ModelNew(Model):\n    pass\n"
    v = check_format(src)
    assert has(v, "`Model`") and has(v, "only `pass`")


def test_rejects_instantiating_model():
    v = check_format(cuda_candidate(init="self.ref = Model()", forward="return self.ref(a, b)"))
    assert has(v, "`Model`")


def test_rejects_super_forward():
    v = check_format(cuda_candidate(forward="return super().forward(a, b)"))
    assert has(v, "super().forward")


# --- A5: decoy kernel -------------------------------------------------------------------------------


def test_rejects_decoy_kernel_never_called():
    v = check_format(cuda_candidate(forward="return torch.add(a, b)"))
    assert has(v, "never called from forward")


def test_rejects_exposed_function_that_is_not_defined():
    src = cuda_candidate().replace('functions=["add_forward"]', 'functions=["add_forward", "mul_forward"]')
    assert has(check_format(src), "mul_forward")


# --- B6: precision downgrade ------------------------------------------------------------------------


def test_rejects_half_precision_in_forward():
    v = check_format(cuda_candidate(forward="return self.ext.add_forward(a.half(), b.half())"))
    assert has(v, ".half()", "precision")


def test_rejects_fast_math_flag():
    v = check_format(cuda_candidate(load_kwargs='\n    extra_cuda_cflags=["-O3", "--use_fast_math"],'))
    assert has(v, "extra_cuda_cflags", "fast math")


# --- the build's own arguments: what load_inline pastes into C++ or hands to the shell -----------------


def test_a_docstring_that_closes_its_string_to_add_bindings_is_refused():
    # load_inline writes m.def("name", name, "<doc>"): this doc ends the string and binds ATen's matmul as "g"
    src = cuda_candidate().replace('functions=["add_forward"]',
                                   """functions={"add_forward": 'x"); m.def("g", &at::matmul); //'}""")
    assert has(check_format(src), "functions", "docstring")


def test_a_plain_docstring_is_accepted():
    assert check_format(cuda_candidate().replace('functions=["add_forward"]',
                                                 'functions={"add_forward": "adds a and b"}')) == []


def test_a_compiler_wrapper_flag_that_runs_a_program_is_refused():
    v = check_format(cuda_candidate(load_kwargs='\n    extra_cflags=["-O3", "-wrapper", "/bin/sh,-c,sleep 1000,--"],'))
    assert has(v, "extra_cflags", "'-wrapper'")


def test_a_function_like_macro_flag_that_hides_code_from_the_scan_is_refused():
    v = check_format(cuda_candidate(load_kwargs='\n    extra_cflags=["-DQ(a)=at::matmul(a,a)"],'))
    assert has(v, "extra_cflags", "-DQ(a)")


def test_a_shell_substitution_in_a_flag_is_refused():
    # torch's ninja file runs the flags through sh
    v = check_format(cuda_candidate(load_kwargs='\n    extra_cuda_cflags=["-DX=$(touch /tmp/x)"],'))
    assert has(v, "extra_cuda_cflags")


def test_flags_built_at_run_time_are_refused():
    v = check_format(cuda_candidate(head="import os", load_kwargs='\n    extra_cflags=[os.environ["F"]],'))
    assert has(v, "extra_cflags", "built at run time")


def test_arguments_passed_through_a_double_star_dict_are_refused():
    v = check_format(cuda_candidate(head='OPTS = {"extra_cflags": ["-wrapper"]}', load_kwargs="\n    **OPTS,"))
    assert has(v, "by keyword")


def test_flags_passed_in_a_position_that_differs_between_torch_versions_are_refused():
    # torch 2.13: name, cpp_sources, cuda_sources, sycl_sources, functions, extra_cflags (older: no sycl_sources)
    src = cuda_candidate().replace('    name="add_ext",\n    cpp_sources=cpp_source,\n    cuda_sources=cuda_source,\n'
                                   '    functions=["add_forward"],',
                                   '    "add_ext", cpp_source, cuda_source, None, ["add_forward"], ["-wrapper"],')
    assert '["-wrapper"]' in src
    assert has(check_format(src), "by keyword")


def test_the_usual_optimisation_target_openmp_and_macro_flags_are_accepted():
    kwargs = ('\n    extra_cflags=["-O3", "-march=native", "-fopenmp", "-DTILE=16", "-Wall"],'
              '\n    extra_cuda_cflags=["-O3", "-arch=sm_90", "--expt-relaxed-constexpr", "-lineinfo"],'
              '\n    extra_ldflags=["-fopenmp"],')
    assert check_format(cuda_candidate(load_kwargs=kwargs)) == []


# --- C2: global numerics flags ----------------------------------------------------------------------


def test_rejects_allow_tf32_flag():
    v = check_format(cuda_candidate(head="torch.backends.cuda.matmul.allow_tf32 = True"))
    assert has(v, "torch.backends.cuda.matmul.allow_tf32")


def test_rejects_set_float32_matmul_precision():
    v = check_format(cuda_candidate(head='torch.set_float32_matmul_precision("medium")'))
    assert has(v, "set_float32_matmul_precision")


# --- C3: subverting the comparison ------------------------------------------------------------------


def test_rejects_allclose_monkeypatch():
    v = check_format(cuda_candidate(head="torch.allclose = lambda *args, **kwargs: True"))
    assert has(v, "torch.allclose", "patching")


def test_rejects_tensor_subclass():
    v = check_format(cuda_candidate(tail='''

class Lazy(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return True
'''))
    assert has(v, "subclasses torch.Tensor") and has(v, "__torch_function__")


# --- D1: side streams -------------------------------------------------------------------------------


def test_rejects_python_side_stream():
    v = check_format(cuda_candidate(forward='''
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            return self.ext.add_forward(a, b)'''))
    assert has(v, "torch.cuda.Stream") and has(v, "torch.cuda.stream")


def test_rejects_cpp_stream_creation():
    extra = "cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);"
    assert has(check_format(cuda_candidate(cuda_extra=extra)), "cudaStreamCreateWithFlags")


def test_rejects_a_driver_api_stream():
    # cuStreamCreate through libcuda: the runtime's name is not the only way to a second stream
    extra = "CUstream s; cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);"
    assert has(check_format(cuda_candidate(cuda_extra=extra)), "cuStreamCreate")


def test_rejects_a_host_function_queued_on_a_stream():
    extra = "static void CUDART_CB spin(void*) {}\nvoid later() { cudaLaunchHostFunc(0, spin, nullptr); }"
    assert has(check_format(cuda_candidate(cuda_extra=extra)), "cudaLaunchHostFunc")


def test_rejects_a_per_thread_host_callback_declared_by_hand():
    extra = 'extern "C" int cuLaunchHostFunc_ptsz(void*, void (*)(void*), void*);'
    assert has(check_format(cuda_candidate(cuda_extra=extra)), "cuLaunchHostFunc_ptsz")


def test_rejects_a_driver_entry_point_lookup():
    extra = "void* f; cudaGetDriverEntryPoint(\"cuStreamCreate\", &f, 0);"
    assert has(check_format(cuda_candidate(cuda_extra=extra)), "cudaGetDriverEntryPoint")


def test_rejects_stream_name_split_across_python_strings():
    # "cudaSt" + "reamCreate" is folded before the C++ scan
    src = cuda_candidate().replace('cuda_sources=cuda_source,',
                                   'cuda_sources=cuda_source + "void f(){ cudaSt" + "reamCreate(0); }",')
    assert has(check_format(src), "cudaStreamCreate")


# --- D2: background threads -------------------------------------------------------------------------


def test_rejects_thread_launch():
    v = check_format(cuda_candidate(head="import threading", forward='''
        out = torch.empty_like(a)
        threading.Thread(target=self.ext.add_forward, args=(a, b)).start()
        return out'''))
    assert has(v, "imports threading")


# --- D6: timer forgery ------------------------------------------------------------------------------


def test_rejects_timer_patch():
    v = check_format(cuda_candidate(head="torch.cuda.Event.elapsed_time = lambda self, end: 0.001"))
    assert has(v, "torch.cuda.Event.elapsed_time")


def test_rejects_time_module_patch():
    v = check_format(cuda_candidate(head="import time\ntime.perf_counter = lambda: 0.0"))
    assert has(v, "imports time") and has(v, "time.perf_counter", "patching")


# --- D7: L2 persistence -----------------------------------------------------------------------------


def test_rejects_l2_persistence_window():
    extra = ("cudaStreamAttrValue attr; attr.accessPolicyWindow.num_bytes = 1 << 20;\n"
             "cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &attr);")
    v = check_format(cuda_candidate(cuda_extra=extra))
    assert has(v, "accessPolicyWindow", "L2")


# --- E4 / B7: evading the checks, reading the harness -----------------------------------------------


def test_rejects_exec_of_base64_payload():
    v = check_format(cuda_candidate(head='import base64\nexec(base64.b64decode("cHJpbnQoMSk="))'))
    assert has(v, "imports base64") and has(v, "exec()")


def test_rejects_getattr_on_torch_with_built_name():
    v = check_format(cuda_candidate(forward='return getattr(torch, "mat" + "mul")(a, b)'))
    assert has(v, "getattr(torch")


def test_rejects_token_pasting_in_cuda():
    extra = "\n#define MAKE(x) cudaSt##x\ncudaStream_t s; MAKE(reamCreate)(&s);"
    assert has(check_format(cuda_candidate(cuda_extra=extra)), "token pasting")


def test_rejects_frame_walking():
    v = check_format(cuda_candidate(head="import sys",
                                    forward='return sys._getframe(2).f_locals["output"]'))
    assert has(v, "sys._getframe")


def test_rejects_gc_object_scan():
    v = check_format(cuda_candidate(head="import gc", forward='''
        for obj in gc.get_objects():
            pass
        return self.ext.add_forward(a, b)'''))
    assert has(v, "imports gc")


# --- aliasing and indirection -----------------------------------------------------------------------


def test_rejects_torch_function_stored_on_self_and_called_in_forward():
    v = check_format(cuda_candidate(init="self.mm = torch.matmul", forward="return self.mm(a, b)"))
    assert has(v, "torch.matmul")


def test_rejects_module_level_lambda_called_from_forward():
    v = check_format(cuda_candidate(head="mix = lambda x, y: x * y", forward="return mix(a, b)"))
    assert has(v, "x * y")


def test_rejects_builtin_sum_over_tensors():
    v = check_format(cuda_candidate(forward="return sum([self.ext.add_forward(a, b), a])"))
    assert has(v, "sum() on tensors")


def test_rejects_compute_inside_local_block_held_in_module_list():
    v = check_format(cuda_candidate(
        init="self.blocks = nn.ModuleList([Block() for _ in range(2)])",
        forward='''
        out = self.ext.add_forward(a, b)
        for blk in self.blocks:
            out = blk(out)
        return out''',
        tail="\n\nclass Block(nn.Module):\n    def forward(self, x):\n        return x.exp()\n"))
    assert has(v, "forward path (forward)", ".exp()")


def test_accepts_honest_autograd_function_and_local_block():
    src = cuda_candidate(
        init="self.block = Block()",
        forward="return self.block(AddFn.apply(a, b))",
        tail='''

class AddFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return add_ext.add_forward(x.contiguous(), y.contiguous())


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x):
        n = x.numel()
        if n == 0:
            return x
        return add_ext.add_forward(x, x.view(-1).view(x.shape))
''')
    assert check_format(src) == []


def test_scalar_forward_argument_arithmetic_is_allowed():
    src = cuda_candidate(forward="return self.ext.add_forward(a, b)").replace(
        "def forward(self, a, b):", "def forward(self, a, b, repeats: int = 1):").replace(
        "return self.ext.add_forward(a, b)\n", "n = repeats * 2\n        return self.ext.add_forward(a, b)\n")
    assert "repeats * 2" in src
    assert check_format(src) == []


@pytest.mark.parametrize("backend", ["cuda", "cpu"])
def test_accepts_the_prompt_examples(backend):
    from kevin.data.prompts import example_for

    assert check_format(example_for(backend), backend=backend) == []


def test_rejects_compute_in_a_helper_given_a_local_tensor():
    v = check_format(cuda_candidate(forward="y = self.ext.add_forward(a, b)\nreturn _scale(y)",
                                    tail="\n\ndef _scale(t):\n    return t * 2\n"))
    assert has(v, "_scale", "t * 2")


# --- more spellings of the same hacks; each must be caught, by the named token ------------------------

VARIANTS = {
    "ghost branch tensor method": (dict(forward="return self.ext.add_forward(a, b) if a.shape[0] % 1024 == 3 "
                                        "else a.add(b)"), ".add()"),
    "torch.ops.aten": (dict(forward="return torch.ops.aten.mm(a, b)"), "torch.ops.aten.mm"),
    "dunder matmul": (dict(forward="return a.__matmul__(b)"), "__matmul__"),
    "at::_ops": (dict(cuda_extra="out = at::_ops::mm::call(a, b);"), "at::_ops::mm::call"),
    "using namespace at": (dict(cuda_extra="using namespace at;\nout = mm(a, b);"), "using namespace at"),
    "import torch as T": (dict(head="import torch as T", forward="return T.matmul(a, b)"), "torch.matmul"),
    "from torch import matmul": (dict(head="from torch import matmul", forward="return matmul(a, b)"),
                                 "torch.matmul"),
    "setattr on torch": (dict(head='setattr(torch, "allclose", lambda *a, **k: True)'), "setattr(torch"),
    "Tensor.__eq__ patch": (dict(head="torch.Tensor.__eq__ = lambda s, o: True"), "torch.Tensor.__eq__"),
    "__import__": (dict(head='th = __import__("threading")'), "__import__"),
    "importlib": (dict(head='import importlib'), "importlib"),
    "ModelNew.forward patched later": (dict(tail="\nModelNew.forward = lambda self, a, b: a + b\n"),
                                       "ModelNew.forward"),
    "CUDA graph": (dict(forward="g = torch.cuda.CUDAGraph()\nreturn self.ext.add_forward(a, b)"),
                   "torch.cuda.CUDAGraph"),
    "bfloat16 cast": (dict(forward="return self.ext.add_forward(a.to(torch.bfloat16), b)"), "torch.bfloat16"),
    "autocast": (dict(forward="with torch.autocast('cuda'):\n    return self.ext.add_forward(a, b)"),
                 "torch.autocast"),
    "bf16 in CUDA": (dict(cuda_extra="__nv_bfloat16 h = __float2bfloat16(1.0f);"), "__nv_bfloat16"),
    "fast-math pragma": (dict(cuda_extra='\n#pragma GCC optimize("fast-math")\n'), "fast-math"),
    "numpy compute": (dict(head="import numpy as np", forward="return np.matmul(a, b)"), "imports numpy"),
    "eval of built name": (dict(forward='return eval("torch.mat" + "mul")(a, b)'), "eval()"),
    "persisting L2 limit": (dict(cuda_extra="cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 1 << 20);"),
                            "cudaLimitPersistingL2CacheSize"),
    "torch.compile": (dict(init="self.f = torch.compile(lambda x, y: x + y)", forward="return self.f(a, b)"),
                      "torch.compile"),
    "sys.modules": (dict(head="import sys\nsys.modules['torch'].allclose = print"), "sys.modules"),
    "type() tensor subclass": (dict(head='Fake = type("Fake", (torch.Tensor,), {})'), "type(name, bases"),
    "__class__ swap": (dict(forward="out = self.ext.add_forward(a, b)\nout.__class__ = dict\nreturn out"),
                       "__class__"),
    "os.system": (dict(head='import os\nos.system("pip install x")'), "os.system"),
    "std::thread": (dict(cuda_extra="std::thread t([]{}); t.detach();"), "std::thread"),
    "dlopen": (dict(cuda_extra='void* h = dlopen("libcublas.so", 1);'), "dlopen"),
    "getStreamFromPool": (dict(cuda_extra="auto s = at::cuda::getStreamFromPool();"), "getStreamFromPool"),
    "torch::nn::functional": (dict(cuda_extra="out = torch::nn::functional::relu(a);"), "torch::nn::functional"),
    "thrust::sort": (dict(cuda_extra="thrust::sort(thrust::device, p, p + 4);"), "thrust::sort"),
    "at::native": (dict(cuda_extra="out = at::native::add(a, b);"), "at::native::add"),
    "in-place add_": (dict(forward="out = self.ext.add_forward(a, b)\nout.add_(1)\nreturn out"), ".add_()"),
    "augmented assignment": (dict(forward="out = self.ext.add_forward(a, b)\nout += a\nreturn out"), "out += a"),
    "negation": (dict(forward="return -self.ext.add_forward(a, b)"), "negates"),
    "comparison": (dict(forward="return self.ext.add_forward(a, b) > 0"), "compares"),
    "torch.cat": (dict(forward="return torch.cat([self.ext.add_forward(a, b), a])"), "torch.cat"),
    "from time import": (dict(head="from time import perf_counter"), "imports time"),
    "thread pool": (dict(head="from concurrent.futures import ThreadPoolExecutor"), "concurrent.futures"),
    "file-based load": (dict(head="from torch.utils.cpp_extension import load\nx = load('x', ['x.cu'])"),
                        "cpp_extension.load"),
    "cuBLAS via ldflags": (dict(load_kwargs='\n    extra_ldflags=["-lcublas"],'), "links cublas"),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_rejects_variant(name):
    kwargs, needle = VARIANTS[name]
    assert has(check_format(cuda_candidate(**kwargs)), needle)


def test_rejects_cuda_source_read_at_run_time():
    src = cuda_candidate().replace("cuda_sources=cuda_source,", "cuda_sources=open('k.cu').read(),")
    assert has(check_format(src), "built at run time")


def test_every_message_is_one_short_line():
    messages = [m for kwargs, _ in VARIANTS.values() for m in check_format(cuda_candidate(**kwargs))]
    assert messages and all("\n" not in m and len(m) <= 220 for m in messages)


def test_size_product_with_functools_reduce_is_allowed():
    src = cuda_candidate(head="import functools\nimport operator", forward='''
        n = functools.reduce(operator.mul, a.shape, 1)
        assert n == a.numel()
        return self.ext.add_forward(a, b)''')
    assert check_format(src) == []


def test_nested_tensor_arithmetic_is_reported_once():
    v = check_format(cuda_candidate(forward="return a * b + a"))
    assert len([m for m in v if "operator" in m]) == 1


def test_rejects_compute_in_a_call_override():
    v = check_format(cuda_candidate(tail="\n    def __call__(self, a, b):\n        return torch.matmul(a, b)\n"))
    assert has(v, "torch.matmul")


def test_rejects_forward_hook_that_rewrites_the_output():
    v = check_format(cuda_candidate(init="self.register_forward_hook(lambda m, i, o: torch.mm(*i))"))
    assert has(v, "register_forward_hook")


def test_using_declaration_of_an_allowed_type_is_allowed():
    assert check_format(cuda_candidate(cuda_extra="using torch::Tensor;")) == []


def test_rejects_tensor_arithmetic_in_the_host_wrapper():
    # a decoy kernel is launched, but the returned tensor is computed by ATen's operator+
    v = check_format(cuda_candidate(cuda_extra="out = a_c + b_c;"))
    assert has(v, "a_c + b_c", "host code")
    assert len([m for m in v if "host code" in m]) == 1


def test_pointer_and_size_arithmetic_in_the_host_wrapper_is_allowed():
    extra = "float* p = out.data_ptr<float>() + 4; auto s = a.size(0) * 2; int64_t k = n * 4 + threads;"
    assert check_format(cuda_candidate(cuda_extra=extra)) == []


def test_rejects_an_oversized_program_without_scanning_it():
    assert has(check_format("x = 1\n" * 100_000), "characters long")


def test_cpu_backend_rejects_a_wrapper_without_a_loop():
    # the C++ "kernel" only forwards to ATen: no loop, and clamp_min is ATen compute
    src = CPU_CANDIDATE.replace(
        "    for (int64_t i = 0; i < x_c.numel(); ++i) {\n        po[i] = px[i] > 0.0f ? px[i] : 0.0f;\n    }\n",
        "    out = x_c.clamp_min(0);\n")
    v = check_format(src, backend="cpu")
    assert has(v, "no loop in cpp_sources") and has(v, ".clamp_min(")


def test_cpu_backend_rejects_cuda_sources():
    assert has(check_format(cuda_candidate(), backend="cpu"), "cuda_sources given for the cpu backend")


def test_rejects_aten_call_hidden_behind_a_dispatch_key_guard_and_a_qualifying_macro():
    # `#define QUAL(a, b) a::b` hides `at::matmul` from a scan that looks for `at::`, and excluding the Python
    # dispatch keys hides it from the runtime operator inventory.
    body = '''#include <c10/core/impl/LocalDispatchKeySet.h>
#define QUAL(a, b) a::b

torch::Tensor relu_forward(torch::Tensor x) {
    for (int64_t d = 0; d < x.dim(); ++d) { TORCH_CHECK(x.size(d) > 0, "empty"); }
    QUAL(c10, impl)::ExcludeDispatchKeyGuard guard(QUAL(c10, DispatchKeySet)(QUAL(c10, DispatchKey)::Python));
    return QUAL(at, relu)(x);
}'''
    src = CPU_CANDIDATE.replace(CPU_CANDIDATE[CPU_CANDIDATE.index("torch::Tensor relu_forward"):CPU_CANDIDATE.index('"""\n\nrelu_ext')], body + "\n")
    problems = check_format(src, backend="cpu")
    assert any("dispatch-key guards" in p for p in problems), problems
    assert any("builds qualified names" in p for p in problems), problems


def test_accepts_ordinary_function_like_macros():
    macros = '#define CHECK_CONTIGUOUS(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")\n' \
             '#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))\n\n'
    src = CPU_CANDIDATE.replace("torch::Tensor relu_forward", macros + "torch::Tensor relu_forward", 1)
    assert check_format(src, backend="cpu") == []


# --- lazy outputs, files, the harness's Python objects ---------------------------------------------------


def test_rejects_cpp_memory_mapping_of_a_lazily_computed_output():
    # an output in PROT_NONE pages whose SIGSEGV handler computes it when the harness first reads it
    extra = "void* p = mmap(nullptr, 4096, 0, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); mprotect(p, 4096, 0);"
    v = check_format(cuda_candidate(cuda_extra=extra))
    assert has(v, "`mmap`") and has(v, "`mprotect`")


def test_rejects_cpp_output_wrapped_around_foreign_memory():
    v = check_format(cuda_candidate(cuda_extra="out = torch::from_blob(buffer, {n});"))
    assert has(v, "from_blob")


def test_rejects_cpp_signal_handler():
    v = check_format(cuda_candidate(cuda_extra="struct sigaction sa; sigaction(SIGSEGV, &sa, nullptr);"))
    assert has(v, "`sigaction`")


def test_rejects_cpp_reading_the_recheck_inputs_file():
    v = check_format(cuda_candidate(cuda_extra='FILE* f = fopen("inputs.safetensors", "rb");'))
    assert has(v, "`fopen`")


def test_rejects_cpp_stream_include_for_files():
    src = cuda_candidate().replace("#include <ATen/cuda/CUDAContext.h>", "#include <ATen/cuda/CUDAContext.h>\n#include <fstream>")
    assert has(check_format(src), "fstream")


def test_rejects_cpp_reaching_the_harness_frames_through_pybind11():
    extra = 'auto sys = pybind11::module_::import("sys"); auto frame = sys.attr("_getframe")(1);'
    v = check_format(cuda_candidate(cuda_extra=extra))
    assert has(v, "pybind11::module_")


def test_rejects_cpp_python_c_api_frame_access():
    assert has(check_format(cuda_candidate(cuda_extra="auto f = PyEval_GetFrame();")), "PyEval_GetFrame")


def test_rejects_python_file_access():
    v = check_format(cuda_candidate(init='self.rewrite = open("baselines.json", "w")'))
    assert has(v, "open")


def test_rejects_python_output_in_numpy_memory():
    v = check_format(cuda_candidate(forward="return torch.from_numpy(self.ext.add_forward(a, b).cpu().numpy())"))
    assert has(v, "torch.from_numpy")


# --- spellings that hide the banned names ---------------------------------------------------------------


def test_rejects_a_macro_call_that_spells_a_namespace():
    # NS(at)::addmm and NS(pybind11)::module_ passed a scan that looked for `at::` and `pybind11::`
    v = check_format(cuda_candidate(cuda_extra="out = NS(at)::addmm(out, a, b);"))
    assert has(v, "NS(at)::")


def test_rejects_operator_registration_that_overrides_clone():
    # TORCH_LIBRARY_IMPL(aten, CPU, m) { m.impl("clone", ...) } made the harness's snapshot compute the output
    v = check_format(cuda_candidate(cuda_extra='} TORCH_LIBRARY_IMPL(aten, CPU, m) { m.impl("clone", &my_clone); '))
    assert has(v, "TORCH_LIBRARY_IMPL")


def test_rejects_a_libc_function_taken_by_pointer():
    v = check_format(cuda_candidate(cuda_extra="auto f = fopen;"))
    assert has(v, "fopen")


def test_rejects_a_system_call_in_inline_assembly():
    v = check_format(cuda_candidate(cuda_extra='long r; asm volatile("syscall" : "=a"(r) : "a"(39));'))
    assert has(v, "syscall")


def test_rejects_c_linkage_declarations_and_load_time_constructors():
    v = check_format(cuda_candidate(cuda_extra="").replace(
        "#include <torch/extension.h>",
        '#include <torch/extension.h>\nextern "C" long syscall(long, ...);\n'
        "static void __attribute__((constructor)) boot() {}"))
    assert has(v, 'extern "C"') and has(v, "constructor")


def test_rejects_private_dispatch_internals_anywhere_in_the_file():
    # torch._C._DisableTorchDispatch() hid a delegated torch.relu from the runtime inventory
    v = check_format(cuda_candidate(head="HIDE = torch._C._DisableTorchDispatch"))
    assert has(v, "torch._C._DisableTorchDispatch")


# --- computed attributes, numpy, the sandbox's own package, ATen by lookup and includes, bare threads ----


def test_rejects_getattr_with_a_computed_name_on_any_object():
    # getattr(gen, "gi" + "_frame") walks up to the timing loop's frame
    v = check_format(cuda_candidate(forward='''
        g = (i for i in range(1))
        frame = getattr(g, "gi" + "_frame")
        return self.ext.add_forward(a, b)'''))
    assert has(v, "computed attribute name")


def test_rejects_getattr_of_a_literal_frame_attribute():
    v = check_format(cuda_candidate(forward='''
        g = (i for i in range(1))
        frame = getattr(g, "gi_frame")
        return self.ext.add_forward(a, b)'''))
    assert has(v, "'gi_frame'")


def test_rejects_tensors_handed_to_numpy_without_importing_it():
    # x.numpy() dispatches no operator; ndarray methods (np.matmul, .dot) then compute unseen
    v = check_format(cuda_candidate(forward='''
        box = {0: a}
        out = self.ext.add_forward(a, b)
        box[0].numpy().dot(b.numpy())
        return out'''))
    assert has(v, "accesses .numpy")


def test_rejects_a_numpy_import():
    assert has(check_format(cuda_candidate(head="import numpy as np")), "imports numpy")


def test_rejects_an_import_of_the_sandbox_itself():
    # d6_forge_call_count_and_median rewrote the worker's report through kevin.sandbox.worker.channel
    assert has(check_format(cuda_candidate(head="import kevin.sandbox.worker.channel as w")), "imports kevin.sandbox.worker.channel")


def test_rejects_cpp_code_inside_namespace_at():
    extra = "}\nnamespace at { Tensor twice(const Tensor& x) { return x; } }\nvoid unused() {"
    assert has(check_format(cuda_candidate(cuda_extra=extra)), "opens `namespace at`")


def test_rejects_an_include_of_aten_per_backend_kernels():
    src = cuda_candidate().replace("#include <ATen/cuda/CUDAContext.h>",
                                   "#include <ATen/cuda/CUDAContext.h>\n#include <ATen/ops/addmm_cuda_dispatch.h>")
    assert has(check_format(src), "ATen/ops/addmm_cuda_dispatch.h")


def test_rejects_an_include_of_aten_per_backend_kernels_through_a_macro():
    src = cuda_candidate().replace("#include <ATen/cuda/CUDAContext.h>",
                                   "#define HDR <ATen/CUDAFunctions.h>\n#include HDR")  # the macro is expanded first
    assert has(check_format(src), "ATen/CUDAFunctions.h")


def test_rejects_an_include_through_a_function_like_macro():
    src = cuda_candidate().replace("#include <ATen/cuda/CUDAContext.h>",
                                   "#define HDR(x) <ATen/x>\n#include HDR(CUDAFunctions.h)")
    assert has(check_format(src), "#include must name its header")


def test_rejects_a_thread_spelled_without_std_after_using_namespace_std():
    extra = "}\nusing namespace std;\nvoid spawn() { thread([] {}).detach();"
    assert has(check_format(cuda_candidate(cuda_extra=extra)), "threads, processes")


def test_keeps_honest_names_that_contain_thread():
    extra = "__syncthreads(); dim3 threads(16, 16); int thread_count = threadIdx.x; (void)thread_count;"
    assert check_format(cuda_candidate(cuda_extra=extra)) == []
