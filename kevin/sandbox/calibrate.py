"""Negative-control calibration: is a task able to tell a real kernel from a fabricated output?

For each task, four fake "kernels" are scored by the sandbox's own comparison on the sandbox's own input
sets (the task's distribution plus its signed / scaled / heavy-tailed variants); a task is usable only
when all four are rejected (attacks B1-B4 of docs/threat-model.md):

- ``zeros``: zeros of the reference's shape and dtype (B1);
- ``mean_constant``: every element equal to one constant, the mean of the reference on the first input
  set (a constant learnt offline from the task's distribution: B1, B3);
- ``passthrough``: an input of the output's shape returned as it is (B2); "not applicable" when no
  input has the output's shape;
- ``subsampled``: the reference itself run on inputs with every other element zeroed and the rest
  doubled, an unbiased estimate of any sum or mean (B4).

The controls are plain functions of golden data, evaluated in this process: nothing is compiled and one
golden process serves a whole batch of tasks, so `calibrate_many` costs well under a second per
CPU-sized task.
"""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from . import _golden_run, _resolve, _scratch, compare, feedback
from kevin.sandbox.build import harness as _harness
from .config import SandboxConfig
from .result import EvalResult

CONTROLS = ("zeros", "mean_constant", "passthrough", "subsampled")


@dataclass(frozen=True)
class CalibrationReport:
    """``passed`` when every applicable control was rejected; ``controls``: name -> EvalResult or a verdict string.

    An EvalResult with status "incorrect" is a rejected control (good); "correct" means the control
    passed the checks, so the task cannot tell that fake from a kernel (bad).
    """

    task_id: str
    passed: bool
    controls: Mapping[str, EvalResult | str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "controls", MappingProxyType(dict(self.controls)))

    @property
    def accepted_controls(self) -> list[str]:
        """Names of the controls that were NOT rejected (empty when the task is usable)."""
        return [k for k, v in self.controls.items() if isinstance(v, EvalResult) and v.correct]


def calibrate(task: Any, *, device: str = "cpu", config: SandboxConfig | None = None) -> CalibrationReport:
    """Run the negative controls for one task (see the module docstring)."""
    return calibrate_many([task], device=device, config=config)[0]


def calibrate_many(tasks: Sequence[Any], *, device: str = "cpu", config: SandboxConfig | None = None) -> list[CalibrationReport]:
    """`calibrate` for many tasks with one golden process; reports in task order."""
    config = config or SandboxConfig()
    spec = _resolve.resolve_device(device)
    sources = []
    for task in tasks:
        src = task.source_for(spec.backend)
        _resolve.validate_task_source(src, task.task_id)
        sources.append(src)
    seed = config.seed if config.seed is not None else secrets.randbits(63)
    _scratch.sweep()
    root, owner_fd = _scratch.make_root()  # swept by a later Sandbox if this process is killed
    try:
        keys = [f"t{i}" for i in range(len(tasks))]
        gpu = _resolve.physical_gpu(spec.gpus[0]) if spec.backend == "cuda" else None
        permute = None
        if gpu is not None:  # the golden process's timings need the sandbox's own kernel
            permute = _harness.build_permute(os.path.join(root, "harness"), _harness.default_arch(spec.gpus[0]))
            _harness.check_launch(permute, spec.gpus[0])
        goldens = _golden_run.run_golden(list(zip(keys, sources)), root=root, gpu=gpu, config=config, seed=seed,
                                         mode="calibrate", n_rechecks=0, permute=permute)
        reports = []
        for task, key in zip(tasks, keys):
            golden = goldens[key]
            if golden.error is not None:
                reports.append(CalibrationReport(task.task_id, False, {"golden": f"error: {golden.error}"}))
                continue
            controls = run_controls(golden, config)
            passed = all(not (isinstance(v, EvalResult) and v.correct) for v in controls.values())
            reports.append(CalibrationReport(task.task_id, passed, controls))
        return reports
    finally:
        shutil.rmtree(root, ignore_errors=True)
        os.close(owner_fd)


def control_outputs(name: str, refs: list[Any], inputs: list[Any], sub: list[Any], first_refs: list[Any]) -> list[Any] | None:
    """The fake outputs of control ``name`` for one input set (None = not applicable).

    ``first_refs`` are the reference outputs of the first set, the source of the mean constant.
    """
    import torch

    if name == "zeros":
        return [torch.zeros_like(r) for r in refs]
    if name == "mean_constant":
        outs = []
        for r, r0 in zip(refs, first_refs):
            rf = r0.to(torch.float64)
            m = rf[torch.isfinite(rf)].mean() if rf.numel() else torch.tensor(0.0)
            outs.append(torch.full_like(r, float(m) if r.is_floating_point() else round(float(m))))
        return outs
    if name == "passthrough":
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
        outs = []
        for r in refs:
            match = next((x for x in tensors if tuple(x.shape) == tuple(r.shape)), None)
            if match is None:
                return None
            outs.append(match)
        return outs
    if name == "subsampled":
        return sub
    raise ValueError(f"unknown control {name!r}")


def run_controls(golden: _golden_run.Golden, config: SandboxConfig) -> dict[str, EvalResult | str]:
    tensors = _golden_run.load_inputs(golden)
    results: dict[str, EvalResult | str] = {}
    for name in CONTROLS:
        comparisons = []
        applicable = True
        for k, entry in enumerate(golden.meta["sets"]):
            refs = golden.set_outputs(f"set{k}", entry["n_outputs"])
            inputs = _golden_run.argument_list(golden, tensors, f"set{k}")
            sub = [golden.sub_outputs[f"set{k}.out{i}"] for i in range(entry["n_outputs"])]
            first = golden.set_outputs("set0", golden.meta["sets"][0]["n_outputs"])
            outs = control_outputs(name, refs, inputs, sub, first)
            if outs is None:
                applicable = False
                break
            label = f"input set {k} ({golden.meta['set_names'][k]})"
            comparisons.append(compare.compare_outputs(outs, refs, atol=config.atol, rtol=config.rtol, label=label))
        if not applicable:
            results[name] = "not applicable (no input has the output's shape)"
            continue
        c = compare.combine(comparisons)
        if c.ok:
            results[name] = EvalResult(
                "correct", f"Control `{name}` passed every check: this task cannot tell it from a real kernel.",
                max_abs_error=c.max_abs_error, max_rel_error=c.max_rel_error, details={"control": name},
            )
        else:
            results[name] = EvalResult(
                "incorrect", feedback.incorrect_feedback(c.reason), max_abs_error=c.max_abs_error,
                max_rel_error=c.max_rel_error, details={"control": name},
            )
    return results


__all__ = ["CalibrationReport", "calibrate", "calibrate_many", "CONTROLS"]


def usable_tasks(tasks: Sequence[Any], *, device: str = "cpu", seed: int | None = None) -> tuple[list[Any], list[str]]:
    """(the tasks whose controls all fail, the ids of the others): `calibrate_many` as a filter, for tasks loaded
    from outside the vetted suite (a KernelBench output can be constant). ``seed`` fixes the inputs, so processes
    of one run keep the same tasks. Raises ValueError when none is left."""
    reports = calibrate_many(tasks, device=device, config=SandboxConfig(seed=seed))
    kept = [t for t, r in zip(tasks, reports) if r.passed]
    if not kept:
        raise ValueError(f"no task of {len(tasks)} survived calibration: a fake passes each of them")
    return kept, [r.task_id for r in reports if not r.passed]

