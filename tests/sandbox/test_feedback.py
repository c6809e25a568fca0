"""feedback: one short message per status."""

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


def test_compile_feedback_starts_with_the_first_compiler_error():
    msg = feedback.compile_error_feedback(NVCC_LOG)
    assert msg.startswith("Compilation failed.")
    assert 'identifier "undeclared_name" is undefined' in msg
    assert "[1/3] c++" not in msg  # build commands are dropped


def test_compile_feedback_is_trimmed():
    msg = feedback.compile_error_feedback("x.cpp:1:1: error: bad\n" + "y" * 10_000)
    assert len(msg) <= feedback.MAX_CHARS


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
