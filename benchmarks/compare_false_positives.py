"""How often would an honest, more accurate kernel trip `compare`'s second criterion? (CPU)

Usage: python benchmarks/compare_false_positives.py

For every built-in task (CPU sizes) and each of the four input variants (task, signed, scaled, heavy), runs the
reference in float32 and again in float64 (cast back): the float64 run is what a more accurate honest kernel
returns. Prints the largest shares of nonzero reference elements that the float64 output misses by more than
half (`kevin.sandbox.compare.HALF`); the criterion fails an output above `SMALL_SHARE` (1 %).
"""

from __future__ import annotations

import copy
import types

import torch

from kevin.data import builtin_tasks
from kevin.sandbox.worker import inputs as _inputs
from kevin.sandbox.compare import HALF, SMALL_SHARE


def share_off_by_half(out: torch.Tensor, ref: torch.Tensor) -> float:
    r, o = ref.double(), out.double()
    m = torch.isfinite(r) & torch.isfinite(o) & (r.abs() >= torch.finfo(ref.dtype).tiny)
    return float(((o[m] - r[m]).abs() > HALF * r[m].abs()).double().mean()) if m.any() else 0.0


def main() -> None:
    rows = []
    tasks = builtin_tasks()
    for t in tasks:
        mod = types.ModuleType(t.task_id)
        exec(t.source_for("cpu"), mod.__dict__)  # our own suite's source
        torch.manual_seed(0)
        model = mod.Model(*mod.get_init_inputs())
        for k, variant in enumerate(("task", "signed", "scaled", "heavy")):
            torch.manual_seed(1)
            x = _inputs.apply_variant(mod.get_inputs(), variant, torch.Generator().manual_seed(2 + k))
            with torch.no_grad():
                ref = model(*x)
                x64 = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in x]
                alt = copy.deepcopy(model).double()(*x64)
            refs, alts = (ref, alt) if isinstance(ref, (tuple, list)) else ([ref], [alt])
            for r, a in zip(refs, alts):
                if r.is_floating_point():
                    rows.append((share_off_by_half(a.to(r.dtype), r), t.task_id, variant))
    rows.sort(reverse=True)
    print(f"{len(tasks)} tasks, {len(rows)} floating outputs; the criterion fails above {SMALL_SHARE:.0%}")
    for share, task, variant in rows[:10]:
        print(f"{share:.6%}  {task}  {variant}")
    print("outputs over the limit:", sum(s > SMALL_SHARE for s, _, _ in rows))


if __name__ == "__main__":
    main()
