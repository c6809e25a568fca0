"""A runtime inventory of the PyTorch operators a candidate's forward dispatches (hacks A1-A5).

Inside the candidate process, each correctness call runs under a ``TorchDispatchMode`` that records every
ATen operator reaching the dispatcher, whether it was called from Python (``torch.relu``, ``F.linear``,
``x @ w``) or from the candidate's C++ (``torch::matmul``, ``at::relu``: C++ calls go through the same
dispatcher). Allocation, copies, views and shape queries are allowed; anything else means the forward
delegated compute to PyTorch. This sees what a static scan cannot: a ghost branch that is taken, a
try/except fallback that fired, a delegated reference, an obfuscated ``getattr(torch, "re" + "lu")``.
It does not see raw library calls (cuBLAS/cuDNN called directly from C++), which bypass the dispatcher.
"""

from __future__ import annotations

from typing import Any

from torch._C._autograd import DeviceType
from torch.autograd.profiler import _filter_name
from torch.utils._python_dispatch import TorchDispatchMode

ALLOWED = frozenset("""
empty empty_like empty_strided empty_permuted new_empty new_empty_strided zeros zeros_like new_zeros ones
ones_like new_ones full full_like new_full fill_ zero_ detach detach_ alias lift_fresh lift_fresh_copy view
_unsafe_view reshape _reshape_alias as_strided as_strided_ expand expand_as t t_ transpose transpose_
permute unsqueeze unsqueeze_ squeeze squeeze_ select slice split split_with_sizes chunk unbind narrow
flatten unflatten view_as movedim diagonal unfold clone copy_ _to_copy contiguous resize_ resize_as_ set_
_local_scalar_dense sym_size sym_stride sym_numel sym_storage_offset is_same_size
_has_compatible_shallow_copy_type _pin_memory _nested_tensor_from_mask_left_aligned
resolve_conj resolve_neg item is_nonzero to type_as
""".split())


class OpInventory(TorchDispatchMode):
    """Records the overload-packet name of every dispatched ATen op; ``compute_ops`` = the disallowed ones."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        packet = getattr(func, "overloadpacket", None)
        name = getattr(packet, "__name__", None) or str(func)
        self.ops[name] = self.ops.get(name, 0) + 1
        return func(*args, **(kwargs or {}))

    @property
    def compute_ops(self) -> list[str]:
        return sorted(op for op in self.ops if op not in ALLOWED)


HARNESS = "kevin::harness"
"""The profiler scope around the timing loop's own work (inputs, copies), so a `ProfiledOps` watching a whole loop
counts only the candidate's operators as top-level ones."""


class ProfiledOps:
    """The same inventory seen by the profiler (``RecordFunction``), which a forward cannot switch off from
    Python: ``torch._C._DisableTorchDispatch()`` hides ops from a dispatch mode, not from the profiler (a
    candidate can delegate to ``torch.addmm`` or any other op that way; ``a7_disable_python_dispatch`` in
    ``tests/sandbox/candidates``). Only top-level ATen ops count (the ones the candidate called; an allowed op's
    own internals are not its choice, and the timing loop's own work runs under a `HARNESS` scope)."""

    def __init__(self) -> None:
        self.ops: dict[str, int] = {}
        self._prof: Any = None

    def __enter__(self) -> "ProfiledOps":
        import torch

        self._prof = torch.autograd.profiler.profile()
        self._prof.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._prof.__exit__(*exc)
        self.ops = top_level_aten_ops(self._prof.kineto_results.events())

    @property
    def compute_ops(self) -> list[str]:
        return sorted(op for op in self.ops if op not in ALLOWED)


def top_level_aten_ops(events: Any, *, _cpu: Any = DeviceType.CPU, _ignored: Any = _filter_name) -> dict[str, int]:
    """Count of each ATen op (``aten::`` stripped) not nested inside another event of its thread.

    The profiler's own tree (``profile.function_events``) builds the same parent links, but from a Python object per
    event: over a timing loop's ~5,000 events that took longer than the loop (``benchmarks/README.md``). The rules are
    that tree's: synchronous CPU events only, the profiler's utility names ignored, and on each thread an event is a
    child of the innermost earlier one whose interval holds it, [start, end] inside [start, end].
    (The defaults bind torch's objects when this module is imported, before any candidate is.)
    """
    by_thread: dict[int, list[tuple[int, int, str]]] = {}
    for e in events:
        if e.device_type() != _cpu or e.is_async() or e.start_thread_id() != e.end_thread_id():
            continue
        name = e.name()
        if _ignored(name) or e.is_hidden_event():
            continue
        by_thread.setdefault(e.start_thread_id(), []).append((e.start_ns(), -e.end_ns(), name))
    ops: dict[str, int] = {}
    for rows in by_thread.values():
        rows.sort()
        open_ends: list[int] = []  # the ends of the enclosing events, innermost last
        for start, neg_end, name in rows:
            end = -neg_end
            while open_ends and (start >= open_ends[-1] or end > open_ends[-1]):
                open_ends.pop()
            if not open_ends and name.startswith("aten::"):
                ops[name[len("aten::"):]] = ops.get(name[len("aten::"):], 0) + 1
            open_ends.append(end)
    return ops
