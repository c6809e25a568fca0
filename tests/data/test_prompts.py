"""The prompt protocol: what each turn's prompt holds, and truncation to a token budget."""

import ast

import pytest

from kevin.data.prompts import EXAMPLE_CPU, EXAMPLE_CUDA, Attempt, build_messages, build_prompt, fence
from kevin.data.task import Task

SOURCE = """\
import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
"""
TASK = Task("relu", SOURCE, level=1, sizes={"cpu": {"N": 64}})

KERNEL_1 = "class ModelNew:\n    # first kernel, marker K1\n    pass\n"
KERNEL_2 = "class ModelNew:\n    # second kernel, marker K2\n    pass\n"
ATTEMPT_1 = Attempt(KERNEL_1, "Wrote a naive kernel, marker S1.", "Compilation failed: marker F1.")
ATTEMPT_2 = Attempt(KERNEL_2, "Fixed the build, marker S2.", "Correct; speedup 0.80x, marker F2.")


def user_text(messages):
    assert messages[-1]["role"] == "user"
    return messages[-1]["content"]


def test_first_turn_is_one_user_message_with_task_instructions_and_example():
    msgs = build_messages(TASK)
    assert [m["role"] for m in msgs] == ["user"]
    text = user_text(msgs)
    assert text.startswith("You are given the following architecture:")
    assert "class Model(nn.Module)" in text
    assert "load_inline" in text and "`ModelNew`" in text and "summarise your changes" in text
    assert EXAMPLE_CUDA.rstrip() in text
    assert "previous attempts" not in text


def test_system_prompt_comes_first_when_given():
    msgs = build_messages(TASK, system_prompt="You are a kernel engineer.")
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert msgs[0]["content"] == "You are a kernel engineer."


def test_second_turn_holds_first_kernel_summary_and_feedback_but_no_example():
    text = user_text(build_messages(TASK, [ATTEMPT_1]))
    assert "Here are your previous attempts:" in text
    assert "marker K1" in text and "marker S1" in text and "marker F1" in text
    assert EXAMPLE_CUDA.rstrip() not in text and "Here is an example" not in text
    assert "class Model(nn.Module)" in text  # the task is still there


def test_second_turn_holds_no_thought_because_attempt_has_no_thought_field():
    # The rollout builds attempts from turns; a turn's thought has nowhere to go.
    class FakeResult:
        feedback = "Incorrect: max abs error 3.0."

    class FakeTurn:
        thought = "Okay, SECRET-THOUGHT marker T1."
        code = KERNEL_1
        summary = "Summary S1."
        result = FakeResult()

    attempt = Attempt.from_turn(FakeTurn())
    assert not hasattr(attempt, "thought")
    text = user_text(build_messages(TASK, [attempt]))
    assert "SECRET-THOUGHT" not in text
    assert "marker K1" in text and "Summary S1." in text and "max abs error 3.0" in text


def test_attempts_appear_in_order_and_prompt_ends_with_restart_instruction():
    text = user_text(build_messages(TASK, [ATTEMPT_1, ATTEMPT_2]))
    order = [text.index(s) for s in ("marker K1", "marker S1", "marker F1", "marker K2", "marker S2", "marker F2")]
    assert order == sorted(order)
    assert text.rstrip().endswith("summarise your changes in a few sentences.")
    assert "again from the beginning" in text.split("marker F2")[1]


def test_failed_attempt_without_code_or_summary_is_still_shown_with_its_feedback():
    text = user_text(build_messages(TASK, [Attempt(None, None, "Parse error: no code block defining ModelNew")]))
    assert "no code could be extracted" in text and "(no summary)" in text
    assert "Parse error: no code block defining ModelNew" in text


def test_cpu_backend_uses_cpu_sizes_instructions_and_example():
    text = user_text(build_messages(TASK, backend="cpu"))
    assert "N = 64" in text and "N = 4096" not in text
    assert "cpp_sources" in text and "x86-64 CPU" in text and "CUDA device" not in text
    assert EXAMPLE_CPU.rstrip() in text and EXAMPLE_CUDA.rstrip() not in text


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="unknown backend"):
        build_messages(TASK, backend="rocm")


def test_examples_are_valid_python_with_real_kernels():
    for example in (EXAMPLE_CUDA, EXAMPLE_CPU):
        tree = ast.parse(example)
        classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
        assert classes == ["ModelNew"]
    assert "__global__" in EXAMPLE_CUDA and "add_kernel<<<blocks, threads>>>" in EXAMPLE_CUDA
    assert "const int threads = 256;" in EXAMPLE_CUDA
    assert "cuda_sources" not in EXAMPLE_CPU and "for (int64_t i = 0; i < n; ++i)" in EXAMPLE_CPU


def words(text: str) -> int:
    return len(text.split())


def test_budget_drops_earliest_attempts_first_and_keeps_the_task():
    attempts = [Attempt(f"class ModelNew:\n    # kernel {i} " + "pad " * 200 + "\n", f"summary {i}", f"feedback {i}")
                for i in range(1, 5)]
    full = words(user_text(build_messages(TASK, attempts)))
    # Each attempt adds ~210 words; a budget ~2.5 attempts below the full prompt must drop the 3 oldest
    # (dropping 2 leaves ~full-420 > full-520; dropping 3 leaves ~full-630 <= full-520).
    msgs = build_messages(TASK, attempts, max_prompt_tokens=full - 520, count_tokens=words)
    text = user_text(msgs)
    assert words(text) <= full - 520
    assert "kernel 1 " not in text and "kernel 2 " not in text and "kernel 3 " not in text
    assert "kernel 4 " in text and "### Attempt 4" in text  # original numbering kept
    assert "3 earlier attempts were omitted" in text
    assert "class Model(nn.Module)" in text


def test_budget_that_fits_keeps_every_attempt():
    msgs_free = build_messages(TASK, [ATTEMPT_1, ATTEMPT_2])
    msgs_budget = build_messages(TASK, [ATTEMPT_1, ATTEMPT_2], max_prompt_tokens=10**6, count_tokens=words)
    assert msgs_free == msgs_budget


def test_budget_too_small_for_the_task_still_returns_the_task():
    text = user_text(build_messages(TASK, [ATTEMPT_1, ATTEMPT_2], max_prompt_tokens=5, count_tokens=words))
    assert "class Model(nn.Module)" in text
    assert "2 earlier attempts were omitted" in text and "marker K2" not in text
    assert "Here is an example" not in text  # attempts were made, even if none is shown


def test_budget_counts_the_system_message_too():
    base = words(user_text(build_messages(TASK, [ATTEMPT_1])))
    system = "word " * 50
    msgs = build_messages(TASK, [ATTEMPT_1], max_prompt_tokens=base + 10, count_tokens=words, system_prompt=system)
    assert "marker K1" not in user_text(msgs)


def test_fence_outgrows_backticks_inside_the_code():
    block = fence('s = """\n```\nnot a fence end\n```\n"""')
    assert block.startswith("````python\n") and block.endswith("\n````")


def test_build_prompt_with_omitted_attempts_says_so():
    text = build_prompt(TASK, [ATTEMPT_2], first_attempt_number=2)
    assert "1 earlier attempt was omitted" in text and "### Attempt 2" in text


@pytest.mark.parametrize("backend, example", [("cuda", EXAMPLE_CUDA), ("cpu", EXAMPLE_CPU)])
def test_first_turn_examples_pass_the_sandbox_static_check(backend, example):
    # The example teaches the answer format; our own format check must accept it. (The CPU example
    # also compiles and returns exactly a + b -- checked by hand, not here: a compile costs ~35 s.)
    from kevin.sandbox.static.source import check_format

    assert check_format(example, backend=backend) == []
    other = "cpu" if backend == "cuda" else "cuda"
    assert check_format(example, backend=other) != []  # each example is specific to its backend
