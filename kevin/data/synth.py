"""The task synthesizer: the paper's Appendix A recipe for new fused (level-2) tasks, as code.

Kevin's 80 new evaluation tasks were made by sampling **one main (expensive) op plus 2 to 5 other
ops** from a fixed vocabulary, having an LLM write a PyTorch program that combines them with sample
sizes, keeping a task only if it runs and its PyTorch runtime on an H200 exceeds 0.1 ms, and dropping
operator sequences KernelBench already has (docs/method.md, "Tasks"). Here a seeded ``random.Random``
does the sampling and the program writer ``kevin.data.writer`` replaces the LLM:

- ``sample_program`` draws a main op, then 2 to 5 distinct others, each uniformly among those the
  writer can append to the program so far, with every size and constant drawn from the writer's menus;
- a program is kept only if it runs, its output is finite and informative (not tiny, not constant,
  not the input passed through, dependent on the input: the fabricated outputs of docs/threat-model.md,
  "How each attack is stopped", must fail) and its eager runtime on the target device reaches
  ``min_runtime_ms``; its operator sequence must be new.

Differences from the paper: no LLM (so no creative glue code such as custom reshapes), no hand
inspection (the informativeness filter and the sandbox's calibration stand in for it), and the
vocabulary's duplicates ("Scale"/"Scaling", "ResidualAdd" listed twice) are merged.

>>> operator_sequence(Task("kb-L2-1", "", level=2, name="Conv2d_ReLU_BiasAdd"))
('conv2d', 'relu', 'biasadd')
>>> tasks = synthesize_tasks(2, seed=0)           # doctest: +SKIP
>>> tasks[0].metadata["ops"]                      # doctest: +SKIP
('ConvTranspose3d', 'ReLU', 'Max', 'HardSwish', 'Hardtanh', 'Subtract')
"""

from __future__ import annotations

import logging
import random
import statistics
import time
from typing import Any, Sequence

from kevin.data.builtin import builtin_tasks
from kevin.data.task import Task
from kevin.data.writer import MAIN_OPS, OTHER_OPS, NotApplicable, append_op, begin_program, finish_program

log = logging.getLogger(__name__)

DEFAULT_MIN_RUNTIME_MS = {"cuda": 0.1, "cpu": 0.0}


# ---------------------------------------------------------------------------------------------------
# Sampling a program


def sample_program(rng: random.Random) -> Task | None:
    """One random program: a main op, then 2-5 distinct others each drawn among those that apply.

    Returns None when fewer than two others could be placed.
    """
    b = begin_program(rng.choice(MAIN_OPS), rng)
    n_others = rng.randint(2, 5)
    used: set[str] = set()
    for _ in range(n_others):
        candidates = [op for op in OTHER_OPS if op not in used]
        rng.shuffle(candidates)
        for op in candidates:  # the first that applies: uniform among the applicable ones
            try:
                append_op(b, op)
            except NotApplicable:
                continue
            used.add(op)
            break
        else:
            break
    if len(used) < 2:
        return None
    return finish_program(b, metadata={"n_others": len(used)})


# ---------------------------------------------------------------------------------------------------
# Running a task (shared with the tests of the built-in suite)


def load_program(task: Task, backend: str = "cpu") -> dict[str, Any]:
    """Exec the task's source at ``backend``'s sizes in a fresh namespace; return the namespace."""
    namespace: dict[str, Any] = {"__name__": f"kevin_task_{task.task_id}"}
    exec(compile(task.source_for(backend), f"<task {task.task_id}>", "exec"), namespace)  # noqa: S102 - trusted reference code
    return namespace


def run_reference(task: Task, *, backend: str = "cpu", device: str = "cpu", seed: int = 0, input_seed: int | None = None):
    """Build ``Model(*get_init_inputs())`` under ``seed`` in eval mode (as the sandbox does) and run it
    on ``get_inputs()`` drawn under ``input_seed`` (default ``seed + 1``). Returns ``(inputs, output)``.
    The global RNG is restored.
    """
    import torch

    ns = load_program(task, backend)
    # tensors are created on ``device`` directly: drawing GPU-sized inputs on the host is slow
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        model = ns["Model"](*ns["get_init_inputs"]())  # training mode, as the sandbox runs it
        torch.manual_seed(seed + 1 if input_seed is None else input_seed)
        inputs = list(ns["get_inputs"]())
        with torch.no_grad():
            out = model(*inputs)
    return inputs, out


def output_shape_on_meta(task: Task, backend: str = "cuda") -> tuple[int, ...]:
    """The output shape at ``backend``'s sizes, computed on the meta device (no memory, no compute)."""
    import torch

    ns = load_program(task, backend)
    with torch.device("meta"):
        model = ns["Model"](*ns["get_init_inputs"]())
        out = model(*ns["get_inputs"]())
    return tuple(out.shape)


def informative_output_problems(inputs: Sequence[Any], out: Any, out_other: Any, *, min_change: float = 1e-2) -> list[str]:
    """Why an output would let a trivial answer pass (empty when it would not).

    ``out`` and ``out_other`` come from the same model on two independent input draws. Checked:
    finite; not tiny (max |out| >= 0.05, so zeros fail an absolute tolerance); not constant within
    (std > 1e-4) nor nearly the same for other inputs (relative change > ``min_change``); not the first input passed through.
    """
    import torch

    problems = []
    o = out.double()
    if not torch.isfinite(o).all():
        return ["output has non-finite values"]
    scale = o.abs().max().item()
    if scale < 0.05:
        problems.append(f"output is tiny (max |out| = {scale:.2e})")
    if o.numel() > 1 and o.std().item() <= 1e-4:
        problems.append("output is constant")
    other = out_other.double()
    if other.shape == o.shape and (o - other).norm().item() <= min_change * max(o.norm().item(), 1e-12):
        problems.append("output does not depend on the input")
    x = inputs[0]
    if isinstance(x, torch.Tensor) and x.shape == out.shape:
        xd = x.double()
        if (o - xd).norm().item() <= 1e-2 * max(o.norm().item(), 1e-12):
            problems.append("output is the input passed through")
    return problems


def eager_runtime_ms(task: Task, *, device: str = "cpu", repeats: int = 5) -> float:
    """Median eager runtime of the reference forward in ms: at CPU sizes on the CPU, at the source's
    (GPU) sizes on CUDA, timed with CUDA events after two warm-up calls."""
    import torch

    backend = "cpu" if device == "cpu" else "cuda"
    ns = load_program(task, backend)
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(0)
        model = ns["Model"](*ns["get_init_inputs"]())
        inputs = list(ns["get_inputs"]())
    times = []
    with torch.no_grad():
        for i in range(repeats + 2):
            if device == "cpu":
                t0 = time.perf_counter()
                model(*inputs)
                dt = (time.perf_counter() - t0) * 1e3
            else:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize(device)
                start.record()
                model(*inputs)
                end.record()
                torch.cuda.synchronize(device)
                dt = start.elapsed_time(end)
            if i >= 2:
                times.append(dt)
    return statistics.median(times)


def vet_task(task: Task, *, device: str = "cpu", min_runtime_ms: float | None = None) -> tuple[list[str], float | None]:
    """Run ``task`` on ``device`` (CPU sizes on the CPU, GPU sizes elsewhere): (problems, runtime_ms).

    Problems: an exception, an uninformative output (``informative_output_problems``), or a runtime
    under ``min_runtime_ms`` (default: 0.1 ms on CUDA, 0 on the CPU, where the runtime is not measured).
    """
    backend = "cpu" if device == "cpu" else "cuda"
    threshold = DEFAULT_MIN_RUNTIME_MS[backend] if min_runtime_ms is None else min_runtime_ms
    try:
        inputs, out = run_reference(task, backend=backend, device=device, seed=0)
        _, out_other = run_reference(task, backend=backend, device=device, seed=0, input_seed=12345)
    except Exception as e:  # noqa: BLE001 - any failure to run disqualifies the program
        return [f"does not run: {type(e).__name__}: {e}"], None
    # a margin over the tests' 1e-2, so that a kept task stays informative under other seeds
    problems = informative_output_problems([x.cpu() for x in inputs], out.cpu(), out_other.cpu(), min_change=5e-2)
    runtime = None
    if not problems and threshold > 0:
        runtime = eager_runtime_ms(task, device=device)
        if runtime < threshold:
            problems.append(f"eager runtime {runtime:.3f} ms < {threshold} ms")
    return problems, runtime


# ---------------------------------------------------------------------------------------------------
# The public entry point


def operator_sequence(task: Task) -> tuple[str, ...]:
    """A task's operator sequence: ``metadata["ops"]``, else its name split on "_" (KernelBench
    level-2 names such as "Conv2d_ReLU_BiasAdd"), lower-cased for comparison."""
    ops = task.metadata.get("ops")
    if ops is None:
        ops = [p for p in task.name.split("_") if p]
    return tuple(str(o).lower() for o in ops)


def synthesize_tasks(
    n: int,
    *,
    seed: int = 0,
    device: str = "cpu",
    min_runtime_ms: float | None = None,
    existing: Sequence[Task] | None = None,
    max_attempts: int | None = None,
    calibrate: bool = False,
) -> list[Task]:
    """``n`` new fused tasks, sampled as in the paper's Appendix A (see the module docstring).

    Args:
        n: how many tasks to return (fewer only if ``max_attempts`` runs out).
        seed: seeds the ``random.Random`` that picks ops, sizes and constants: the same seed gives
            identical sources (on the CPU; on CUDA the runtime threshold can differ between GPUs).
        device: where each program is run and timed: "cpu" (at its CPU sizes) or "cuda[:i]" (at its
            GPU sizes, which is what the 0.1 ms threshold of the paper refers to).
        min_runtime_ms: keep a task only if its median eager runtime reaches this; default 0.1 on
            CUDA, 0 (not timed) on the CPU.
        existing: tasks whose operator sequences must not be repeated; default the built-in suite.
            Pass ``load_tasks(kernelbench) + builtin_tasks()`` to also avoid KernelBench's.
        max_attempts: how many programs to sample at most (default ``50 * n + 100``).
        calibrate: also require the sandbox's negative-control calibration at CPU sizes
            (``kevin.sandbox.calibrate_many``; it stands in for the paper's inspection by hand). Its
            input sets come from a secret seed, so in principle the kept set can vary between calls.

    Each task has level 2, name "Main_Op_..._Op" (KernelBench style), id "syn-<hash of source>",
    ``metadata["ops"]`` its operator sequence and ``metadata["eager_ms"]`` the runtime when measured.
    """
    if existing is None:
        existing = builtin_tasks()
    rng = random.Random(seed)
    seen = {operator_sequence(t) for t in existing}
    tasks: list[Task] = []
    budget = 50 * n + 100 if max_attempts is None else max_attempts
    attempts = 0
    while len(tasks) < n and attempts < budget:
        pending: list[Task] = []
        while len(tasks) + len(pending) < n and attempts < budget:
            attempts += 1
            task = sample_program(rng)
            if task is None or operator_sequence(task) in seen:
                continue
            problems, runtime = vet_task(task, device=device, min_runtime_ms=min_runtime_ms)
            if problems:
                log.debug("dropped %s: %s", task.name, "; ".join(problems))
                continue
            seen.add(operator_sequence(task))
            meta = dict(task.metadata, seed=seed)
            if runtime is not None:
                meta["eager_ms"] = {device: round(runtime, 4)}
            pending.append(Task(task.task_id, task.source, level=task.level, name=task.name, sizes=task.sizes, metadata=meta))
        if calibrate and pending:
            from kevin.sandbox.calibrate import calibrate_many

            reports = calibrate_many(pending, device="cpu")
            for t, r in zip(pending, reports):
                if not r.passed:
                    log.debug("dropped %s: calibration accepted %s", t.name, r.accepted_controls or dict(r.controls))
            pending = [t for t, r in zip(pending, reports) if r.passed]
        tasks += pending
    if len(tasks) < n:
        log.warning("synthesize_tasks: only %d of %d tasks after %d attempts", len(tasks), n, budget)
    return tasks


__all__ = [
    "eager_runtime_ms",
    "informative_output_problems",
    "operator_sequence",
    "output_shape_on_meta",
    "run_reference",
    "sample_program",
    "synthesize_tasks",
    "vet_task",
]
