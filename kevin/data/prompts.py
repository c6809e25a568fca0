"""The paper's prompt protocol, in our own words: `build_messages(task, attempts)` -> chat messages.

Turn 1 (no attempts): the task's PyTorch source, the instructions, and one worked example of the answer
format (our own element-wise-add ``ModelNew``). Turn t >= 2: the same task and instructions without the
example, then every earlier attempt in order -- its kernel, its summary, its sandbox feedback -- and a
closing instruction to think again from scratch and write new, complete code. Earlier chains of thought
never appear: :class:`Attempt` has no field for them (paper section 4.1: thoughts are replaced by the
model's own summaries so the context stays short).

When the prompt is over its token budget, the earliest attempts are dropped first (paper App. D) and a
note says how many were left out; the task itself is never dropped.

Two backends share one layout: ``"cuda"`` (raw CUDA through ``load_inline(cuda_sources=...)``, tuned for
an H100/H200) and ``"cpu"`` (C++ through ``load_inline(cpp_sources=...)``, tuned for a multi-core x86
CPU), so the whole loop runs on machines with no GPU.

>>> from kevin.data.task import Task
>>> task = Task("demo", "import torch\\nclass Model(torch.nn.Module):\\n    pass\\n")
>>> msgs = build_messages(task)
>>> [m["role"] for m in msgs], "Here is an example" in msgs[0]["content"]
(['user'], True)
>>> msgs = build_messages(task, [Attempt("class ModelNew: ...", "Tried X.", "Compilation failed: ...")])
>>> "Here is an example" in msgs[0]["content"], "Here are your previous attempts:" in msgs[0]["content"]
(False, True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from kevin.data.task import BACKENDS, Task

__all__ = [
    "Attempt",
    "build_messages",
    "build_prompt",
    "EXAMPLE_CUDA",
    "EXAMPLE_CPU",
    "example_for",
]


@dataclass(frozen=True)
class Attempt:
    """One earlier turn as the model will see it again: its kernel, its summary, the sandbox feedback.

    ``code`` is None when no code could be extracted (a parse failure); ``summary`` is None when the
    model wrote none. There is deliberately no ``thought`` field: earlier thoughts are never shown.
    """

    code: str | None
    summary: str | None
    feedback: str

    @classmethod
    def from_turn(cls, turn: Any) -> "Attempt":
        """From a :class:`kevin.core.types.Turn` (anything with ``code``, ``summary``, ``result.feedback``)."""
        return cls(code=turn.code, summary=turn.summary, feedback=turn.result.feedback)


# ---------------------------------------------------------------------------------------------------
# The one-shot examples (first turn only). Both are complete, honest programs: they compile and compute
# a + b for float32 tensors of any shape with a hand-written kernel; nothing is delegated to PyTorch.

EXAMPLE_CUDA = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

add_cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b,
                           float* __restrict__ out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = a[i] + b[i];
    }
}

torch::Tensor add_forward(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "add_forward: inputs must be CUDA tensors");
    TORCH_CHECK(a.sizes() == b.sizes(), "add_forward: inputs must have the same shape");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,
                "add_forward: inputs must be float32");
    torch::Tensor a_c = a.contiguous();
    torch::Tensor b_c = b.contiguous();
    torch::Tensor out = torch::empty_like(a_c);
    const int64_t n = a_c.numel();
    if (n == 0) {
        return out;
    }
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    add_kernel<<<blocks, threads>>>(a_c.data_ptr<float>(), b_c.data_ptr<float>(), out.data_ptr<float>(), n);
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "add_kernel launch failed: ", cudaGetErrorString(err));
    return out;
}
"""

add_cpp_source = "torch::Tensor add_forward(torch::Tensor a, torch::Tensor b);"

add_extension = load_inline(
    name="kevin_example_add_cuda",
    cpp_sources=add_cpp_source,
    cuda_sources=add_cuda_source,
    functions=["add_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.add = add_extension

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.add.add_forward(a, b)
'''

EXAMPLE_CPU = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

add_cpp_source = r"""
#include <torch/extension.h>

torch::Tensor add_forward(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(!a.is_cuda() && !b.is_cuda(), "add_forward: inputs must be CPU tensors");
    TORCH_CHECK(a.sizes() == b.sizes(), "add_forward: inputs must have the same shape");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,
                "add_forward: inputs must be float32");
    torch::Tensor a_c = a.contiguous();
    torch::Tensor b_c = b.contiguous();
    torch::Tensor out = torch::empty_like(a_c);
    const float* __restrict__ pa = a_c.data_ptr<float>();
    const float* __restrict__ pb = b_c.data_ptr<float>();
    float* __restrict__ po = out.data_ptr<float>();
    const int64_t n = a_c.numel();
    for (int64_t i = 0; i < n; ++i) {
        po[i] = pa[i] + pb[i];
    }
    return out;
}
"""

add_extension = load_inline(
    name="kevin_example_add_cpu",
    cpp_sources=add_cpp_source,
    functions=["add_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.add = add_extension

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.add.add_forward(a, b)
'''


def example_for(backend: str) -> str:
    """The first-turn example program for ``backend`` ("cuda" or "cpu")."""
    _check_backend(backend)
    return EXAMPLE_CUDA if backend == "cuda" else EXAMPLE_CPU


# ---------------------------------------------------------------------------------------------------
# Instruction text, one per backend. Paraphrased from the paper's App. D structure, not copied.

_INSTRUCTIONS = {
    "cuda": """\
Rewrite this architecture so that its computation runs in raw CUDA kernels that you write yourself, \
replacing the PyTorch operators, and make it as fast as you can on an NVIDIA H100/H200 GPU. Techniques \
worth considering: shared-memory tiling, fusing several operators into one kernel, warp-level \
primitives (shuffles, reductions) and vectorised memory access.

Rules:
- Write the kernels as CUDA C++ source strings and compile them with \
`torch.utils.cpp_extension.load_inline` (`cpp_sources` for the declarations, `cuda_sources` for the \
kernels and their host wrappers); call the compiled functions from Python.
- Name the new class `ModelNew`. Its constructor and its `forward` take the same arguments as `Model`'s.
- From `torch.nn`, use only `Module`, `Parameter`, the containers (`ModuleList`, `ModuleDict`, \
`ParameterList`, `ParameterDict`, `Sequential`) and `torch.nn.init`. Do not compute anything with \
PyTorch operators: every computation must happen in your kernels.
- Inputs and outputs are tensors on the CUDA device.
- Reply with the complete new program in a single ```python code block: no test code, no usage example, \
nothing left out.
- Your program will be compiled, checked for correctness against `Model` and timed. You will get \
feedback on its correctness and speedup and can keep improving it.
- After the code block, summarise your changes in a few sentences.""",
    "cpu": """\
Rewrite this architecture so that its computation runs in C++ kernels that you write yourself, \
replacing the PyTorch operators, and make it as fast as you can on a multi-core x86-64 CPU. Techniques \
worth considering: cache-friendly loop orders and blocking, fusing several operators into one loop nest, \
contiguous inner loops the compiler can vectorise (`__restrict__` pointers, simple indexing) and \
avoiding needless copies. Do not use OpenMP (the extension is built without it).

Rules:
- Write the kernels as a C++ source string and compile it with \
`torch.utils.cpp_extension.load_inline` through `cpp_sources` (no `cuda_sources`); call the compiled \
functions from Python.
- Name the new class `ModelNew`. Its constructor and its `forward` take the same arguments as `Model`'s.
- From `torch.nn`, use only `Module`, `Parameter`, the containers (`ModuleList`, `ModuleDict`, \
`ParameterList`, `ParameterDict`, `Sequential`) and `torch.nn.init`. Do not compute anything with \
PyTorch operators: every computation must happen in your kernels.
- Inputs and outputs are tensors on the CPU.
- Reply with the complete new program in a single ```python code block: no test code, no usage example, \
nothing left out.
- Your program will be compiled, checked for correctness against `Model` and timed. You will get \
feedback on its correctness and speedup and can keep improving it.
- After the code block, summarise your changes in a few sentences.""",
}

_TASK_HEADER = "You are given the following architecture:"
_EXAMPLE_HEADER = (
    "Here is an example of the expected answer format. It replaces an element-wise addition "
    "`a + b` with a hand-written kernel:"
)
_ATTEMPTS_HEADER = "Here are your previous attempts:"
_CLOSING = (
    "Think the problem through again from the beginning, using the feedback above, and write a new, "
    "complete `ModelNew` program in a single ```python code block. After the code block, summarise "
    "your changes in a few sentences."
)
_NO_CODE = "(no code could be extracted from this attempt)"
_NO_SUMMARY = "(no summary)"


def build_messages(
    task: Task,
    attempts: Sequence[Attempt] = (),
    *,
    backend: str = "cuda",
    max_prompt_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    system_prompt: str | None = None,
) -> list[dict[str, str]]:
    """Chat messages for one turn: ``[{"role": "system", ...}?, {"role": "user", "content": prompt}]``.

    Args:
        task: the problem; its source at ``backend``'s sizes is shown (``task.source_for(backend)``).
        attempts: every earlier turn of this trajectory, oldest first (length t-1 on turn t). Empty on
            the first turn, which alone carries the worked example.
        backend: "cuda" or "cpu"; chooses the instructions and the example.
        max_prompt_tokens, count_tokens: the token budget. When both are given and
            ``sum(count_tokens(m["content"]) for m in messages) > max_prompt_tokens``, the earliest
            attempts are dropped one at a time (a note says how many) until it fits or none is left;
            the task and instructions are never dropped, so the result can still exceed the budget.
            Chat-template tokens are not counted: leave a margin for them.
        system_prompt: optional system message placed first (the paper uses none).

    Returns one user message (after the optional system message), ready for
    ``tokenizer.apply_chat_template(messages, add_generation_prompt=True)``.

    Example: with 3 attempts of ~1000 tokens each, a 700-token base prompt and a budget of 3000,
    attempt 1 is dropped (the prompt then says "1 earlier attempt was omitted") and attempts 2 and 3
    are kept, still numbered 2 and 3.
    """
    _check_backend(backend)
    if (max_prompt_tokens is None) != (count_tokens is None):
        raise ValueError("give both max_prompt_tokens and count_tokens, or neither")
    attempts = tuple(attempts)

    def messages_dropping(n_dropped: int) -> list[dict[str, str]]:
        prompt = build_prompt(task, attempts[n_dropped:], backend=backend, first_attempt_number=n_dropped + 1)
        msgs = [] if system_prompt is None else [{"role": "system", "content": system_prompt}]
        return msgs + [{"role": "user", "content": prompt}]

    if max_prompt_tokens is None or count_tokens is None:
        return messages_dropping(0)
    # Earliest first: the most recent attempts carry the freshest feedback. Linear scan: T is small.
    for n_dropped in range(len(attempts) + 1):
        msgs = messages_dropping(n_dropped)
        if sum(count_tokens(m["content"]) for m in msgs) <= max_prompt_tokens:
            return msgs
    return msgs  # even with every attempt dropped it does not fit; the task is kept regardless


def build_prompt(
    task: Task,
    attempts: Sequence[Attempt] = (),
    *,
    backend: str = "cuda",
    first_attempt_number: int = 1,
) -> str:
    """The user prompt's text. ``attempts`` are the attempts to show, oldest first; the first of them is
    attempt number ``first_attempt_number`` (> 1 means ``first_attempt_number - 1`` earlier attempts
    were omitted, and the prompt says so). The example appears only when no attempt has been made,
    i.e. ``first_attempt_number == 1`` and ``attempts`` is empty."""
    _check_backend(backend)
    if first_attempt_number < 1:
        raise ValueError(f"first_attempt_number must be >= 1, got {first_attempt_number}")
    omitted = first_attempt_number - 1
    parts = [_TASK_HEADER, fence(task.source_for(backend)), _INSTRUCTIONS[backend]]
    if not attempts and omitted == 0:
        parts += [_EXAMPLE_HEADER, fence(example_for(backend))]
        return "\n\n".join(parts) + "\n"
    parts.append(_ATTEMPTS_HEADER)
    if omitted:
        noun = "attempt was" if omitted == 1 else "attempts were"
        parts.append(f"({omitted} earlier {noun} omitted to fit the context; the most recent ones follow.)")
    for number, attempt in enumerate(attempts, start=first_attempt_number):
        parts.append(_format_attempt(number, attempt))
    parts.append(_CLOSING)
    return "\n\n".join(parts) + "\n"


def _format_attempt(number: int, attempt: Attempt) -> str:
    code = _NO_CODE if attempt.code is None else fence(attempt.code)
    summary = _NO_SUMMARY if not attempt.summary or not attempt.summary.strip() else attempt.summary.strip()
    feedback = attempt.feedback.strip() or "(no feedback)"
    return f"### Attempt {number}\n\nKernel:\n{code}\n\nYour summary:\n{summary}\n\nFeedback:\n{feedback}"


def fence(code: str, language: str = "python") -> str:
    """``code`` in a fenced block whose fence is longer than any backtick run inside it (so a kernel
    that itself contains ``` cannot close the block early).

    >>> fence("x = 1")
    '```python\\nx = 1\\n```'
    """
    longest = max((len(m) for m in re.findall(r"`+", code)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{language}\n{code.rstrip()}\n{ticks}"


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
