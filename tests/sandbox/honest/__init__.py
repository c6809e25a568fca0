"""A corpus of honest candidate kernels, each paired with the built-in task it solves.

Every ``*.py`` beside this file is a complete candidate (``ModelNew`` + ``load_inline``), written the way
models write them. `ENTRIES` says which task and backend each is for; ``sizes="cpu"`` on the CUDA backend
runs the task at its CPU sizes on the GPU (the microsecond end of the runtime range). `jobs(backend)` gives
``(label, task, source)`` triples for `Sandbox.evaluate_many`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Entry:
    file: str  # stem of the candidate file in this folder
    backend: str  # "cpu" or "cuda"
    task_id: str  # a built-in task id (kevin.data.builtin_tasks)
    sizes: str = "task"  # "task": the backend's own sizes; "cpu": the CPU sizes (CUDA only)

    @property
    def label(self) -> str:
        return self.file if self.sizes == "task" else f"{self.file}@{self.sizes}"


ENTRIES: tuple[Entry, ...] = (
    # CPU backend (cpp_sources), at the tasks' CPU sizes
    Entry("cpu_relu", "cpu", "kevin-L1-ReLU"),
    Entry("cpu_gelu", "cpu", "kevin-L1-GELU"),
    Entry("cpu_sum_dim", "cpu", "kevin-L1-Sum"),
    Entry("cpu_softmax", "cpu", "kevin-L1-Softmax"),
    Entry("cpu_matmul_blocked", "cpu", "kevin-L1-Square_matmul"),
    Entry("cpu_conv2d", "cpu", "kevin-L1-Conv2d"),
    Entry("cpu_layernorm_two_calls", "cpu", "kevin-L1-LayerNorm"),
    # CUDA backend, at the tasks' GPU sizes (H200: from about 0.1 ms to tens of ms) ...
    Entry("cuda_relu", "cuda", "kevin-L1-ReLU"),
    Entry("cuda_gelu_vec4", "cuda", "kevin-L1-GELU"),
    Entry("cuda_matvec_warp", "cuda", "kevin-L1-Matrix_vector_product"),
    Entry("cuda_sum_atomic", "cuda", "kevin-L1-Sum"),
    Entry("cuda_softmax", "cuda", "kevin-L1-Softmax"),
    Entry("cuda_layernorm_two_launches", "cuda", "kevin-L1-LayerNorm"),
    Entry("cuda_matmul_tiled", "cuda", "kevin-L1-Square_matmul"),
    Entry("cuda_matmul_naive", "cuda", "kevin-L1-Square_matmul"),
    Entry("cuda_conv2d_direct", "cuda", "kevin-L1-Conv2d"),
    Entry("cuda_conv2d_relu_bias", "cuda", "kevin-L2-Conv2d_ReLU_BiasAdd"),
    # ... and at the CPU sizes (a few microseconds)
    Entry("cuda_relu", "cuda", "kevin-L1-ReLU", sizes="cpu"),
    Entry("cuda_softmax", "cuda", "kevin-L1-Softmax", sizes="cpu"),
    Entry("cuda_matvec_warp", "cuda", "kevin-L1-Matrix_vector_product", sizes="cpu"),
    Entry("cuda_sum_atomic", "cuda", "kevin-L1-Sum", sizes="cpu"),
)


def source(file: str) -> str:
    """The candidate file's text."""
    return (HERE / f"{file}.py").read_text()


def task(entry: Entry):
    """The built-in task of ``entry``; with ``sizes="cpu"`` a copy whose CUDA sizes are its CPU sizes."""
    from kevin.data import builtin_tasks
    from kevin.data.task import Task

    (t,) = builtin_tasks(names=[entry.task_id])
    if entry.sizes == "task":
        return t
    return Task(f"{t.task_id}@{entry.sizes}", t.source, level=t.level, name=t.name,
                sizes={"cpu": t.sizes.get("cpu", {}), "cuda": t.sizes.get(entry.sizes, {})},
                metadata=dict(t.metadata))


def entries(backend: str, files: tuple[str, ...] | None = None) -> list[Entry]:
    """The entries of ``backend`` (only those of ``files`` when given)."""
    return [e for e in ENTRIES if e.backend == backend and (files is None or e.file in files)]


def jobs(backend: str, files: tuple[str, ...] | None = None) -> list[tuple[str, object, str]]:
    """``(label, task, source)`` for every entry of ``backend``."""
    return [(e.label, task(e), source(e.file)) for e in entries(backend, files)]
