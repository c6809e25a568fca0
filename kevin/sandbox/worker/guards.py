"""Worker-side tripwires: global numerics flags, identities of trusted functions, thread counts.

Snapshots are taken before the candidate module is imported (`Tripwires`) and compared after the import, after every
correctness set, after every timed call (the dispatcher's table of every harness operator included) and after
timing. Any difference rejects the candidate (hacks C2, C3, D2, D6). These run inside the candidate's process: a
change made in one call and undone by the next is seen only where it is still in place at a comparison, so objects
not listed here (most of torch, numpy) can still be changed unseen, and a candidate that rewrites this module can
switch the tripwires off. They are tripwires on top of the parent's own comparisons, not the gate itself.
"""

from __future__ import annotations

import builtins
import os
import random
import secrets
import sys
import threading
import time
import warnings
from typing import Any, Callable, Sequence

import numpy as np
import torch


def _flush_denormal_on() -> bool:
    # No getter exists: a denormal survives a multiplication by one unless flush-to-zero is on.
    return float((torch.tensor([1e-40], dtype=torch.float32) * 1.0).item()) == 0.0


_FLAG_GETTERS: dict[str, Callable[[], Any]] = {
    "default_dtype": lambda: str(torch.get_default_dtype()),
    "float32_matmul_precision": torch.get_float32_matmul_precision,
    "cuda_matmul_allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
    "cuda_matmul_fp16_reduced": lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
    "cuda_matmul_bf16_reduced": lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    "cudnn_enabled": lambda: torch.backends.cudnn.enabled,
    "cudnn_allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
    "cudnn_benchmark": lambda: torch.backends.cudnn.benchmark,
    "cudnn_deterministic": lambda: torch.backends.cudnn.deterministic,
    "deterministic_algorithms": torch.are_deterministic_algorithms_enabled,
    "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled,
    "fill_uninitialized_memory": lambda: torch.utils.deterministic.fill_uninitialized_memory,
    "flush_denormal": _flush_denormal_on,
    "num_threads": torch.get_num_threads,
    "num_interop_threads": torch.get_num_interop_threads,
    "grad_enabled": torch.is_grad_enabled,
}


def numerics_flags() -> dict[str, Any]:
    """The global numerics state: default dtype, TF32, cudnn, matmul precision, determinism, threads."""
    out: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, get in _FLAG_GETTERS.items():
            try:
                out[name] = get()
            except Exception as exc:  # noqa: BLE001 - a getter missing in this torch version
                out[name] = f"unavailable: {type(exc).__name__}"
    return out


def flag_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    keys = sorted(set(before) | set(after))
    return [f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in keys if before.get(k) != after.get(k)]


def _trusted_objects() -> dict[str, Any]:
    import json

    import safetensors.torch as st

    objs: dict[str, Any] = {
        "torch.allclose": torch.allclose, "torch.isclose": torch.isclose, "torch.equal": torch.equal,
        "torch.manual_seed": torch.manual_seed, "torch.roll": torch.roll, "torch.empty": torch.empty,
        "torch.cuda.synchronize": torch.cuda.synchronize, "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.current_stream": torch.cuda.current_stream, "torch.cuda._sleep": torch.cuda._sleep,
        "time.perf_counter": time.perf_counter, "time.monotonic": time.monotonic,
        "os.write": os.write, "json.dumps": json.dumps, "safetensors.save_file": st.save_file,
        "builtins.type": builtins.type, "builtins.isinstance": builtins.isinstance,
        "torch.Tensor": torch.Tensor, "torch.nn.Module": torch.nn.Module,
        # what makes the timed calls' fresh inputs and picks the rechecks (replaced, the fresh inputs
        # could be unpermuted copies of the correctness sets, told apart from the rechecks)
        "torch.randperm": torch.randperm, "torch.randint": torch.randint, "torch.sort": torch.sort,
        "torch.Generator": torch.Generator, "numpy.random.default_rng": np.random.default_rng,
        "random.Random": random.Random, "os.unlink": os.unlink, "secrets.randbits": secrets.randbits,
        "torch.from_numpy": torch.from_numpy,
    }
    for name in ("sample", "random", "randrange", "shuffle", "getrandbits"):
        objs[f"random.Random.{name}"] = vars(random.Random).get(name) or getattr(random.Random, name)
    for name in ("__eq__", "__ne__", "__sub__", "__torch_function__", "clone", "to", "copy_", "data_ptr",
                 "detach", "contiguous", "numel", "element_size", "untyped_storage", "equal",
                 "__getitem__", "__setitem__", "reshape", "view", "flatten", "new_empty", "size", "dim", "zero_"):
        objs[f"torch.Tensor.{name}"] = vars(torch.Tensor).get(name) or vars(torch._C.TensorBase).get(name)
    for name in ("record", "elapsed_time", "synchronize", "__init__", "__new__"):
        objs[f"torch.cuda.Event.{name}"] = vars(torch.cuda.Event).get(name)
    # the harness's own deciding objects: the timing loop, the operator inventories and their allow-list, the
    # report channel (the worker binds them before the candidate's import; replacing them is still reported)
    from kevin.sandbox.worker import inventory as _inventory, channel as _worker, timing

    for name in ("time_calls", "FreshInputs", "_snapshot", "_refill", "_gather", "_permute", "_PERMUTE",
                 "_round_keys", "_wipe", "_bits", "_allocator_owned", "median"):
        objs[f"kevin.sandbox.worker.timing.{name}"] = getattr(timing, name, None)
    permute = getattr(timing, "_PERMUTE", None)
    if permute is not None:  # a hook set on the bound kernel would see every call's pointers and keys
        for name in ("errcheck", "argtypes", "restype"):
            objs[f"kevin.sandbox.worker.timing._PERMUTE.{name}"] = getattr(permute, name, None)
    for name in ("make", "source_for", "_indices", "_new_buffer"):
        objs[f"kevin.sandbox.worker.timing.FreshInputs.{name}"] = vars(timing.FreshInputs).get(name)
    for name in ("ALLOWED", "OpInventory", "ProfiledOps", "top_level_aten_ops"):
        objs[f"kevin.sandbox.worker.inventory.{name}"] = getattr(_inventory, name, None)
    for cls in (_inventory.OpInventory, _inventory.ProfiledOps):
        for name in ("__enter__", "__exit__", "__torch_dispatch__", "compute_ops"):
            if name in vars(cls):
                objs[f"kevin.sandbox.worker.inventory.{cls.__name__}.{name}"] = vars(cls)[name]
    for name in ("send", "receive", "mark"):
        objs[f"kevin.sandbox.worker.channel.Channel.{name}"] = vars(_worker.Channel).get(name)
    objs["torch.nn.Module.__call__"] = vars(torch.nn.Module).get("__call__")
    objs["torch.nn.Module._call_impl"] = vars(torch.nn.Module).get("_call_impl")
    return objs


def capture_identities() -> dict[str, Any]:
    """References to the functions the harness relies on, to compare by identity later."""
    return _trusted_objects()


def identity_changes(captured: dict[str, Any]) -> list[str]:
    now = _trusted_objects()
    return [f"{k} was replaced" for k, v in captured.items() if now.get(k) is not v]


# Operators the harness itself runs on the candidate's outputs and inputs (snapshots, copies, comparisons).
HARNESS_OPS = ("aten::clone", "aten::copy_", "aten::_to_copy", "aten::to", "aten::detach", "aten::contiguous",
               "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::equal", "aten::eq",
               "aten::index", "aten::index_select", "aten::index_put_", "aten::_index_put_impl_", "aten::randperm",
               "aten::randint", "aten::random_", "aten::sort", "aten::arange", "aten::resize_", "aten::view",
               "aten::reshape", "aten::alias", "aten::slice", "aten::zero_", "aten::fill_", "aten::as_strided")


def harness_op_names() -> list[str]:
    """Every registered overload of `HARNESS_OPS` (``aten::index.Tensor``, ``aten::randperm.generator``...): the
    dispatcher's dump of a bare name with no default overload (``aten::index``) is empty, so a kernel registered
    over its overload went unseen."""
    import torch

    bases = {op.split("::", 1)[1] for op in HARNESS_OPS}
    return sorted(n for n in torch._C._dispatch_get_all_op_names()
                  if n.startswith("aten::") and n[len("aten::"):].split(".")[0] in bases)


def dispatcher_registrations(names: Sequence[str] | None = None) -> dict[str, str]:
    """The dispatcher's table for each harness operator: a kernel registered over one of them (e.g. a
    ``clone`` that computes a deferred output when the harness snapshots it) changes its dump."""
    import torch

    return {op: torch._C._dispatch_dump(op) for op in (harness_op_names() if names is None else names)}


def registration_changes(before: dict[str, str], names: Sequence[str] | None = None) -> list[str]:
    """The operators of ``before`` (or only ``names`` of them) whose dispatcher table differs now; the names are
    not listed again (walking every registered operator costs about 8 ms)."""
    names = list(before) if names is None else list(names)
    now = dispatcher_registrations(names)
    return [f"the dispatcher's kernels for {op} were changed" for op in names if now.get(op) != before.get(op)]


# What the timing loop runs between two calls to make the next one's fresh inputs (a new buffer at an offset,
# a permutation, a gather, a copy): the operators a lighter audit (`Tripwires.changes(dispatcher=False)`) still
# compares; the timed loop's audit compares every overload of HARNESS_OPS after every call. A kernel over one of
# these, registered after an ordinary call and removed by the next, could hand that call unpermuted correctness sets.
FRESH_OPS = ("aten::randperm.generator", "aten::randint.low_generator", "aten::random_.from", "aten::sort.stable",
             "aten::index.Tensor", "aten::empty.memory_format", "aten::slice.Tensor",
             "aten::copy_", "aten::view", "aten::reshape", "aten::as_strided")


def hooks() -> dict[str, Any]:
    """Hooks that live in interpreter or thread state, not in any module: entered dispatch and function modes (a
    mode left entered sees the harness's ops, e.g. the ``clone`` of a snapshot, with the dispatcher's table
    unchanged) and trace or profile functions (they hand over the harness's frames)."""
    return {"torch dispatch modes entered": torch._C._len_torch_dispatch_stack(),
            "torch function modes entered": torch._C._len_torch_function_stack(),
            "sys.gettrace()": sys.gettrace(), "sys.getprofile()": sys.getprofile(),
            "threading.gettrace()": threading.gettrace(), "threading.getprofile()": threading.getprofile()}


class Tripwires:
    """The tripwires' state when made (before the candidate's import); `changes` lists what differs now."""

    def __init__(self) -> None:
        self.flags = numerics_flags()
        self.ids = capture_identities()
        self.registrations = dispatcher_registrations()
        self.threads = python_threads()
        self.hooks = hooks()

    def changes(self, dispatcher: bool = True, flags: dict[str, Any] | None = None) -> list[str]:
        """What differs from the snapshot; numerics flags from ``flags`` instead when given (the harness itself
        turns the deterministic mode off while timing)."""
        out = [f"numerics flag changed: {c}" for c in flag_changes(self.flags if flags is None else flags, numerics_flags())]
        out += identity_changes(self.ids)
        out += registration_changes(self.registrations, None if dispatcher else
                                    [op for op in FRESH_OPS if op in self.registrations])
        n = python_threads()
        if n != self.threads:
            out.append(f"the number of Python threads changed from {self.threads} to {n}")
        now = hooks()
        out += [f"{k} changed: {self.hooks[k]!r} -> {now[k]!r}" for k in now if now[k] is not self.hooks[k]
                and now[k] != self.hooks[k]]
        return out


def python_threads() -> int:
    return threading.active_count()


def native_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1
