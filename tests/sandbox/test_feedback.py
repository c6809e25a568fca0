"""feedback: one short message per status, in the candidate's own terms and free of the sandbox's paths."""

import os
import re
import sys

import pytest

from kevin.sandbox import feedback

NVCC_LOG = """[1/3] c++ -MMD -MF main.o.d -O3 -c main.cpp -o main.o
[2/3] nvcc -O3 -c cuda.cu -o cuda.cuda.o
FAILED: cuda.cuda.o
cuda.cu(12): error: identifier "undeclared_name" is undefined
      y[0] = undeclared_name;
             ^
cuda.cu(20): error: expected a ";"
2 errors detected in the compilation of "cuda.cu".
ninja: build stopped: subcommand failed.
"""

CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOME = os.path.expanduser("~")


def assert_path_free(text: str) -> None:
    """No path of the sandbox, its checkout, Python's libraries, a temporary directory or the home directory."""
    roots = ("/tmp/", "/home/", "/root/", CHECKOUT, "/kevin/sandbox")
    for bad in ("kevin-run-", "site-packages", "dist-packages", *roots):
        assert bad not in text, (bad, text)
    if HOME not in ("", "/"):
        assert HOME not in text, (HOME, text)
    assert not re.search(r"/lib/python3\.\d+/", text), text
    assert not re.search(r"[0-9a-f]{16,}/", text), text


# ---------------------------------------------------------------- compiler errors


def test_compile_feedback_starts_with_the_first_compiler_error():
    msg = feedback.compile_error_feedback(NVCC_LOG)
    assert msg.startswith("Compilation failed.")
    assert 'identifier "undeclared_name" is undefined' in msg
    assert "[1/3] c++" not in msg  # build commands are dropped


def test_compile_feedback_is_trimmed():
    msg = feedback.compile_error_feedback("x.cpp:1:1: error: bad\n" + "y" * 10_000)
    assert len(msg) <= feedback.MAX_CHARS


CUDA_PROGRAM = '''import torch
from torch.utils.cpp_extension import load_inline

cuda_src = """
#include <cuda_runtime.h>

__global__ void k(float* y) {
    y[0] = undeclared_name;
}
torch::Tensor relu_forward(torch::Tensor x) { return x; }
"""

ext = load_inline(name="e", cpp_sources="torch::Tensor relu_forward(torch::Tensor x);", cuda_sources=cuda_src,
                  functions=["relu_forward"])
'''


def _nvcc_log(build_dir: str) -> str:
    """nvcc's error for CUDA_PROGRAM's cuda.cu (3 prelude lines, then cuda_src), as ninja reports it."""
    return (f"[1/2] /usr/local/cuda/bin/nvcc -c {build_dir}/cuda.cu -o cuda.cuda.o\nFAILED: cuda.cuda.o\n"
            f"/usr/local/cuda/bin/nvcc -c {build_dir}/cuda.cu -o cuda.cuda.o\n"
            f"{build_dir}/cuda.cu(8): error: identifier \"undeclared_name\" is undefined\n"
            "      y[0] = undeclared_name;\n             ^\n\n"
            f"1 error detected in the compilation of \"{build_dir}/cuda.cu\".\n"
            "ninja: build stopped: subcommand failed.\n")


def test_an_nvcc_error_is_reported_at_the_line_of_the_candidates_cuda_sources():
    # cuda.cu line 8 = 3 prelude lines + line 5 of cuda_src, which sits on program line 4 + 5 - 1 = 8
    log = _nvcc_log("/home/u/.cache/kevin/ext/0123456789abcdef0123456789abcdef")
    msg = feedback.compile_error_feedback(log, CUDA_PROGRAM)
    assert 'cuda_sources line 5 (your program line 8): error: identifier "undeclared_name" is undefined' in msg
    assert "    y[0] = undeclared_name;" in msg


def test_without_the_program_an_error_is_reported_at_its_line_in_the_sources():
    msg = feedback.compile_error_feedback(_nvcc_log("/tmp/b"), None)
    assert 'cuda_sources line 5: error: identifier "undeclared_name" is undefined' in msg


GCC_LOG = """main.cpp: In function 'at::Tensor f(at::Tensor)':
main.cpp:4:12: error: 'undeclared_thing' was not declared in this scope
    4 |     return undeclared_thing + y;
      |            ^~~~~~~~~~~~~~~~
"""

CPP_PROGRAM = '''from torch.utils.cpp_extension import load_inline
src = """
torch::Tensor f(torch::Tensor x) {
    auto y = x.contiguous();
    return undeclared_thing + y;
}
"""
ext = load_inline(name="e", cpp_sources=[src], functions=["f"])
'''


def test_a_gcc_error_quotes_the_candidates_line_without_gcc_s_gutter():
    msg = feedback.compile_error_feedback(GCC_LOG, CPP_PROGRAM)
    lines = msg.splitlines()
    assert lines[1] == ("cpp_sources line 4 (your program line 5): error: "
                        "'undeclared_thing' was not declared in this scope")
    assert lines[2] == "    return undeclared_thing + y;"
    assert lines[3].index("^") == lines[2].index("undeclared_thing")  # the caret still points at the name


def test_a_function_named_in_functions_but_not_declared_is_one_line():
    log = ("main.cpp: In function 'void pybind11_init_e(pybind11::module_&)':\n"
           "main.cpp:5:47: error: 'relu_fwd' was not declared in this scope\n"
           '    5 | m.def("relu_fwd", torch::wrap_pybind_function(relu_fwd), "relu_fwd");\n'
           "      |                                               ^~~~~~~~\n")
    msg = feedback.compile_error_feedback(log, CPP_PROGRAM)
    body = msg.split("\n", 1)[1]
    assert "\n" not in body
    assert "functions=" in body and "'relu_fwd'" in body and "cpp_sources declares no such function" in body


def test_a_function_declared_but_never_defined_is_one_line_naming_it():
    log = ('Traceback (most recent call last):\n  File "candidate.py", line 13, in <module>\n'
           "    ext = load_inline(name=\"e\", cpp_sources=decl, cuda_sources=src, functions=[\"relu_forward\"])\n"
           "ImportError: /home/u/.cache/kevin/ext/0123456789abcdef0123456789abcdef/e.so: undefined symbol: "
           "_Z12relu_forwardN2at6TensorE\n")
    msg = feedback.compile_error_feedback(log, CUDA_PROGRAM)
    assert "\n" not in msg
    assert msg.startswith("Your program failed to load: ImportError at your program line 13: ")
    assert "relu_forward" in msg and "undefined symbol" in msg
    assert_path_free(msg)


def test_a_bad_load_inline_argument_is_one_line():
    log = ('Traceback (most recent call last):\n  File "/tmp/kevin-run-x1/candidate.py", line 13, in <module>\n'
           "    ext = load_inline(name='e', cpp_sources=s, extra_cuda_flags=['-O3'])\n"
           "TypeError: got an unexpected keyword argument 'extra_cuda_flags'\n")
    msg = feedback.compile_error_feedback(log)
    assert msg == ("Your program failed to load: TypeError at your program line 13: load_inline: got an unexpected "
                   "keyword argument 'extra_cuda_flags'")


def test_a_build_failure_without_captured_output_says_so_instead_of_quoting_the_traceback():
    log = ('Traceback (most recent call last):\n  File "/tmp/kevin-run-x1/candidate.py", line 59, in <module>\n'
           '  File "/work/main/kevin/sandbox/_extension.py", line 253, in load_inline\n'
           "RuntimeError: Error building extension 'argmin_cuda'\n")
    assert feedback.compile_error_feedback(log) == "Compilation failed (the compiler's output was not captured)."


# ---------------------------------------------------------------- Python errors while loading (real tracebacks)


def _import_error(tmp_path, program: str) -> str:
    """The worker's ``error`` message for importing ``program`` as the sandbox does."""
    from kevin.sandbox.build import extension as _extension
    from kevin.sandbox.worker import channel as _worker

    scratch = tmp_path / "kevin-run-abc123"
    scratch.mkdir()
    (scratch / "candidate.py").write_text(program)
    try:
        _extension.import_candidate(str(scratch / "candidate.py"))
    except BaseException as exc:  # noqa: BLE001
        return _worker.error_text(exc, 20000)
    finally:
        sys.modules.pop("candidate", None)
    raise AssertionError("the program imported")


def test_a_name_error_in_the_program_is_one_line_at_its_program_line(tmp_path):
    log = _import_error(tmp_path, "import torch\n\n\nx = 1\ny = undefined_helper(x)\n")
    assert feedback.compile_error_feedback(log) == (
        "Your program failed to load: NameError at your program line 5: name 'undefined_helper' is not defined")


def test_a_syntax_error_in_the_program_is_one_line_quoting_the_line(tmp_path):
    log = _import_error(tmp_path, "import torch\n\ndef broken(:\n    pass\n")
    msg = feedback.compile_error_feedback(log)
    assert "\n" not in msg
    assert msg.startswith("Your program failed to load: SyntaxError at your program line 3: ")
    assert "def broken(:" in msg


def test_an_error_raised_in_a_called_function_points_at_the_programs_deepest_line(tmp_path):
    log = _import_error(tmp_path, "def f():\n    raise ValueError('bad shape')\n\nf()\n")
    assert feedback.compile_error_feedback(log) == (
        "Your program failed to load: ValueError at your program line 2: bad shape")


def test_the_workers_error_text_has_neither_sandbox_frames_nor_paths(tmp_path):
    log = _import_error(tmp_path, "x = undefined_helper\n")
    assert 'File "candidate.py", line 1' in log
    assert "<frozen importlib" not in log and "import_candidate" not in log.split("candidate.py")[-1]
    assert "_extension.py" not in log
    assert_path_free(log)


# ---------------------------------------------------------------- no paths, whatever the status

TMP = "/tmp/kevin-run-t9f6jibd"
LEAKY = [
    f'Traceback (most recent call last):\n  File "{TMP}/candidate.py", line 59, in <module>',
    f'  File "{CHECKOUT}/kevin/sandbox/_extension.py", line 253, in build',
    f'  File "{sys.prefix}/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1, in _call_impl',
    f"{HOME}/.cache/kevin/ext/0123456789abcdef0123456789abcdef/cuda.cu(40): error: bad",
    "mp/kevin-run-t9f6jibd/candidate.py\", line 59, in <module>",
]


STATUSES = ["format_error", "compile_error", "runtime_error", "timeout", "incorrect", "correct"]


@pytest.mark.parametrize("status", STATUSES)
def test_feedback_of_every_status_is_path_free(status):
    leak = "\n".join(LEAKY)
    msg = {
        "format_error": lambda: feedback.format_error_feedback(LEAKY),
        "compile_error": lambda: feedback.compile_error_feedback(leak, CUDA_PROGRAM),
        "runtime_error": lambda: feedback.runtime_error_feedback(f"while timing your kernel (forward):\n{leak}"),
        "timeout": lambda: feedback.timeout_feedback(f"loading {TMP}/candidate.py", 30),
        "incorrect": lambda: feedback.incorrect_feedback(f"output 0 differs ({leak})", 1.0, 0.5),
        "correct": lambda: feedback.correct_feedback(0.5, 1.0),
    }[status]()
    assert_path_free(msg)


def test_paths_inside_a_sandboxs_scratch_root_become_short_tokens():
    # candidates' run directories live inside the Sandbox's own root, whose name is as private as theirs
    root = "/tmp/kevin-sandbox-ab12cd34"
    assert feedback.scrub_paths(f'File "{root}/kevin-run-x9/candidate.py", line 3') == 'File "candidate.py", line 3'
    assert feedback.scrub_paths(f"mp/kevin-sandbox-ab12cd34/kevin-run-x9/main.cpp:7:3: error") == "main.cpp:7:3: error"
    assert feedback.scrub_paths(f"-I{root}/") == "-I<dir>"  # -I/tmp/kevin-sandbox-ab12cd34/ -> -I<dir>
    assert feedback.scrub_paths("mp/kevin-sandbox-ab12cd34/golden-k2j3/x/inputs.safetensors") == "inputs.safetensors"
    assert "kevin-sandbox-" not in feedback.scrub_paths("mp/kevin-sandbox-ab12cd34/kevin-r")


def test_the_truncated_and_whole_forms_of_sandbox_paths_become_short_tokens():
    assert feedback.scrub_paths(f"{TMP}/candidate.py:3") == "candidate.py:3"
    assert feedback.scrub_paths("mp/kevin-run-t9f6jibd/candidate.py") == "candidate.py"
    assert feedback.scrub_paths(f"{TMP}/sub/main.cpp") == "sub/main.cpp"
    build = f"{HOME}/.cache/kevin/ext/0123456789abcdef0123456789abcdef"
    assert feedback.scrub_paths(f"{build}/cuda.cu(40)") == "cuda.cu(40)"
    assert feedback.scrub_paths(f"{CHECKOUT}/kevin/sandbox/_extension.py") == "<sandbox>"
    torch_h = f"{sys.prefix}/lib/python3.11/site-packages/torch/include/ATen/core/Tensor.h:12:3"
    assert feedback.scrub_paths(torch_h) == "<torch>/include/ATen/core/Tensor.h:12:3"
    assert feedback.scrub_paths("/usr/include/c++/12/vector:3") == "/usr/include/c++/12/vector:3"  # a system header


def test_scrub_paths_keeps_the_structure_of_nested_details():
    details = {
        "compile_log": f"{TMP}/candidate.py:1",
        "nested": {"traceback": [f"{CHECKOUT}/kevin/sandbox/_judge.py", ("x", 3)], "n": 2.5, "none": None},
        f"{TMP}/key": True,
    }
    assert feedback.scrub_paths(details) == {
        "compile_log": "candidate.py:1",
        "nested": {"traceback": ["<sandbox>", ("x", 3)], "n": 2.5, "none": None},
        "key": True,
    }


# ---------------------------------------------------------------- the other statuses


def test_correct_feedback_states_the_speedup():
    # 1.0 ms baseline / 0.25 ms kernel = 4.00x
    assert "4.00x" in feedback.correct_feedback(0.25, 1.0)


def test_correct_feedback_without_timing_says_speed_was_not_measured():
    assert "not measured" in feedback.correct_feedback(None, None)


def test_incorrect_feedback_carries_the_max_relative_error_only():
    # the absolute error of a wrong scalar is the distance to the golden value: not shown to the policy
    msg = feedback.incorrect_feedback("output differs", 0.5, 0.25)
    assert msg == "Incorrect: output differs (max rel error 0.25)."


def test_format_feedback_lists_the_violations():
    msg = feedback.format_error_feedback(["no ModelNew", "try/except at line 3"])
    assert "- no ModelNew" in msg and "- try/except at line 3" in msg


def test_timeout_feedback_names_the_phase_and_limit():
    assert feedback.timeout_feedback("timing your kernel", 30) == (
        "Timeout: timing your kernel did not finish within 30 s (an infinite loop, a deadlock or far too slow)."
    )
