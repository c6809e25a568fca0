"""Fused projections for the compiled decoding step: q, k and v as one matmul, gate and up as one.

A decoding step multiplies 128-odd rows by every weight of the model, so it is bound by reading the weights,
and small matmuls read them slowly: on an H200 at the 7B decoding shape, cuBLAS reads k's and v's 3.7 MB at
0.49 TB/s and gate's and up's at 3.6 TB/s, while one matmul over q, k and v together reads at 2.9 TB/s and one
over gate and up at 3.8 TB/s (``benchmarks/decode_matmuls.py``, ``benchmarks/results/generation_h200.md``):
0.1544 against 0.136 ms of weight matmuls per layer.

How, without rewriting transformers' attention or MLP code:

- `install` swaps the class of every plain ``nn.Linear`` that is one of a group of sibling projections of one
  input (``q_proj, k_proj, v_proj``; ``gate_proj, up_proj``) to `FusableLinear`, and gives the group one
  weight ``W = cat(W_1, ..., W_n)`` ``[sum out_i, in]`` (and bias). With a peft LoRA, these are the base layers
  inside the LoRA layers, whose own forward adds the adapters on top, unchanged.
- Inside `fused_projections`, a `FusableLinear` that is being compiled without gradients computes
  ``linear(x, W, b)[..., lo_i:hi_i]``: the same numbers as its own weight gives, read from the group's. The
  siblings then compute the same ``linear(x, W, b)`` from the same ``x``; `DedupeMatmuls`, a pass over the
  compiled graph, keeps one of each set of identical matmul nodes, so the graph holds one matmul per group (when
  the siblings are in one graph and nothing, such as an autocast, casts between; otherwise each computes the whole
  fused matmul: the same numbers, more work, and `DedupeMatmuls.removed` stays 0). Anywhere else (eager, with
  gradients, a compile outside the context) it is a plain ``nn.Linear``.
- `refresh` (run by `fused_projections` on entry) copies the current weights into the group's ``W`` in place:
  training changes the weights between generations, and the compiled step's CUDA graphs read ``W`` at a fixed
  address. A copy, not a version check: writes through ``.data`` do not bump a tensor's version.

Measured on an H200 (``benchmarks/README.md``, ``benchmarks/results/generation_h200.md``; random Qwen2.5-7B,
128 x 2048 + 1024 tokens; both on one machine): a decoding step 10.26 -> 9.78 ms, the whole call 16.31 -> 15.87 s.

Cost: ``W`` duplicates the grouped weights (peak memory 64.6 -> 72.6 GiB); the refresh copies them once per
generation call. `release` frees ``W`` between generations (``TransformersPolicy.release_memory``).

Like the policy package itself (``kevin.core.policy``), this is plumbing for the policy backend; it imports only ``torch``.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch import nn

GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # sibling projections of one input


class FusedGroup:
    """One fused weight ``[sum out_i, in]`` (and bias ``[sum out_i]``, or None) for the linears it was built from."""

    def __init__(self, linears: list[nn.Linear]) -> None:
        self.linears = linears
        self.bounds = []  # (lo, hi) of each linear's rows in the fused weight
        lo = 0
        for linear in linears:
            self.bounds.append((lo, lo + linear.out_features))
            lo += linear.out_features
        self.weight: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None
        self.active = False  # True inside `fused_projections` of the model that holds this group
        self.refresh()

    def _allocate(self) -> None:
        first = self.linears[0].weight
        rows = self.bounds[-1][1]
        self.weight = torch.empty(rows, first.shape[1], dtype=first.dtype, device=first.device)
        has_bias = self.linears[0].bias is not None
        self.bias = torch.empty(rows, dtype=first.dtype, device=first.device) if has_bias else None
        for t in (self.weight, self.bias):
            if t is not None and t.is_cuda:
                torch._dynamo.mark_static_address(t)  # CUDA graphs read it in place: never copied per replay

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy each linear's current weight (and bias) into its rows of the fused ones; reallocate them first when
        the linears have moved to another device or dtype (``model.to(...)``)."""
        first = self.linears[0].weight
        if self.weight is None or (self.weight.device, self.weight.dtype) != (first.device, first.dtype):
            self.weight = self.bias = None  # free the old copy before allocating the new one
            self._allocate()
        for linear, (lo, hi) in zip(self.linears, self.bounds):
            self.weight[lo:hi].copy_(linear.weight)
            if self.bias is not None:
                self.bias[lo:hi].copy_(linear.bias)


class FusableLinear(nn.Linear):
    """An ``nn.Linear`` that, while compiled without gradients inside `fused_projections`, reads its output from its
    group's matmul. A copy of the module made after `install` (``copy.deepcopy(model.q_proj)``, peft's
    ``modules_to_save``) holds a copy of the group that no context activates, so it computes with its own weight."""

    _kevin_group: FusedGroup
    _kevin_index: int  # this linear's place in its group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        group = self._kevin_group
        if group.active and torch.compiler.is_compiling() and not torch.is_grad_enabled():
            lo, hi = group.bounds[self._kevin_index]
            return F.linear(x, group.weight, group.bias)[..., lo:hi]
        return super().forward(x)


def _base_linear(module: Any) -> Any:
    """The ``nn.Linear`` a projection computes with: the module itself, or the base layer of a peft LoRA layer."""
    while hasattr(module, "base_layer"):
        module = module.base_layer
    return module


def _fusable(linears: list[Any]) -> bool:
    """Plain linears of one input width, dtype and device, all with a bias or none (a linear already in a group is a
    `FusableLinear`, not a plain one, so it joins no second group)."""
    if not all(type(m) is nn.Linear for m in linears):  # (quantized or already fused layers are left alone)
        return False
    w = [m.weight for m in linears]
    return (len({(t.shape[1], t.dtype, t.device) for t in w}) == 1
            and len({m.bias is None for m in linears}) == 1)


def install(model: nn.Module) -> list[FusedGroup]:
    """Fuse every group of sibling projections of ``model`` (see the module docstring); returns the groups.

    Idempotent: a model's groups are built once and kept on it (``_kevin_fused_groups``).
    """
    held = model.__dict__.get("_kevin_fused_groups")
    if held is not None:
        return held
    groups = []
    for parent in model.modules():
        for names in GROUPS:
            if not all(isinstance(getattr(parent, n, None), nn.Module) for n in names):
                continue
            linears = [_base_linear(getattr(parent, n)) for n in names]
            if not _fusable(linears):
                continue
            group = FusedGroup(linears)
            for i, linear in enumerate(linears):
                linear.__class__ = FusableLinear
                linear._kevin_group, linear._kevin_index = group, i
            groups.append(group)
    model.__dict__["_kevin_fused_groups"] = groups
    return groups


def release(model: nn.Module) -> int:
    """Free the fused weights of ``model``'s groups (the next `fused_projections` allocates and fills them again);
    returns the bytes freed. The groups and the swapped classes stay."""
    freed = 0
    for group in model.__dict__.get("_kevin_fused_groups") or ():
        freed += sum(t.numel() * t.element_size() for t in (group.weight, group.bias) if t is not None)
        group.weight = group.bias = None
    return freed


@contextlib.contextmanager
def fused_projections(model: nn.Module) -> Iterator[list[FusedGroup]]:
    """Within: compiled forwards of ``model`` run one matmul per group; the fused weights are refreshed on entry.

    Yields the groups (empty when the model has none to fuse: then nothing changes). Only this model's groups are
    active (a compiled forward guards on that, so one compiled outside recompiles inside, and back).
    """
    groups = install(model)
    saved = [g.active for g in groups]
    for group in groups:
        group.refresh()
        group.active = True
    try:
        yield groups
    finally:
        for group, was in zip(groups, saved):
            group.active = was


_PURE = (  # deterministic, non-mutating ops a linear lowers to: safe to compute once per identical arguments
    torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.reshape.default,
    torch.ops.aten.permute.default, torch.ops.aten.t.default, torch.ops.aten.mm.default, torch.ops.aten.addmm.default,
)


def dedupe_matmuls(graph: torch.fx.Graph) -> int:
    """Replace every node of `_PURE` ops whose (op, arguments) repeat an earlier node by that node; returns how many.

    Sound for a functional graph (Inductor's post-grad graph before its re-inplacing pass, where the pre pass
    runs): no node of these ops reads a tensor that a node between the two copies mutates.

    In a graph of the fused projections, q's, k's and v's ``linear(x, W, b)`` lower to the same
    ``view(x) -> permute(W) -> addmm(b, ., .)`` chain; in order, each repeated node is replaced by its first copy,
    so the repeated chains collapse into one.
    """
    first: dict[Any, torch.fx.Node] = {}
    removed = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _PURE:
            continue
        try:
            key = (node.target, _hashable(node.args), _hashable(node.kwargs))
            hash(key)
        except TypeError:
            continue
        if key in first:
            node.replace_all_uses_with(first[key])
            graph.erase_node(node)
            removed += 1
        else:
            first[key] = node
    return removed


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


try:  # a CustomGraphPass lets Inductor's FX graph cache key a compiled graph by the pass
    from torch._inductor.custom_graph_pass import CustomGraphPass as _PassBase
except ImportError:  # older torch: a plain callable
    _PassBase = object


class DedupeMatmuls(_PassBase):
    """`dedupe_matmuls` as an Inductor post-grad pass (``torch.compile(options={"post_grad_custom_pre_pass": ...})``).

    ``removed`` counts the nodes it removed over every graph it ran on.
    """

    def __init__(self) -> None:
        self.removed = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.removed += dedupe_matmuls(graph)

    def uuid(self) -> str:
        return hashlib.sha256(inspect.getsource(dedupe_matmuls).encode()).hexdigest()


def compile_options(cuda_graphs: bool) -> dict[str, Any]:
    """Inductor options for a compiled step with the dedupe pass (and CUDA graphs: what mode "reduce-overhead" sets)."""
    return {"triton.cudagraphs": cuda_graphs, "post_grad_custom_pre_pass": DedupeMatmuls()}
