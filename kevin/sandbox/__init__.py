"""kevin.sandbox: compile, check and time a candidate kernel, in a way the candidate cannot game.

    from kevin.sandbox import evaluate, Sandbox, SandboxConfig
    result = evaluate(task, candidate_src, device="cuda")           # one kernel
    results = Sandbox("cuda").evaluate_many([(task, src), ...])    # a batch: parallel compiles, one timing per GPU

Backends: ``"cuda"`` / ``"cuda:N"`` (the candidate builds CUDA with ``load_inline(cuda_sources=...)``,
timed with CUDA events) and ``"cpu"`` (the same file format with C++ ``cpp_sources``, timed with the
host clock). `calibrate` / `calibrate_many` vet a task with negative controls. Importing this package
imports only the standard library; torch is loaded by the worker processes (and lazily here to compare).

The threat model (what a "correct" verdict guarantees, how each known attack is stopped, what is not
defended, and what the wall-clock check costs) is ``docs/threat-model.md``. In short: three trust zones (a
golden process that alone runs the reference, a fresh candidate process per candidate, and the parent that
compares and decides); a static layer (`check_format`) and a dynamic gate (an operator inventory, tripwires,
the built library's symbols, fresh permuted inputs for every timed call with rechecks at positions the
candidate cannot tell, the parent's own clocks); and a batch deadline, so no candidate holds the others.
Rule sets (``SandboxConfig.rules``): "kevin" (the paper's) and "kernelbench" (``torch.nn`` weight holders,
tolerance 1e-2).
"""

from .calibrate import CalibrationReport, calibrate, calibrate_many
from .config import SandboxConfig
from .result import STATUSES, EvalResult
from .sandbox import Sandbox, evaluate
from .static import check_format


__all__ = [
    "CalibrationReport", "EvalResult", "STATUSES", "Sandbox", "SandboxConfig", "calibrate", "calibrate_many",
    "check_format", "evaluate",
]
