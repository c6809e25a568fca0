"""check_format and the built-library check: attacks and the honest code that resembles them.

Module re-exports (``torch.os``), preprocessor line splicing and trigraphs, background work in library thread
pools, tensor-method and precision rules that must not fire on non-tensors, and the "kernelbench" rule set. Candidates
live in tests/sandbox/candidates/, one file per attack or honest case.
"""

import pytest

from kevin.sandbox.static import symbols as _symbols
from kevin.sandbox.static.source import check_format
from sandbox_cases import load_candidate
from test_static import CPU_CANDIDATE, cuda_candidate, has


def _cpu(extra: str) -> list[str]:
    """The honest CPU ReLU candidate with ``extra`` C++ inserted in its host function."""
    return check_format(CPU_CANDIDATE.replace("    return out;\n}", f"    {extra}\n    return out;\n}}", 1), backend="cpu")


# --- 1. modules reached through other modules ---------------------------------------------------------------


def test_rejects_the_timing_module_replaced_through_torch_sys_modules():
    assert has(check_format(load_candidate("e7_stdlib_module_via_torch_alias"), backend="cpu"),
               "torch.sys.modules", "the sys module reached through another module")


def test_rejects_subprocess_through_an_aliased_cpp_extension_module():
    assert has(check_format(load_candidate("e7_subprocess_via_cpp_extension_alias"), backend="cpu"),
               "torch.utils.cpp_extension.subprocess.run")


def test_rejects_os_imported_from_cpp_extension_under_another_name():
    v = check_format(load_candidate("e7_os_via_from_import_alias"), backend="cpu")
    assert has(v, "imports torch.utils.cpp_extension.os") and has(v, "torch.utils.cpp_extension.os.system")


def test_rejects_a_module_laundered_through_a_list_before_its_os_attribute():
    v = check_format(load_candidate("e7_module_laundered_through_a_list"), backend="cpu")
    assert has(v, "uses the module torch as a value") and has(v, "accesses .os")


@pytest.mark.parametrize("head, needle", [
    ("import torch.multiprocessing as mp", "imports torch.multiprocessing"),
    ("x = torch.serialization.pickle.loads", "the pickle module reached"),
    ("import torch.utils.cpp_extension\ntorch.utils.cpp_extension.os.system('true')", "the os module reached"),
    ("x = torch.builtins.open", "the builtins module reached"),
    ("x = torch.serialization.io.open", "the io module reached"),
    ("from torch.utils.cpp_extension import subprocess", "imports torch.utils.cpp_extension.subprocess"),
    ("obj = object()\nx = getattr(obj, 'kevin')", "getattr(..., 'kevin')"),
])
def test_rejects_banned_modules_reached_as_attributes_of_allowed_ones(head, needle):
    assert has(check_format(cuda_candidate(head=head)), needle)


def test_rejects_getattr_with_a_module_name_on_any_object():
    v = check_format(cuda_candidate(forward="m = getattr(self.ext, 'sys')\nreturn self.ext.add_forward(a, b)"))
    assert has(v, "getattr(..., 'sys')")


def test_rejects_os_system_through_an_alias_of_os_itself():
    assert has(check_format(cuda_candidate(head="import os as o\no.system('true')")), "os.system")


def test_a_users_own_attribute_named_time_is_allowed():
    # an ordinary word: judged only on chains rooted at an imported module
    src = cuda_candidate(init="self.time = 3", forward="steps = self.time\nreturn self.ext.add_forward(a, b)")
    assert check_format(src) == []


def test_torchs_own_signal_package_is_not_the_stdlib_signal_module():
    assert check_format(cuda_candidate(head="window = torch.signal.windows.hann")) == []


def test_a_module_renamed_by_assignment_is_still_judged():
    assert has(check_format(cuda_candidate(head="T = torch\nT.os.system('true')")), "torch.os.system")


# --- 2. line splicing, trigraphs, and Python's C API in the built library ----------------------------------


def test_rejects_python_c_api_hidden_by_a_line_splice():
    assert has(check_format(load_candidate("e8_python_c_api_via_line_splice"), backend="cpu"), "PyRun_SimpleString")


def test_rejects_an_aten_call_spliced_with_trailing_spaces_after_the_backslash():
    assert has(_cpu("auto y = at::ma\\  \ntmul(x, x);"), "at::matmul")


def _cpu_escaped(extra: str) -> list[str]:
    """As `_cpu`, with the C++ source a plain string literal, so that escapes in ``extra`` reach the compiler as the
    characters they name (a NUL or a carriage return cannot be written into the candidate's file as such)."""
    source = CPU_CANDIDATE.replace('r"""', '"""', 1)
    return check_format(source.replace("    return out;\n}", f"    {extra}\n    return out;\n}}", 1), backend="cpu")


@pytest.mark.parametrize("splice", [r"\\\x00\n", r"\\\r"], ids=["nul-before-the-newline", "lone-carriage-return"])
def test_rejects_a_thread_spliced_with_what_gcc_also_reads_as_a_line_splice(splice):
    # GCC reads a NUL between the backslash and the newline as a blank, and a lone CR as a line end: both join
    # "pthread_" and "create" into one name (gcc -E shows it), as a plain backslash-newline does
    assert has(_cpu_escaped(f"pthread_{splice}create(nullptr, nullptr, nullptr, nullptr);"), "pthread_create")


def test_rejects_a_thread_spliced_across_lines():
    assert has(_cpu("pthread_\\\ncreate(nullptr, nullptr, nullptr, nullptr);"), "pthread_create")


def test_source_lines_after_a_splice_keep_their_numbers():
    v = _cpu("int a1 = 1 + \\\n 2;\n    auto y = at::matmul(x, x);")
    src = CPU_CANDIDATE[CPU_CANDIDATE.index('r"""') + 4:]
    line = src[:src.index("    return out;\n}")].count("\n") + 3
    assert has(v, "at::matmul", f"source line {line})")


def test_rejects_a_trigraph_even_inside_a_comment():
    # `??/` at the end of a comment splices the next line into it only where trigraphs are translated
    assert has(_cpu("// harmless??/\n    int hidden = 0; (void)hidden;"), "trigraph `??/`")


def test_built_library_importing_pyrun_is_rejected(monkeypatch):
    monkeypatch.setattr(_symbols, "undefined_symbols", lambda path: ["PyTuple_New", "PyRun_SimpleStringFlags"])
    found, _ = _symbols.violations(["/x/ext.so"], backend="cpu")
    assert found == ["the built extension ext.so imports PyRun_SimpleStringFlags from Python's C API (only what "
                     "pybind11's bindings use is allowed: no running code, imports, frames or interpreter state)"]


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
@pytest.mark.parametrize("symbol", ["PyImport_ImportModule", "PyEval_GetFrame", "Py_CompileString", "PyObject_Call",
                                    "PySys_GetObject", "PyThreadState_GetFrame", "PyEval_EvalCode", "_PyEval_EvalFrame",
                                    "PyFrame_GetLocals", "PyObject_Vectorcall"])
def test_built_library_importing_python_c_api_outside_the_allow_list_is_rejected(monkeypatch, backend, symbol):
    monkeypatch.setattr(_symbols, "undefined_symbols", lambda path: [symbol])
    found, _ = _symbols.violations(["/x/ext.so"], backend=backend)
    assert len(found) == 1 and f"imports {symbol} from Python's C API" in found[0]


# The Python C-API imports of honest load_inline builds on this machine (torch 2.13, Python 3.11, GCC 12): ReLU,
# Linear + ReLU, and one with parallel_for, Vectorized and many argument types; a .cu unit including
# <torch/extension.h> imports a subset.
HONEST_PYTHON_IMPORTS = """
PyBaseObject_Type PyByteArray_AsString PyByteArray_Size PyByteArray_Type PyBytes_AsString PyBytes_AsStringAndSize
PyBytes_Size PyCFunction_Type PyCMethod_New PyCapsule_GetContext PyCapsule_GetName PyCapsule_GetPointer PyCapsule_New
PyCapsule_SetContext PyCapsule_SetDestructor PyDict_Contains PyDict_GetItemWithError PyDict_New PyDict_SetDefault
PyDict_Type PyErr_Clear PyErr_Fetch PyErr_Format PyErr_NormalizeException PyErr_Occurred PyErr_Restore PyErr_SetObject
PyErr_SetString PyErr_WarnEx PyErr_WriteUnraisable PyEval_AcquireThread PyEval_GetBuiltins PyEval_SaveThread
PyExc_FutureWarning PyExc_ImportError PyExc_IndexError PyExc_MemoryError PyExc_OverflowError PyExc_RuntimeError
PyExc_SystemError PyExc_TypeError PyExc_ValueError PyException_SetCause PyException_SetContext PyException_SetTraceback
PyFloat_AsDouble PyFloat_Type PyFrame_GetBack PyFrame_GetCode PyFrame_GetLineNumber PyFrozenSet_Type PyGILState_Check
PyGILState_Ensure PyGILState_GetThisThreadState PyGILState_Release PyGen_Type PyIndex_Check PyInstanceMethod_New
PyInstanceMethod_Type PyInterpreterState_GetDict PyIter_Next PyList_New PyList_Size PyLong_AsLong PyLong_FromSsize_t
PyMem_Calloc PyMem_Free PyModuleDef_Init PyModule_AddObject PyModule_NewObject PyModule_Type PyNumber_Add
PyNumber_Check PyNumber_Float PyNumber_Long PyObject_CallFunctionObjArgs PyObject_ClearWeakRefs PyObject_Free
PyObject_GC_UnTrack PyObject_GetAttrString PyObject_GetItem PyObject_GetIter PyObject_HasAttrString PyObject_IsInstance
PyObject_Repr PyObject_SetAttrString PyObject_SetItem PyObject_Str PyProperty_Type PySequence_Check PySequence_Size
PySequence_Tuple PySet_Type PyThreadState_Clear PyThreadState_DeleteCurrent PyThreadState_New PyThread_tss_create
PyThread_tss_delete PyThread_tss_get PyThread_tss_set PyTuple_New PyTuple_SetItem PyType_FromSpec PyType_IsSubtype
PyType_Ready PyType_Type PyUnicode_AsEncodedString PyUnicode_AsUTF8AndSize PyUnicode_AsUTF8String PyUnicode_Compare
PyUnicode_DecodeUTF8 PyUnicode_FromString PyUnicode_InternFromString PyWeakref_NewRef Py_GetVersion
_PyObject_GetDictPtr _PyObject_New _PyThreadState_UncheckedGet _PyType_Lookup _Py_Dealloc _Py_FalseStruct
_Py_NoneStruct _Py_NotImplementedStruct _Py_TrueStruct
""".split()


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_what_honest_builds_import_from_python_passes_on_both_backends(monkeypatch, backend):
    monkeypatch.setattr(_symbols, "undefined_symbols", lambda path: HONEST_PYTHON_IMPORTS + ["memcpy"])
    assert _symbols.violations(["/x/ext.so"], backend=backend) == ([], True)


MINI_PYBIND = r"""
#include <pybind11/pybind11.h>
int twice(int x) { %s return 2 * x; }
PYBIND11_MODULE(mini, m) { m.def("twice", &twice); }
"""


def _gxx_build(tmp_path, body):
    import shutil
    import subprocess
    import sysconfig

    from torch.utils.cpp_extension import include_paths

    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    (tmp_path / "mini.cpp").write_text(MINI_PYBIND % body)
    includes = [x for p in include_paths() + [sysconfig.get_paths()["include"]] for x in ("-isystem", p)]
    r = subprocess.run(["g++", "-shared", "-fPIC", "-O1", "-std=c++17", *includes, "mini.cpp", "-o", "mini.so"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return str(tmp_path / "mini.so")


def test_a_real_pybind11_build_running_python_source_is_rejected_and_its_twin_passes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    honest = _symbols.violations([_gxx_build(tmp_path / "a", "")], backend="cpu")
    hidden = _symbols.violations([_gxx_build(tmp_path / "b", 'PyRun_SimpleString("import sys");')], backend="cpu")
    assert honest == ([], True)
    assert hidden[1] and len(hidden[0]) == 1 and "PyRun_SimpleStringFlags" in hidden[0][0]


# --- 3. background work in thread pools; synchronous parallelism and thread-count queries stay allowed -----


def test_rejects_background_work_on_atens_inter_op_pool():
    assert has(check_format(load_candidate("d8_aten_thread_pool_launch"), backend="cpu"), "`at::launch`",
               "background work")


def test_rejects_a_c10_thread_pool():
    assert has(check_format(load_candidate("d8_c10_thread_pool"), backend="cpu"), "ThreadPool", "background work")


@pytest.mark.parametrize("extra, needle", [
    ("at::intraop_launch([] {});", "intraop_launch"),
    ("at::internal::launch_no_thread_state([] {});", "launch_no_thread_state"),
    ("c10::TaskThreadPool pool(2);", "TaskThreadPool"),
    ("at::set_num_threads(1);", "set_num_threads"),
    ("at::set_num_interop_threads(1);", "set_num_interop_threads"),
    ("omp_set_num_threads(1);", "omp_set_num_threads"),
    ("auto f = std::async(std::launch::async, [] {});", "std::async"),
    ("std::packaged_task<void()> job([] {});", "std::packaged_task"),
    ("\n#pragma omp task\n    { po[0] = 0.0f; }", "#pragma omp task"),
    ("\n#pragma omp parallel for nowait\n    for (int i = 0; i < 4; ++i) po[i] = 0.0f;", "nowait"),
    ('_Pragma("omp task") { po[0] = 0.0f; }', '_Pragma'),
])
def test_rejects_thread_pool_and_task_spellings(extra, needle):
    assert has(_cpu(extra), needle)


def test_synchronous_parallel_for_and_omp_parallel_for_are_allowed():
    extra = ("at::parallel_for(0, 4, 1, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) po[i] = 0.0f; });"
             "\n#pragma omp parallel for\n    for (int i = 0; i < 4; ++i) po[i] = 0.0f;")
    assert _cpu(extra) == []


def test_thread_count_queries_are_not_threads():
    extra = ("int a1 = at::get_num_threads(); int a2 = omp_get_max_threads(); "
             "unsigned a3 = std::thread::hardware_concurrency(); (void)a1; (void)a2; (void)a3;")
    assert _cpu(extra) == []


@pytest.mark.parametrize("symbol", [
    "at::launch(std::function<void ()>)", "at::intraop_launch(std::function<void ()> const&)",
    "at::internal::launch_no_thread_state(std::function<void ()>)", "c10::ThreadPool::ThreadPool(int, int, std::function<void ()>)",
    "c10::ThreadPool::run(std::function<void ()>)", "vtable for c10::ThreadPool", "at::set_num_threads(int)",
    "omp_set_num_threads", "GOMP_task", "__kmpc_omp_task_alloc",
])
def test_built_library_importing_thread_pool_work_is_rejected(monkeypatch, symbol):
    monkeypatch.setattr(_symbols, "undefined_symbols", lambda path: [symbol])
    found, _ = _symbols.violations(["/x/ext.so"], backend="cpu")
    assert len(found) == 1 and "background work in thread pools" in found[0]


def test_built_library_with_parallel_for_and_thread_queries_passes(monkeypatch):
    # what the honest parallel_for build here imports (ATen/ParallelOpenMP.h), and OpenMP's own parallel-for entry
    symbols = ["at::get_thread_num()", "at::get_num_threads()", "at::internal::set_thread_num(int)",
               "c10::ParallelGuard::ParallelGuard(bool)", "GOMP_parallel", "omp_get_num_threads", "omp_get_thread_num"]
    monkeypatch.setattr(_symbols, "undefined_symbols", lambda path: symbols)
    assert _symbols.violations(["/x/ext.so"], backend="cpu") == ([], True)


# --- 4. honest kernels whose methods and names look like tensor compute ----------------------------------


@pytest.mark.parametrize("name", ["honest_vectorized_relu_cpu", "honest_vectorized_exp_cpu",
                                  "honest_struct_accumulator_cpu", "honest_named_half_constant_cpu"])
def test_accepts_honest_kernels_with_methods_and_names_that_look_like_tensor_compute(name):
    assert check_format(load_candidate(name), backend="cpu") == []


@pytest.mark.parametrize("extra, needle", [
    ("auto y = x_c.contiguous().sum();", ".sum("),
    ("std::vector<torch::Tensor> parts{x_c}; auto y = parts[0].exp();", ".exp("),
    ("auto y = torch::ones({3}).max();", ".max("),
    ("for (const auto& t : std::vector<torch::Tensor>{x_c}) { auto y = t.log(); }", ".log("),
])
def test_still_rejects_compute_methods_on_tensors(extra, needle):
    src = CPU_CANDIDATE.replace("    return out;\n}", f"    {extra}\n    return out;\n}}", 1)
    assert has(check_format(src, backend="cpu"), "tensor method", needle)


def test_still_rejects_compute_methods_on_a_tensor_returned_by_a_local_function():
    src = CPU_CANDIDATE.replace("torch::Tensor relu_forward", "torch::Tensor twice(torch::Tensor t);\n"
                                "torch::Tensor relu_forward", 1)
    src = src.replace("    return out;\n}", "    auto y = twice(x).exp();\n    return out;\n}", 1)
    assert has(check_format(src, backend="cpu"), ".exp(")


@pytest.mark.parametrize("extra, needle", [
    ("half h = 0;", "half h ="),
    ("auto* ph = out.data_ptr<half>();", "<half>"),
    ("float f = (half)px[0];", "(half)"),
    ("auto y = out.to(torch::kFloat16);", "torch::kFloat16"),
    ("auto y = out.to(at::kHalf);", "at::kHalf"),
    ("c10::Half h = 0;", "c10::Half"),
    ("auto t = c10::ScalarType::BFloat16;", "BFloat16"),
    ("auto h = __float2half(1.0f);", "__float2half"),
    ('asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(a) : "f"(b));', "cvt.rna.tf32"),
])
def test_rejects_real_precision_downgrades(extra, needle):
    assert has(_cpu(extra), needle, "precision downgrade")


def test_a_variable_named_half_in_a_product_is_no_type():
    assert _cpu("const float half = 0.5f; float y = half * px[0]; y = half; (void)y;") == []


# --- 5. the kernelbench rule set -------------------------------------------------------------------------


def test_kernelbench_rules_allow_a_layer_built_in_init_for_its_weights():
    src = load_candidate("honest_kernelbench_linear_weights_cpu")
    assert check_format(src, backend="cpu", rules="kernelbench") == []


def test_kevin_rules_still_refuse_the_same_layer():
    src = load_candidate("honest_kernelbench_linear_weights_cpu")
    assert has(check_format(src, backend="cpu"), "torch.nn.Linear", "not allowed")


def test_kernelbench_rules_reject_running_the_layer_in_forward():
    v = check_format(load_candidate("a11_kernelbench_layer_run_in_forward"), backend="cpu", rules="kernelbench")
    assert has(v, "runs the torch.nn layer self.linear")


@pytest.mark.parametrize("forward", [
    "return self.linear.forward(x)",
    "return self.seq[0](x)",
    "for layer in self.seq:\n    x = layer(x)\nreturn x",
    "f = self.linear\nreturn f(x)",
])
def test_kernelbench_rules_reject_every_way_of_running_a_held_layer(forward):
    import textwrap
    body = textwrap.indent(forward, " " * 8).lstrip()
    src = load_candidate("honest_kernelbench_linear_weights_cpu").replace(
        "self.linear = nn.Linear(in_features, out_features)",
        "self.linear = nn.Linear(in_features, out_features)\n        self.seq = nn.Sequential(nn.Linear(4, 4))").replace(
        "return self.ext.linear_relu_forward(x, self.linear.weight.contiguous(), self.linear.bias)",
        body + "\n\n    def unused(self, x):\n        return self.ext.linear_relu_forward(x, x, x)")
    assert has(check_format(src, backend="cpu", rules="kernelbench"), "runs the torch.nn layer")


def test_kernelbench_rules_reject_a_layer_built_outside_init():
    src = load_candidate("honest_kernelbench_linear_weights_cpu").replace(
        "return self.ext", "extra = nn.ReLU()\n        return self.ext")
    assert has(check_format(src, backend="cpu", rules="kernelbench"), "torch.nn.ReLU", "only be built in __init__")


def test_kernelbench_rules_leave_every_other_rule_as_it_is():
    assert has(check_format(cuda_candidate(forward="return torch.matmul(a, b)"), rules="kernelbench"), "torch.matmul")


def test_unknown_rules_raise():
    with pytest.raises(ValueError, match="unknown rules"):
        check_format(cuda_candidate(), rules="paper")


def test_the_cpu_sandbox_judges_the_vectorized_parallel_relu_correct(full_sandbox):
    # end to end: static layer, the built library's symbols (parallel_for, Vectorized, pybind11's Python imports)
    # and the dynamic gate
    from sandbox_cases import RELU_TASK

    r = full_sandbox.evaluate(RELU_TASK, load_candidate("honest_vectorized_relu_cpu"))
    assert r.status == "correct", r.feedback
    assert r.details["symbol_check"]["nm"] is True
