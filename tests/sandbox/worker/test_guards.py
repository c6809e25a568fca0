"""kevin.sandbox.worker.guards: the worker's tripwires, each seeing one kind of change and its undoing."""

import shutil
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kevin.sandbox.worker import guards as _guards


def _changes(wires, **kw):
    """The tripwires' changes but the count of Python threads: in this test process, threads that earlier tests left
    winding down (a pool's workers) end at any time; the worker runs its tripwires in a process of its own."""
    return [c for c in wires.changes(**kw) if not c.startswith("the number of Python threads")]


def test_a_kernel_registered_over_an_overload_of_a_harness_op_is_seen():
    # aten::index has no default overload: its bare name dumps "", the overload index.Tensor is what runs
    wires = _guards.Tripwires()
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("index.Tensor", lambda self, indices: self.clone(), "CPU")
        assert "the dispatcher's kernels for aten::index.Tensor were changed" in _changes(wires)
    finally:
        lib._destroy()
    assert _changes(wires) == []


def test_a_dispatch_mode_left_entered_is_seen():
    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Passthrough():  # the first mode imports torch._dynamo, which wraps torch.manual_seed (the worker warms up too)
        torch.ones(1) + 1
    wires = _guards.Tripwires()
    mode = Passthrough()
    mode.__enter__()
    try:
        assert "torch dispatch modes entered changed: 0 -> 1" in _changes(wires, dispatcher=False)
    finally:
        mode.__exit__(None, None, None)
    assert _changes(wires, dispatcher=False) == []


def test_a_profile_function_is_seen():
    wires = _guards.Tripwires()
    previous = sys.getprofile()
    sys.setprofile(lambda *a: None)
    try:
        assert any(c.startswith("sys.getprofile() changed") for c in _changes(wires, dispatcher=False))
    finally:
        sys.setprofile(previous)


def test_the_flags_are_compared_with_the_state_given():
    wires = _guards.Tripwires()
    now = _guards.numerics_flags()
    torch.set_default_dtype(torch.float64)
    try:
        assert any("default_dtype" in c for c in _changes(wires, dispatcher=False))
        assert not any("default_dtype" in c for c in _changes(wires, dispatcher=False, flags=_guards.numerics_flags()))
    finally:
        torch.set_default_dtype(torch.float32)
    assert now == _guards.numerics_flags()


def test_between_ordinary_calls_only_the_fresh_input_operators_are_compared():
    # a kernel over the permutation's gather (index.Tensor) is seen after every call, one over equal only at rechecks
    wires = _guards.Tripwires()
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("index.Tensor", lambda self, indices: self.clone(), "CPU")
        lib.impl("equal", lambda self, other: True, "CPU")
        assert _changes(wires, dispatcher=False) == ["the dispatcher's kernels for aten::index.Tensor were changed"]
        assert "the dispatcher's kernels for aten::equal were changed" in _changes(wires, dispatcher=True)
    finally:
        lib._destroy()


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_a_hook_set_on_the_bound_permutation_kernel_is_seen(tmp_path, monkeypatch):
    # an errcheck hook leaves the bound function itself in place but sees every launch's pointers and round keys
    from kevin.sandbox.build import harness
    from kevin.sandbox.worker import timing

    built = harness.build_permute(str(tmp_path), "9.0")
    monkeypatch.setattr(timing, "_PERMUTE", None)
    timing.load_permute(built.path, built.sha256)  # loads without a GPU: the CUDA runtime starts on a first launch
    captured = _guards.capture_identities()
    timing._PERMUTE.errcheck = lambda result, func, args: result
    assert _guards.identity_changes(captured) == ["kevin.sandbox.worker.timing._PERMUTE.errcheck was replaced"]
