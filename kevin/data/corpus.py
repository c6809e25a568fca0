"""A supervised warm-start corpus for a kernel-writing policy, written by code rather than sampled.

A small model that starts RL from scratch almost never produces a program the sandbox accepts, so its
first gradient steps see no signal. This module writes answers in the paper's format -- a thought, ONE
fenced Python program whose ``ModelNew`` calls a kernel built with ``load_inline``, a short summary --
for the built-in tasks it has templates for, on both backends (C++ through ``cpp_sources`` for ``"cpu"``,
a ``__global__`` kernel and its launcher through ``cuda_sources`` for ``"cuda"``).

Each task gets correct answers (``slow``: naive loop orders, one pass per operator; ``fast``: blocked or
fused loops, tiled CUDA kernels) and the flawed ones models really write (``off_by_one``: the last row or
element is never written; ``missing_op``: one operator of a fused task left out; ``compile_error``: a
typo'd identifier; ``format_error``: one step done with PyTorch in ``forward``). `Answer.expected` is the
status the sandbox gives it (`kevin.sandbox.STATUSES`).

`build_corpus` turns them into chat examples: first turns (the prompt of `build_messages`, then an answer)
mixed so that well under all of them are correct (default 45 %), and refinement turns whose prompt shows an
earlier attempt with feedback worded like the sandbox's and whose answer fixes a flawed one, speeds up a slow one or
keeps a fast one; optionally (``Mix.deeper_refinements``) with one or two failed attempts before it, as a third or
fourth turn's prompt holds them.

    answers = kernel_answers(task, "cpu")               # [] when no template covers the task
    examples = build_corpus(builtin_tasks(), "cpu", seed=0)
    python -m kevin.data.corpus                         # how many built-in tasks have answers, per backend

What a template covers: element-wise activations and scalar/per-channel arithmetic, reductions, softmax,
scans and normalisations over one dim, pooling, matrix products (plain, transposed, batched,
triangular, diagonal), direct and transposed convolutions, the losses, and level-2 chains of these after
a matmul, GEMM, BMM or convolution. Parameters of ``nn`` layers become ``nn.Parameter``s initialised with
the layer's own calls in the same order, so they equal the reference's under the sandbox's shared seed.
"""

from __future__ import annotations

import ast
import hashlib
import random
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from kevin.data.prompts import Attempt, build_messages, fence
from kevin.data.task import BACKENDS, Task

__all__ = [
    "Answer",
    "Example",
    "Mix",
    "KINDS",
    "CORRECT_KINDS",
    "FLAWED_KINDS",
    "EXPECTED_STATUS",
    "kernel_answers",
    "refinement_examples",
    "build_corpus",
    "coverage",
]

KINDS = ("slow", "fast", "off_by_one", "missing_op", "compile_error", "format_error")
CORRECT_KINDS = ("slow", "fast")
FLAWED_KINDS = ("off_by_one", "missing_op", "compile_error", "format_error")
EXPECTED_STATUS = {
    "slow": "correct",
    "fast": "correct",
    "off_by_one": "incorrect",
    "missing_op": "incorrect",
    "compile_error": "compile_error",
    "format_error": "format_error",
}


@dataclass(frozen=True)
class Answer:
    """One response to a task's first-turn prompt.

    ``text`` is the whole response: ``<think>`` thought ``</think>``, one fenced python program, a summary.
    ``kind`` is one of `KINDS`; ``expected`` the sandbox status it gets (`EXPECTED_STATUS`), judged against
    a float32 reference. ``code`` and ``summary`` are the parts `kevin.data.parse.parse_response` extracts. ``detail`` says, for a flawed answer, what is
    wrong (never shown to the model; the refinement examples use it to write the feedback and the fix).
    """

    text: str
    kind: str
    expected: str
    task_id: str
    backend: str
    code: str
    summary: str
    detail: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Example:
    """One supervised example: the chat ``messages`` of the prompt and the ``answer`` to train on.

    ``turn`` is 1 for a first attempt, 1 + the number of earlier ``attempts`` for a refinement (its prompt holds them
    with their feedback; the answer responds to the last). ``kind``: the answer's `Answer.kind` on turn 1; on a
    refinement ``"fix_<flaw>"`` (the last attempt had that flaw), ``"speedup"`` (it was the slow answer) or ``"keep"``
    (it was the fast one). ``expected``: the answer's sandbox status.
    """

    messages: list[dict[str, str]]
    answer: str
    kind: str
    expected: str
    task_id: str
    backend: str
    turn: int
    attempts: tuple[Attempt, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Mix:
    """How `build_corpus` mixes its examples.

    ``first_turn``: weight of each kind among first-turn answers. A kind a task has no answer of gives its
    weight to the others of its group (correct or flawed), so the correct share stays as set.
    ``refinement_share``: the share of all examples that are refinements (turn 2).
    ``refinement_speedup``: among refinements, the share whose attempt was correct but slow (the answer is the fast
    version); ``refinement_keep``: the share whose attempt was correct and already fast (the answer submits it again;
    a policy that never saw a good attempt in its prompt tends to rewrite one into a broken program). At most one of
    each per task; the rest fix a flawed attempt. ``deeper_refinements``: among refinements, the share drawn to hold
    one or two more earlier attempts before the one the answer responds to (flawed answers of the same task, with
    their feedback; `deeper_example`, which leaves a task without another flawed answer as it is): the prompts of
    third and fourth turns, which a starter trained on second turns alone answers poorly (it ends inside its
    thought).
    """

    first_turn: Mapping[str, float] = field(default_factory=lambda: {
        "slow": 0.25, "fast": 0.20,
        "off_by_one": 0.17, "missing_op": 0.12, "compile_error": 0.13, "format_error": 0.13,
    })
    refinement_share: float = 0.3
    refinement_speedup: float = 0.2
    refinement_keep: float = 0.2
    deeper_refinements: float = 0.0

    def __post_init__(self) -> None:
        unknown = set(self.first_turn) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown kinds in Mix.first_turn: {sorted(unknown)}")
        if any(w < 0 for w in self.first_turn.values()) or sum(self.first_turn.values()) <= 0:
            raise ValueError("Mix.first_turn weights must be >= 0 with a positive sum")
        if not 0 <= self.refinement_share <= 1 or not 0 <= self.refinement_speedup <= 1:
            raise ValueError("Mix.refinement_share and Mix.refinement_speedup must be in [0, 1]")
        if self.refinement_keep < 0 or self.refinement_speedup + self.refinement_keep > 1 + 1e-9:  # float sums
            raise ValueError("Mix.refinement_keep must be in [0, 1 - refinement_speedup]")
        if not 0 <= self.deeper_refinements <= 1:
            raise ValueError(f"Mix.deeper_refinements must be in [0, 1], got {self.deeper_refinements}")

    @property
    def correct_share(self) -> float:
        """The share of first-turn answers that are correct."""
        total = sum(self.first_turn.values())
        return sum(self.first_turn.get(k, 0.0) for k in CORRECT_KINDS) / total


# ===================================================================================================
# Reading a task: its Model becomes a plan (a main op, then a chain of stages over a feature dim)


class _Unsupported(Exception):
    """No template covers this task."""


@dataclass
class _Stage:
    """One operator after the main op. ``kind``: "ew" (element-wise), "row" (along the feature dim, one
    line at a time) or "barrier" (pooling, normalisations over other dims: a pass of its own)."""

    op: str
    kind: str
    label: str
    scalars: tuple[str, ...] = ()  # ModelNew attributes passed as double
    tensors: tuple[str, ...] = ()  # ModelNew attributes passed as tensors (per-channel values, norm affine)
    ints: tuple[str, ...] = ()  # Python expressions passed as int64 (pool sizes, groups), or literals
    mode: str = ""  # pool kind, norm kind
    keepdim: bool = True
    dim: str | None = None  # the dim a row op acts on, as written ("1", "-1", "self.dim")
    torch_expr: str = ""  # the same step in PyTorch, "{x}" standing for its input (ModelNew's names)
    line: int | None = None  # index of its statement in Model.forward (to drop it from the reference)


@dataclass
class _Main:
    """The first operator: "input" (none: the stages act on the input), "mm", "diagmm", "conv", "convT",
    "loss"."""

    op: str
    label: str
    inputs: tuple[str, ...]
    tensors: tuple[str, ...] = ()  # weight, bias
    ints: tuple[str, ...] = ()  # conv: stride, padding, output_padding, groups (ModelNew attributes)
    flags: frozenset = frozenset()  # mm: "transB", "batched", "bias", "tril"
    loss: str = ""
    torch_expr: str = ""


@dataclass
class _Plan:
    task: Task
    slug: str
    fwd_args: list[str]
    init_args: list[str]
    init_lines: list[str]
    main: _Main
    stages: list[_Stage]
    fdim: str  # the feature dim as a Python expression ("1", "-1", "self.dim")
    layout: str  # "mat" (rows, features), "bmm" (batch, rows, features), "img" (N, C, spatial...), "any"
    mask: str | None = None
    needs_math: bool = False
    reference: str = ""  # Model.forward's return expression, for the PyTorch fallback of a format error
    shapes: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ops(self) -> list[str]:
        return [self.main.label] * (self.main.op != "input") + [s.label for s in self.stages]

    @property
    def uses_residual(self) -> bool:
        return any(s.op == "residual" for s in self.stages)

    @property
    def out_long(self) -> bool:
        return bool(self.stages) and self.stages[-1].op in ("argmax", "argmin")


# element-wise operators: op -> (C++ expression over ``v``, label, PyTorch form)
# {exp} etc. name math functions (std:: on the CPU, the float intrinsics in CUDA); a0/a1 are scalar
# arguments, {p} the per-channel value, {r} the main op's output at the same position.
_EW: dict[str, tuple[str, str]] = {
    "relu": ("v > 0.0f ? v : 0.0f", "ReLU"),
    "sigmoid": ("1.0f / (1.0f + {exp}(-v))", "sigmoid"),
    "tanh": ("{tanh}(v)", "tanh"),
    "gelu": ("0.5f * v * (1.0f + {erf}(v * 0.70710678118654752f))", "GELU"),
    "swish": ("v / (1.0f + {exp}(-v))", "Swish (x * sigmoid(x))"),
    "mish": ("v * {tanh}(v > 20.0f ? v : {log1p}({exp}(v)))", "Mish"),
    "hardswish": ("v <= -3.0f ? 0.0f : (v >= 3.0f ? v : v * (v + 3.0f) / 6.0f)", "HardSwish"),
    "selu": ("1.0507009873554805f * (v > 0.0f ? v : 1.6732632423543772f * {expm1}(v))", "SELU"),
    "softplus": ("v > 20.0f ? v : {log1p}({exp}(v))", "Softplus"),
    "hardsigmoid": ("v <= -3.0f ? 0.0f : (v >= 3.0f ? 1.0f : v / 6.0f + 0.5f)", "HardSigmoid"),
    "softsign": ("v / (1.0f + {fabs}(v))", "Softsign"),
    "leaky_relu": ("v > 0.0f ? v : v * {a0}", "LeakyReLU"),
    "elu": ("v > 0.0f ? v : {a0} * {expm1}(v)", "ELU"),
    "hardtanh": ("v < {a0} ? {a0} : (v > {a1} ? {a1} : v)", "Hardtanh"),
    "clamp": ("v < {a0} ? {a0} : (v > {a1} ? {a1} : v)", "clamp"),
    "mul": ("v * {a0}", "multiply by `{n0}`"),
    "add": ("v + {a0}", "add `{n0}`"),
    "sub": ("v - {a0}", "subtract `{n0}`"),
    "div": ("v / {a0}", "divide by `{n0}`"),
    "mul_p": ("v * {p}", "multiply by the learned `{n0}` per channel"),
    "add_p": ("v + {p}", "add the learned `{n0}` per channel"),
    "sub_p": ("v - {p}", "subtract the learned `{n0}` per channel"),
    "div_p": ("v / {p}", "divide by the learned `{n0}` per channel"),
    "residual": ("v + {r}", "add the main op's output back (residual)"),
}
_UNARY_CALLS = {
    "torch.relu": "relu", "F.relu": "relu", "torch.sigmoid": "sigmoid", "torch.tanh": "tanh", "F.gelu": "gelu",
    "F.mish": "mish", "F.hardswish": "hardswish", "torch.selu": "selu", "F.softplus": "softplus",
    "F.hardsigmoid": "hardsigmoid", "F.softsign": "softsign", "F.silu": "swish",
}
_KEYWORD_CALLS = {  # call -> (op, keyword names of its scalar arguments)
    "F.leaky_relu": ("leaky_relu", ("negative_slope",)),
    "F.elu": ("elu", ("alpha",)),
    "F.hardtanh": ("hardtanh", ("min_val", "max_val")),
    "torch.clamp": ("clamp", ("min", "max")),
}
_BINOPS = {ast.Mult: "mul", ast.Add: "add", ast.Sub: "sub", ast.Div: "div"}
_REDUCE_CALLS = {
    "torch.sum": "sum", "torch.mean": "mean", "torch.amax": "amax", "torch.amin": "amin", "torch.prod": "prod",
    "torch.logsumexp": "logsumexp", "torch.argmax": "argmax", "torch.argmin": "argmin",
}
_REDUCE_LABEL = {
    "sum": "sum", "mean": "mean", "amax": "max", "amin": "min", "prod": "product", "logsumexp": "log-sum-exp",
    "argmax": "argmax", "argmin": "argmin",
}
_REDUCES = frozenset(_REDUCE_LABEL)
_SCANS = frozenset({"cumsum", "cumprod", "rcumsum", "xcumsum", "mcumsum"})
_SCAN_LABEL = {
    "cumsum": "inclusive prefix sum", "cumprod": "prefix product", "rcumsum": "reverse prefix sum",
    "xcumsum": "exclusive prefix sum", "mcumsum": "masked prefix sum",
}
_LOSSES = {  # Model.forward's return expression -> loss
    "torch.mean((predictions - targets) ** 2)": "mse",
    "F.huber_loss(predictions, targets, delta=1.0)": "huber",
    "torch.mean(torch.abs(predictions - targets))": "l1",
    "F.cross_entropy(logits, targets)": "cross_entropy",
    "F.kl_div(torch.log(predictions), targets, reduction='batchmean')": "kl_div",
    "torch.mean(torch.clamp(1 - predictions * targets, min=0))": "hinge",
    "torch.mean(1 - F.cosine_similarity(predictions, targets, dim=1))": "cosine",
}
_LOSS_LABEL = {
    "mse": "mean squared error", "huber": "Huber loss (delta 1)", "l1": "mean absolute error",
    "cross_entropy": "cross-entropy", "kl_div": "KL divergence (batchmean)", "hinge": "hinge loss",
    "cosine": "mean cosine distance",
}
_RMSNORM = ("rms = torch.sqrt(torch.mean(x * x, dim=1, keepdim=True) + self.eps)", "return x / rms")


def _slug(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_") or "task"


def _self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _kw(call: ast.Call, name: str) -> ast.AST | None:
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def _dim_of(node: ast.AST | None) -> str:
    if node is None:
        raise _Unsupported("a reduction without dim")
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return str(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return f"-{node.operand.value}"
    attr = _self_attr(node)
    if attr is not None:
        return f"self.{attr}"
    raise _Unsupported(f"dim {ast.unparse(node)}")


def _keepdim(call: ast.Call) -> bool:
    node = _kw(call, "keepdim")
    return isinstance(node, ast.Constant) and node.value is True


def _lit_int(node: ast.AST | None) -> int | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, int) else None


class _Reader:
    """Turns one task's ``Model`` into a `_Plan` (raises `_Unsupported`)."""

    def __init__(self, task: Task) -> None:
        self.task = task
        tree = ast.parse(task.source)
        model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
        if model is None:
            raise _Unsupported("no Model class")
        methods = {n.name: n for n in model.body if isinstance(n, ast.FunctionDef)}
        if "forward" not in methods:
            raise _Unsupported("no forward")
        self.init = methods.get("__init__")
        self.forward = methods["forward"]
        self.init_args = [a.arg for a in self.init.args.args[1:]] if self.init else []
        self.fwd_args = [a.arg for a in self.forward.args.args[1:]]
        self.layers: dict[str, tuple[str, ast.Call]] = {}
        self.params: set[str] = set()
        self.scalars: set[str] = set()
        self.init_lines: list[str] = []
        self.needs_math = False
        self.shapes = _input_shapes(task)

    # -- __init__ --
    def read_init(self) -> None:
        if self.init is None:
            return
        for stmt in self.init.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue
            text = ast.unparse(stmt)
            if text == "super().__init__()":
                continue
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and _self_attr(stmt.targets[0]):
                attr = _self_attr(stmt.targets[0])
                value = stmt.value
                if isinstance(value, ast.Call) and ast.unparse(value.func).startswith("nn.") and \
                        ast.unparse(value.func) not in ("nn.Parameter",):
                    self._layer(attr, value)
                elif isinstance(value, ast.Call) and ast.unparse(value.func) == "nn.Parameter":
                    self.params.add(attr)
                    self.init_lines.append(text)
                elif isinstance(value, ast.Name) and value.id in self.init_args:
                    self.scalars.add(attr)
                    self.init_lines.append(text)
                else:
                    raise _Unsupported(f"__init__ statement {text}")
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
                    ast.unparse(stmt.value.func) == "nn.init.uniform_":
                target = stmt.value.args[0]
                if not (isinstance(target, ast.Attribute) and _self_attr(target.value) in self.layers):
                    raise _Unsupported(f"__init__ statement {text}")
                rest = ", ".join(ast.unparse(a) for a in stmt.value.args[1:])
                self.init_lines.append(f"nn.init.uniform_(self.{_self_attr(target.value)}_{target.attr}, {rest})")
            else:
                raise _Unsupported(f"__init__ statement {text}")

    def _layer(self, attr: str, call: ast.Call) -> None:
        cls = ast.unparse(call.func)[3:]
        args = [ast.unparse(a) for a in call.args]
        kws = {k.arg: ast.unparse(k.value) for k in call.keywords}
        lines = self.init_lines
        if cls == "Linear":
            if len(args) != 2 or set(kws) - {"bias"}:
                raise _Unsupported("nn.Linear form")
            bias = kws.get("bias", "True") != "False"
            lines.append(f"self.{attr}_weight = nn.Parameter(torch.empty({args[1]}, {args[0]}))")
            if bias:
                lines.append(f"self.{attr}_bias = nn.Parameter(torch.empty({args[1]}))")
            lines += _kaiming_lines(attr, bias)
            self.needs_math = True
        elif re.fullmatch(r"Conv[123]d|ConvTranspose[123]d", cls):
            nd = int(cls[-2])
            if len(args) != 3 or set(kws) - {"stride", "padding", "output_padding", "groups"}:
                raise _Unsupported(f"nn.{cls} form")
            cin, cout, k = args
            groups = kws.get("groups", "1")
            per = f" // {groups}" if groups != "1" else ""
            if cls.startswith("ConvTranspose"):
                shape = [cin, cout + per] + [k] * nd
            else:
                shape = [cout, cin + per] + [k] * nd
            lines.append(f"self.{attr}_weight = nn.Parameter(torch.empty({', '.join(shape)}))")
            lines.append(f"self.{attr}_bias = nn.Parameter(torch.empty({cout}))")
            lines += _kaiming_lines(attr, True)
            lines.append(f"self.{attr}_stride = {kws.get('stride', '1')}")
            lines.append(f"self.{attr}_padding = {kws.get('padding', '0')}")
            if cls.startswith("ConvTranspose"):
                lines.append(f"self.{attr}_output_padding = {kws.get('output_padding', '0')}")
            lines.append(f"self.{attr}_groups = {groups}")
            self.needs_math = True
        elif cls == "LayerNorm":
            if len(args) != 1 or kws:
                raise _Unsupported("nn.LayerNorm form")
            lines.append(f"self.{attr}_weight = nn.Parameter(torch.ones({args[0]}))")
            lines.append(f"self.{attr}_bias = nn.Parameter(torch.zeros({args[0]}))")
        elif cls == "GroupNorm":
            if len(args) != 2 or kws:
                raise _Unsupported("nn.GroupNorm form")
            lines.append(f"self.{attr}_groups = {args[0]}")
            lines.append(f"self.{attr}_weight = nn.Parameter(torch.ones({args[1]}))")
            lines.append(f"self.{attr}_bias = nn.Parameter(torch.zeros({args[1]}))")
        elif re.fullmatch(r"InstanceNorm[123]d", cls):
            if len(args) != 1 or kws:
                raise _Unsupported("nn.InstanceNorm form")
        elif re.fullmatch(r"BatchNorm[123]d", cls):
            if len(args) != 1 or kws:
                raise _Unsupported("nn.BatchNorm form")
            c = args[0]
            lines.append(f"self.{attr}_weight = nn.Parameter(torch.ones({c}))")
            lines.append(f"self.{attr}_bias = nn.Parameter(torch.zeros({c}))")
            lines.append(f"self.register_buffer(\"{attr}_running_mean\", torch.zeros({c}))")
            lines.append(f"self.register_buffer(\"{attr}_running_var\", torch.ones({c}))")
        elif re.fullmatch(r"(Max|Avg)Pool[123]d", cls):
            if len(args) != 1 or set(kws) - {"stride", "padding"}:
                raise _Unsupported(f"nn.{cls} form")
            lines.append(f"self.{attr}_kernel_size = {args[0]}")
            lines.append(f"self.{attr}_stride = {kws.get('stride', args[0])}")
            lines.append(f"self.{attr}_padding = {kws.get('padding', '0')}")
        else:
            raise _Unsupported(f"layer nn.{cls}")
        self.layers[attr] = (cls, call)

    # -- forward --
    def read_forward(self) -> _Plan:
        body = [s for s in self.forward.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        texts = tuple(ast.unparse(s) for s in body)
        main: _Main | None = None
        stages: list[_Stage] = []
        mask = None
        reference = ast.unparse(body[-1].value) if isinstance(body[-1], ast.Return) and body[-1].value else ""
        if texts == _RMSNORM:
            main = _Main("input", "input", ("x",))
            stages.append(_Stage("rmsnorm", "row", "RMS normalisation over dim 1", scalars=("eps",), dim="1",
                                 torch_expr="{x} / torch.sqrt(torch.mean({x} * {x}, dim=1, keepdim=True) + self.eps)",
                                 line=0))
            return self._plan(main, stages, None, reference)
        if len(body) == 1 and isinstance(body[0], ast.Return) and reference in _LOSSES:
            loss = _LOSSES[reference]
            main = _Main("loss", _LOSS_LABEL[loss], tuple(self.fwd_args), loss=loss, torch_expr=reference)
            return self._plan(main, [], None, reference)
        cur = self.fwd_args[0] if self.fwd_args else "x"
        residual_ok = False
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and _is_name(stmt.targets[0], "residual"):
                if not _is_name(stmt.value, cur) or main is None or stages:
                    raise _Unsupported("residual taken elsewhere than after the main op")
                residual_ok = True
                continue
            if isinstance(stmt, ast.Return):
                if stmt.value is None:
                    raise _Unsupported("empty return")
                if _is_name(stmt.value, cur):
                    break
                expr, target = stmt.value, None
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                expr, target = stmt.value, stmt.targets[0].id
            else:
                raise _Unsupported(f"forward statement {ast.unparse(stmt)}")
            item = self._match(expr, cur, first=main is None and not stages)
            if isinstance(item, _Main):
                if main is not None or stages:
                    raise _Unsupported("a second main op")
                main = item
            else:
                if main is None:
                    main = _Main("input", "input", (cur,))
                if item.op == "residual" and not residual_ok:
                    raise _Unsupported("residual without `residual = x`")
                if item.op == "mcumsum":
                    mask = item.tensors[0]
                    item.tensors = ()
                item.line = i
                stages.append(item)
            if target is None:
                break
            cur = target
        if main is None:
            raise _Unsupported("no operator")
        return self._plan(main, stages, mask, reference)

    def _plan(self, main: _Main, stages: list[_Stage], mask: str | None, reference: str) -> _Plan:
        if main.op in ("mm",) and "batched" in main.flags:
            layout = "bmm"
        elif main.op == "mm" and "bias" in main.flags or main.op == "mm" and main.tensors:
            layout = "mat"
        elif main.op in ("conv", "convT"):
            layout = "img"
        elif main.op == "input":
            layout = "any"
        else:
            layout = "mat"
        dims = {s.dim for s in stages if s.dim is not None}
        if layout in ("mat", "bmm"):
            if dims - {"-1", "1" if layout == "mat" else "2"}:
                raise _Unsupported("a row operator over a dim other than the features")
            fdim = "-1"
        elif layout == "img":
            if dims - {"1"}:
                raise _Unsupported("a row operator over a dim other than the channels")
            fdim = "1"
        else:
            if len(dims) > 1:
                raise _Unsupported(f"row operators over different dims {sorted(dims)}")
            fdim = dims.pop() if dims else "1"
        if main.op in ("mm", "diagmm", "loss") and stages and main.op != "mm":
            raise _Unsupported("stages after this main op")
        if main.op == "mm" and stages and not main.tensors and "batched" not in main.flags:
            raise _Unsupported("stages after a plain matmul")
        for s in stages:
            if s.kind == "barrier" and s.op in ("spool", "gavg", "batchnorm") and layout not in ("img", "any", "mat"):
                raise _Unsupported(f"{s.op} on this layout")
            if s.op == "spool" and layout == "mat":
                raise _Unsupported("spatial pooling of a matrix")
            if s.op in ("argmax", "argmin") and s is not stages[-1]:
                raise _Unsupported("an index reduction before other operators")
            if s.op == "pool_c" and layout not in ("mat", "bmm"):
                raise _Unsupported("feature pooling here")
        return _Plan(
            task=self.task, slug=_slug(self.task.name or self.task.task_id), fwd_args=self.fwd_args,
            init_args=self.init_args, init_lines=list(self.init_lines), main=main, stages=stages, fdim=fdim,
            layout=layout, mask=mask, needs_math=self.needs_math, reference=reference, shapes=self.shapes,
        )

    def _scalar_attr(self, node: ast.AST) -> str:
        attr = _self_attr(node)
        if attr is None or attr not in self.scalars:
            raise _Unsupported(f"argument {ast.unparse(node)}")
        return attr

    def _match(self, expr: ast.AST, cur: str, *, first: bool) -> _Main | _Stage:
        text = ast.unparse(expr)
        torch_expr = _with_placeholder(expr, cur)
        # ---- main operators
        if isinstance(expr, ast.Call):
            fn = ast.unparse(expr.func)
            attr = _self_attr(expr.func)
            if attr is not None and attr in self.layers and len(expr.args) == 1 and _is_name(expr.args[0], cur):
                return self._layer_op(attr, cur)
            if fn == "torch.bmm" and first and len(expr.args) == 2 and all(isinstance(a, ast.Name) for a in expr.args):
                a, b = (x.id for x in expr.args)
                return _Main("mm", "batched matrix multiplication", (a, b), flags=frozenset({"batched"}), torch_expr=text)
            if fn == "torch.matmul" and first and len(expr.args) == 2 and isinstance(expr.args[0], ast.Name):
                a = expr.args[0].id
                b_node = expr.args[1]
                if isinstance(b_node, ast.Name):
                    return _Main("mm", "matrix multiplication", (a, b_node.id), torch_expr=text)
                if isinstance(b_node, ast.Attribute) and b_node.attr == "T" and isinstance(b_node.value, ast.Name):
                    return _Main("mm", "matrix multiplication with a transposed right operand", (a, b_node.value.id),
                                 flags=frozenset({"transB"}), torch_expr=text)
            if fn == "torch.tril" and first and len(expr.args) == 1 and isinstance(expr.args[0], ast.Call) and \
                    ast.unparse(expr.args[0]) in ("torch.matmul(A, B)",):
                return _Main("mm", "lower-triangular matrix multiplication", ("A", "B"), flags=frozenset({"tril"}),
                             torch_expr=text)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.MatMult) and first and \
                ast.unparse(expr.left).startswith("torch.diag(") and isinstance(expr.right, ast.Name):
            inner = expr.left.args[0] if isinstance(expr.left, ast.Call) and expr.left.args else None
            if isinstance(inner, ast.Name):
                return _Main("diagmm", "diagonal matrix times a matrix", (inner.id, expr.right.id), torch_expr=text)
        # ---- stages
        if isinstance(expr, ast.Call):
            fn = ast.unparse(expr.func)
            on_cur = len(expr.args) >= 1 and _is_name(expr.args[0], cur)
            if fn in _UNARY_CALLS and on_cur and len(expr.args) == 1 and not expr.keywords:
                op = _UNARY_CALLS[fn]
                return _Stage(op, "ew", _EW[op][1], torch_expr=torch_expr)
            if fn in _KEYWORD_CALLS and on_cur and len(expr.args) == 1:
                op, names = _KEYWORD_CALLS[fn]
                if {k.arg for k in expr.keywords} != set(names):
                    raise _Unsupported(f"{fn} arguments")
                scal = tuple(self._scalar_attr(_kw(expr, n)) for n in names)
                return _Stage(op, "ew", _EW[op][1], scalars=scal, torch_expr=torch_expr)
            if fn in ("torch.softmax", "torch.log_softmax", "F.softmax", "F.log_softmax") and on_cur:
                op = "softmax" if fn.endswith(".softmax") else "log_softmax"
                dim = _dim_of(_kw(expr, "dim"))
                label = ("softmax" if op == "softmax" else "log-softmax") + _over(dim)
                return _Stage(op, "row", label, dim=dim, torch_expr=torch_expr)
            if fn in _REDUCE_CALLS and on_cur and len(expr.args) == 1:
                dim_node = _kw(expr, "dim")
                if isinstance(dim_node, ast.Tuple):  # a mean over all spatial dims
                    dims = [_lit_int(e) for e in dim_node.elts]
                    if fn != "torch.mean" or not _keepdim(expr) or dims != list(range(2, 2 + len(dims))):
                        raise _Unsupported(f"reduction {text}")
                    return _Stage("gavg", "barrier", "global average pooling", torch_expr=torch_expr)
                op = _REDUCE_CALLS[fn]
                dim = _dim_of(dim_node)
                return _Stage(op, "row", _REDUCE_LABEL[op] + _over(dim), dim=dim, keepdim=_keepdim(expr),
                              torch_expr=torch_expr)
            if fn in ("torch.cumsum", "torch.cumprod") and len(expr.args) == 1:
                dim = _dim_of(_kw(expr, "dim"))
                arg = expr.args[0]
                if _is_name(arg, cur):
                    op = "cumsum" if fn == "torch.cumsum" else "cumprod"
                    return _Stage(op, "row", _SCAN_LABEL[op] + _over(dim), dim=dim, torch_expr=torch_expr)
                if fn == "torch.cumsum" and isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mult) and \
                        _is_name(arg.left, cur) and isinstance(arg.right, ast.Name) and arg.right.id in self.fwd_args:
                    return _Stage("mcumsum", "row", _SCAN_LABEL["mcumsum"] + _over(dim), dim=dim,
                                  tensors=(arg.right.id,), torch_expr=torch_expr)
            if fn in ("F.max_pool1d", "F.avg_pool1d") and len(expr.args) == 1 and _lit_int(_kw(expr, "kernel_size")) == 2 \
                    and len(expr.keywords) == 1 and _is_name(expr.args[0], cur):
                kind = "max" if "max" in fn else "avg"
                return _Stage("pool_c", "row", f"{kind} pooling (kernel 2) over the features", mode=kind, dim="-1",
                              torch_expr=torch_expr)
            if re.fullmatch(r"F\.(max|avg)_pool[23]d", fn) and on_cur and len(expr.args) == 1 and \
                    _lit_int(_kw(expr, "kernel_size")) == 2 and len(expr.keywords) == 1:
                kind = "max" if "max" in fn else "avg"
                return _Stage("spool", "barrier", f"{kind} pooling (kernel 2)", mode=kind, ints=("2", "2", "0"),
                              torch_expr=torch_expr)
            if fn == "torch.cumsum" and isinstance(expr.func, ast.Attribute):
                pass
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "squeeze" and \
                [ast.unparse(a) for a in expr.args] == ["1"]:
            inner = expr.func.value
            if isinstance(inner, ast.Call) and ast.unparse(inner.func) in ("F.max_pool1d", "F.avg_pool1d") and \
                    len(inner.args) == 1 and ast.unparse(inner.args[0]) == f"{cur}.unsqueeze(1)" and \
                    _lit_int(_kw(inner, "kernel_size")) == 2 and len(inner.keywords) == 1:
                kind = "max" if "max" in ast.unparse(inner.func) else "avg"
                return _Stage("pool_c", "row", f"{kind} pooling (kernel 2) over the features", mode=kind, dim="-1",
                              torch_expr=torch_expr)
            if isinstance(inner, ast.Call) and ast.unparse(inner.func) == "torch.cumsum":
                pass
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "flip":
            inner = expr.func.value
            if isinstance(inner, ast.Call) and ast.unparse(inner.func) == "torch.cumsum" and len(inner.args) == 1 and \
                    isinstance(inner.args[0], ast.Call) and isinstance(inner.args[0].func, ast.Attribute) and \
                    inner.args[0].func.attr == "flip" and _is_name(inner.args[0].func.value, cur):
                dims = {ast.unparse(expr.args[0]), ast.unparse(inner.args[0].args[0]), ast.unparse(_kw(inner, "dim"))}
                if len(dims) == 1:
                    dim = _dim_of(_kw(inner, "dim"))
                    return _Stage("rcumsum", "row", _SCAN_LABEL["rcumsum"] + _over(dim), dim=dim, torch_expr=torch_expr)
        if isinstance(expr, ast.Attribute) and expr.attr == "values" and isinstance(expr.value, ast.Call) and \
                ast.unparse(expr.value.func) in ("torch.max", "torch.min") and len(expr.value.args) == 1 and \
                _is_name(expr.value.args[0], cur):
            op = "amax" if ast.unparse(expr.value.func) == "torch.max" else "amin"
            dim = _dim_of(_kw(expr.value, "dim"))
            return _Stage(op, "row", _REDUCE_LABEL[op] + _over(dim), dim=dim, keepdim=_keepdim(expr.value),
                          torch_expr=torch_expr)
        if isinstance(expr, ast.BinOp):
            if isinstance(expr.op, ast.Mult) and _is_name(expr.left, cur) and \
                    ast.unparse(expr.right) == f"torch.sigmoid({cur})":
                return _Stage("swish", "ew", _EW["swish"][1], torch_expr=torch_expr)
            if isinstance(expr.op, ast.Sub) and _is_name(expr.right, cur) and isinstance(expr.left, ast.Call) and \
                    ast.unparse(expr.left.func) == "torch.cumsum" and len(expr.left.args) == 1 and \
                    _is_name(expr.left.args[0], cur):
                dim = _dim_of(_kw(expr.left, "dim"))
                return _Stage("xcumsum", "row", _SCAN_LABEL["xcumsum"] + _over(dim), dim=dim, torch_expr=torch_expr)
            op = _BINOPS.get(type(expr.op))
            if op is not None and _is_name(expr.left, cur):
                if _is_name(expr.right, "residual") and op == "add":
                    return _Stage("residual", "ew", _EW["residual"][1], torch_expr=torch_expr)
                attr = _self_attr(expr.right)
                if attr is not None and attr in self.params:
                    return _Stage(op + "_p", "ew", _EW[op + "_p"][1].format(n0=attr), tensors=(attr,),
                                  torch_expr=torch_expr)
                if attr is not None and attr in self.scalars:
                    return _Stage(op, "ew", _EW[op][1].format(n0=attr), scalars=(attr,), torch_expr=torch_expr)
        raise _Unsupported(f"expression {text}")

    def _layer_op(self, attr: str, cur: str) -> _Main | _Stage:
        cls, call = self.layers[attr]
        if cls == "Linear":
            bias = any(k.arg == "bias" and ast.unparse(k.value) == "False" for k in call.keywords) is False
            tensors = (f"{attr}_weight",) + ((f"{attr}_bias",) if bias else ())
            label = "a GEMM (x @ W^T + b)" if bias else "a matrix multiplication with a learned weight (x @ W^T)"
            te = f"F.linear({{x}}, self.{attr}_weight" + (f", self.{attr}_bias)" if bias else ")")
            return _Main("mm", label, (cur,), tensors=tensors,
                         flags=frozenset({"transB"} | ({"bias"} if bias else set())), torch_expr=te)
        if cls.startswith("Conv"):
            nd = cls[-2]
            transposed = cls.startswith("ConvTranspose")
            ints = (f"{attr}_stride", f"{attr}_padding") + ((f"{attr}_output_padding",) if transposed else ()) + \
                (f"{attr}_groups",)
            name = f"conv_transpose{nd}d" if transposed else f"conv{nd}d"
            extra = f", output_padding=self.{attr}_output_padding" if transposed else ""
            te = (f"F.{name}({{x}}, self.{attr}_weight, self.{attr}_bias, stride=self.{attr}_stride, "
                  f"padding=self.{attr}_padding{extra}, groups=self.{attr}_groups)")
            label = f"a {nd}D {'transposed ' if transposed else ''}convolution"
            return _Main("convT" if transposed else "conv", label, (cur,),
                         tensors=(f"{attr}_weight", f"{attr}_bias"), ints=ints, torch_expr=te)
        if cls == "LayerNorm":
            return _Stage("segnorm", "barrier", "layer norm", mode="layer", tensors=(f"{attr}_weight", f"{attr}_bias"),
                          torch_expr=f"F.layer_norm({{x}}, self.{attr}_weight.shape, self.{attr}_weight, self.{attr}_bias)")
        if cls == "GroupNorm":
            return _Stage("segnorm", "barrier", "group norm", mode="group", ints=(f"{attr}_groups",),
                          tensors=(f"{attr}_weight", f"{attr}_bias"),
                          torch_expr=f"F.group_norm({{x}}, self.{attr}_groups, self.{attr}_weight, self.{attr}_bias)")
        if cls.startswith("InstanceNorm"):
            return _Stage("segnorm", "barrier", "instance norm", mode="instance", torch_expr="F.instance_norm({x})")
        if cls.startswith("BatchNorm"):
            return _Stage("batchnorm", "barrier", "batch norm (batch statistics: the module is in training mode)",
                          tensors=(f"{attr}_weight", f"{attr}_bias"),
                          torch_expr=(f"F.batch_norm({{x}}, self.{attr}_running_mean, self.{attr}_running_var, "
                                      f"self.{attr}_weight, self.{attr}_bias, training=True)"))
        if re.fullmatch(r"(Max|Avg)Pool[123]d", cls):
            kind = "max" if cls.startswith("Max") else "avg"
            nd = cls[-2]
            return _Stage("spool", "barrier", f"{nd}D {kind} pooling", mode=kind,
                          ints=(f"{attr}_kernel_size", f"{attr}_stride", f"{attr}_padding"),
                          torch_expr=(f"F.{kind}_pool{nd}d({{x}}, self.{attr}_kernel_size, self.{attr}_stride, "
                                      f"self.{attr}_padding)"))
        raise _Unsupported(f"layer {cls}")


def _over(dim: str) -> str:
    return " over the last dim" if dim == "-1" else (" over `dim`" if dim == "self.dim" else f" over dim {dim}")


def _with_placeholder(expr: ast.AST, cur: str) -> str:
    """``expr`` as source with its input variable written ``{x}`` (other braces doubled)."""

    class Swap(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            return ast.Name(id="__X__", ctx=node.ctx) if node.id == cur else node

    text = ast.unparse(Swap().visit(ast.parse(ast.unparse(expr), mode="eval")))
    return text.replace("{", "{{").replace("}", "}}").replace("__X__", "{x}")


def _kaiming_lines(attr: str, bias: bool) -> list[str]:
    lines = [f"nn.init.kaiming_uniform_(self.{attr}_weight, a=math.sqrt(5))"]
    if bias:
        lines += [
            f"fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.{attr}_weight)",
            "bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0",
            f"nn.init.uniform_(self.{attr}_bias, -bound, bound)",
        ]
    return lines


def _input_shapes(task: Task) -> dict[str, Any]:
    """Sizes for the thoughts: each backend's input shapes, one per element of ``get_inputs``'s list (the sizes of
    the first ``torch.randn``-like call, or local helper call, that builds it)."""
    out: dict[str, Any] = {}
    for backend in BACKENDS:
        try:
            tree = ast.parse(task.source_for(backend))
        except SyntaxError:
            continue
        consts: dict[str, Any] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    consts[node.targets[0].id] = eval(compile(ast.Expression(node.value), "<c>", "eval"),  # noqa: S307
                                                      {"__builtins__": {}}, dict(consts))
                except Exception:  # noqa: BLE001 - only plain constants matter here
                    pass
        helpers = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        getter = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"), None)
        shapes = []
        if getter is not None:
            local = {s.targets[0].id: s.value for s in getter.body
                     if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)}
            ret = next((s.value for s in getter.body if isinstance(s, ast.Return)), None)
            def walk(node: ast.AST, depth: int = 0) -> Any:
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Name) and sub.id in local and depth < 3:
                        yield from walk(local[sub.id], depth + 1)
                    else:
                        yield sub

            for elt in ret.elts if isinstance(ret, ast.List) else []:
                for node in walk(elt):
                    if not isinstance(node, ast.Call):
                        continue
                    fn = ast.unparse(node.func)
                    args = node.args
                    if fn == "torch.randint" and len(args) == 3 and isinstance(args[2], ast.Tuple):
                        args = args[2].elts
                    elif fn not in ("torch.randn", "torch.rand") and fn not in helpers - {"get_inputs"}:
                        continue
                    try:
                        dims = tuple(int(eval(compile(ast.Expression(a), "<d>", "eval"),  # noqa: S307
                                              {"__builtins__": {}}, dict(consts))) for a in args)
                    except Exception:  # noqa: BLE001
                        continue
                    if dims:
                        shapes.append(dims)
                        break
        out[backend] = shapes
    return out


def _plan_for(task: Task) -> _Plan:
    reader = _Reader(task)
    reader.read_init()
    return reader.read_forward()


# ===================================================================================================
# Code generation, shared parts

_CPP_FN = {"exp": "std::exp", "log": "std::log", "log1p": "std::log1p", "expm1": "std::expm1", "tanh": "std::tanh",
           "erf": "std::erf", "sqrt": "std::sqrt", "fabs": "std::fabs"}
_CUDA_FN = {"exp": "expf", "log": "logf", "log1p": "log1pf", "expm1": "expm1f", "tanh": "tanhf", "erf": "erff",
            "sqrt": "sqrtf", "fabs": "fabsf"}


class _Code:
    """Lines of C++ with an indentation level."""

    def __init__(self, depth: int = 0) -> None:
        self.lines: list[str] = []
        self.depth = depth

    def __call__(self, *lines: str) -> "_Code":
        for line in lines:
            self.lines.append(("    " * self.depth + line) if line else "")
        return self

    def open(self, line: str) -> "_Code":
        self(line + " {")
        self.depth += 1
        return self

    def close(self, tail: str = "}") -> "_Code":
        self.depth -= 1
        self(tail)
        return self

    def extend(self, lines: Sequence[str]) -> "_Code":
        return self(*lines)

    def text(self) -> str:
        return "\n".join(self.lines)


def _is_literal(expr: str) -> bool:
    return re.fullmatch(r"-?\d+", expr) is not None


@dataclass
class _Arg:
    kind: str  # "tensor", "double", "int"
    name: str  # the C++ parameter
    py: str  # what ModelNew.forward passes

    @property
    def decl(self) -> str:
        return {"tensor": "torch::Tensor", "double": "double", "int": "int64_t"}[self.kind] + " " + self.name


def _arguments(plan: _Plan, stages: Sequence[_Stage]) -> list[_Arg]:
    """The kernel function's parameters, in order: inputs, the main op's tensors and ints, then each stage's."""
    args: list[_Arg] = []
    seen: set[str] = set()

    def add(kind: str, name: str, py: str) -> None:
        if name not in seen:
            seen.add(name)
            args.append(_Arg(kind, name, py))

    for a in plan.main.inputs:
        add("tensor", a, a)
    if plan.mask and any(s.op == "mcumsum" for s in stages):
        add("tensor", plan.mask, plan.mask)
    for t in plan.main.tensors:
        add("tensor", t, f"self.{t}")
    for i in plan.main.ints:
        add("int", i, f"self.{i}")
    for s in stages:
        for t in s.tensors:
            add("tensor", t, f"self.{t}")
        for sc in s.scalars:
            add("double", sc, f"self.{sc}")
        for i in s.ints:
            if not _is_literal(i):
                add("int", i, f"self.{i}")
    if _needs_fdim(stages) and not _is_literal(plan.fdim):
        add("int", "dim", plan.fdim)
    return args


def _needs_fdim(stages: Sequence[_Stage]) -> bool:
    return any(s.kind == "row" or (s.kind == "ew" and s.tensors) for s in stages)


def _fdim_expr(plan: _Plan) -> str:
    return plan.fdim if _is_literal(plan.fdim) else "dim"


def _groups(stages: Sequence[_Stage], variant: str) -> list[list[_Stage]]:
    """Passes over the data: ``slow`` one per stage; ``fast`` merges runs of element-wise and row stages."""
    if variant == "slow":
        return [[s] for s in stages]
    groups: list[list[_Stage]] = []
    for s in stages:
        if s.kind != "barrier" and groups and groups[-1][0].kind != "barrier":
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def _group_kind(group: Sequence[_Stage]) -> str:
    if group[0].kind == "barrier":
        return "barrier"
    return "line" if any(s.kind == "row" for s in group) else "ew"


def _c_out(group: Sequence[_Stage], c: str = "C") -> str:
    expr = c
    for s in group:
        if s.op in _REDUCES:
            expr = "1"
        elif s.op == "pool_c":
            expr = f"{expr} / 2" if expr == c else f"({expr}) / 2"
    return expr


def _ew_line(stage: _Stage, fn: Mapping[str, str], *, param: Any, resid: str) -> str:
    """``v = <expr>;`` for one element-wise stage. ``param(name)`` gives a per-channel value's expression."""
    expr, _ = _EW[stage.op]
    values = {k: v for k, v in fn.items()}
    values.update({f"a{i}": f"s_{n}" for i, n in enumerate(stage.scalars)})
    values["p"] = param(stage.tensors[0]) if stage.tensors else ""
    values["r"] = resid
    return f"v = {expr.format(**values)};"


def _seq_row(stage: _Stage, at: Any, fn: Mapping[str, str], *, mask_at: Any = None, slow: bool = False) -> list[str]:
    """Sequential code of one row stage over the line ``at(c)`` (c < L); may change ``L``. ``slow``: the naive
    forms (softmax recomputes each exponential, log-softmax the logarithm, scans restart from the line's start)."""
    a = at
    f = fn
    op = stage.op
    if slow and op == "softmax":
        return [
            "{",
            f"    float m = {a('0')};",
            f"    for (int64_t c = 1; c < L; ++c) m = {a('c')} > m ? {a('c')} : m;",
            "    double sum = 0.0;",
            f"    for (int64_t c = 0; c < L; ++c) sum += {f['exp']}({a('c')} - m);",
            f"    for (int64_t c = 0; c < L; ++c) {a('c')} = {f['exp']}({a('c')} - m) / (float)sum;",
            "}",
        ]
    if slow and op == "log_softmax":
        return [
            "{",
            f"    float m = {a('0')};",
            f"    for (int64_t c = 1; c < L; ++c) m = {a('c')} > m ? {a('c')} : m;",
            "    double sum = 0.0;",
            f"    for (int64_t c = 0; c < L; ++c) sum += {f['exp']}({a('c')} - m);",
            f"    for (int64_t c = 0; c < L; ++c) {a('c')} = {a('c')} - m - {f['log']}((float)sum);",
            "}",
        ]
    if slow and op in _SCANS:
        # every output restarts its sum: O(L^2). Prefix ops write from the end (the inputs they read are
        # below them); the reverse scan writes from the start.
        if op == "rcumsum":
            head, lo, hi = "for (int64_t c = 0; c < L; ++c) {", "c", "L"
        else:
            head, lo, hi = "for (int64_t c = L - 1; c >= 0; --c) {", "0", "c + 1"
        init = "1.0" if op == "cumprod" else "0.0"
        term = {
            "cumsum": f"acc += {a('j')};", "rcumsum": f"acc += {a('j')};", "cumprod": f"acc *= {a('j')};",
            "xcumsum": f"acc += {a('j')};",
            "mcumsum": f"if ({mask_at('j') if mask_at else 'true'}) acc += {a('j')};",
        }[op]
        store = f"{a('c')} = (float)acc - {a('c')};" if op == "xcumsum" else f"{a('c')} = (float)acc;"
        return ["{", "    " + head, f"        double acc = {init};",
                f"        for (int64_t j = {lo}; j < {hi}; ++j) {term}", f"        {store}", "    }", "}"]
    if op in ("softmax", "log_softmax", "logsumexp"):
        lines = [
            "{",
            f"    float m = {a('0')};",
            f"    for (int64_t c = 1; c < L; ++c) m = {a('c')} > m ? {a('c')} : m;",
            "    double sum = 0.0;",
        ]
        if op == "softmax":
            lines += [
                "    for (int64_t c = 0; c < L; ++c) {",
                f"        const float e = {f['exp']}({a('c')} - m);",
                f"        {a('c')} = e;",
                "        sum += e;",
                "    }",
                "    const float inv = (float)(1.0 / sum);",
                f"    for (int64_t c = 0; c < L; ++c) {a('c')} *= inv;",
            ]
        elif op == "log_softmax":
            lines += [
                f"    for (int64_t c = 0; c < L; ++c) sum += {f['exp']}({a('c')} - m);",
                f"    const float lse = m + {f['log']}((float)sum);",
                f"    for (int64_t c = 0; c < L; ++c) {a('c')} = {a('c')} - lse;",
            ]
        else:
            lines += [
                f"    for (int64_t c = 0; c < L; ++c) sum += {f['exp']}({a('c')} - m);",
                f"    {a('0')} = m + {f['log']}((float)sum);",
                "    L = 1;",
            ]
        return lines + ["}"]
    if op in ("sum", "mean", "prod"):
        init, upd = ("1.0", "acc *= {x};") if op == "prod" else ("0.0", "acc += {x};")
        tail = " / (double)L" if op == "mean" else ""
        return [
            "{",
            f"    double acc = {init};",
            f"    for (int64_t c = 0; c < L; ++c) {upd.format(x=a('c'))}",
            f"    {a('0')} = (float)(acc{tail});",
            "    L = 1;",
            "}",
        ]
    if op in ("amax", "amin"):
        cmp = ">" if op == "amax" else "<"
        return [
            "{",
            f"    float m = {a('0')};",
            f"    for (int64_t c = 1; c < L; ++c) m = {a('c')} {cmp} m ? {a('c')} : m;",
            f"    {a('0')} = m;",
            "    L = 1;",
            "}",
        ]
    if op in ("argmax", "argmin"):
        cmp = ">" if op == "argmax" else "<"
        return [
            "{",
            f"    float best = {a('0')};",
            "    int64_t best_c = 0;",
            "    for (int64_t c = 1; c < L; ++c) {",
            f"        if ({a('c')} {cmp} best) {{",
            f"            best = {a('c')};",
            "            best_c = c;",
            "        }",
            "    }",
            f"    {a('0')} = (float)best_c;",
            "    L = 1;",
            "}",
        ]
    if op == "pool_c":
        value = "u > w ? u : w" if stage.mode == "max" else "(u + w) / 2.0f"
        return [
            "{",
            "    const int64_t half = L / 2;",
            "    for (int64_t c = 0; c < half; ++c) {",
            f"        const float u = {a('2 * c')}, w = {a('2 * c + 1')};",
            f"        {a('c')} = {value};",
            "    }",
            "    L = half;",
            "}",
        ]
    if op == "rmsnorm":
        return [
            "{",
            "    double ss = 0.0;",
            f"    for (int64_t c = 0; c < L; ++c) ss += (double){a('c')} * {a('c')};",
            f"    const float rms = {f['sqrt']}((float)(ss / (double)L) + s_{stage.scalars[0]});",
            f"    for (int64_t c = 0; c < L; ++c) {a('c')} = {a('c')} / rms;",
            "}",
        ]
    if op in ("cumsum", "cumprod", "xcumsum", "mcumsum"):
        init = "1.0" if op == "cumprod" else "0.0"
        body = {
            "cumsum": [f"acc += {a('c')};", f"{a('c')} = (float)acc;"],
            "cumprod": [f"acc *= {a('c')};", f"{a('c')} = (float)acc;"],
            "xcumsum": [f"const float v = {a('c')};", "acc += v;", f"{a('c')} = (float)acc - v;"],
            "mcumsum": [f"if ({mask_at('c') if mask_at else 'true'}) acc += {a('c')};", f"{a('c')} = (float)acc;"],
        }[op]
        return ["{", f"    double acc = {init};", "    for (int64_t c = 0; c < L; ++c) {",
                *("        " + b for b in body), "    }", "}"]
    if op == "rcumsum":
        return ["{", "    double acc = 0.0;", "    for (int64_t c = L - 1; c >= 0; --c) {",
                f"        acc += {a('c')};", f"        {a('c')} = (float)acc;", "    }", "}"]
    raise _Unsupported(f"row op {op}")


def _labels(group: Sequence[_Stage]) -> str:
    return ", then ".join(s.label for s in group)


# ===================================================================================================
# The CPU backend: one C++ function, loops only


@dataclass
class _Source:
    """A generated kernel: the backend's sources and the function ModelNew calls."""

    fn: str
    args: list[_Arg]
    cpp: str  # cpp_sources: the whole program (cpu) or the declaration (cuda)
    cuda: str = ""  # cuda_sources (cuda only)
    short: str = ""  # what the off-by-one left out ("the last row"), for the feedback


class _CppWriter:
    """C++ for one plan: ``variant`` "slow" or "fast"; ``off_by_one`` leaves the final loop one short."""

    def __init__(self, plan: _Plan, stages: Sequence[_Stage], variant: str, *, off_by_one: bool = False) -> None:
        self.plan = plan
        self.stages = list(stages)
        self.variant = variant
        self.off = off_by_one
        self.fn = f"{plan.slug}_forward"
        self.args = _arguments(plan, self.stages)
        self.fn_map = _CPP_FN
        self.short = ""
        self.helpers: list[str] = []
        self.fdim_done = False

    # ---- helpers
    def minus(self, bound: str, final: bool = True) -> str:
        return f"{bound} - 1" if self.off and final else bound

    def tensor_args(self) -> list[_Arg]:
        return [a for a in self.args if a.kind == "tensor"]

    def source(self) -> _Source:
        p = self.plan
        c = _Code(1)
        first = p.main.inputs[0]
        c(f'TORCH_CHECK(!{first}.is_cuda(), "{self.fn}: expected CPU tensors");')
        if p.main.op != "loss" or p.main.loss != "cross_entropy":
            c(f'TORCH_CHECK({first}.scalar_type() == torch::kFloat32, "{self.fn}: expected float32 input");')
        for a in self.tensor_args():
            c(f"torch::Tensor {a.name}_c = {a.name}.contiguous();")
        for a in self.args:
            if a.kind == "double":
                c(f"const float s_{a.name} = (float){a.name};")
        if p.main.op == "loss":
            self.loss(c)
        else:
            main_fused = self.main(c)
            groups = _groups(self.stages, self.variant)
            if main_fused:
                groups = groups[1:]
            for k, g in enumerate(groups):
                self.group(c, g, final=k == len(groups) - 1)
            c("return y;")
        includes = ["#include <torch/extension.h>", "#include <algorithm>", "#include <cmath>", "#include <vector>"]
        decl = ", ".join(a.decl for a in self.args)
        body = [*includes, "", *self.helpers, f"torch::Tensor {self.fn}({decl}) {{", c.text(), "}"]
        text = "\n".join(line for line in body) + "\n"
        return _Source(self.fn, self.args, text, short=self.short)

    def need_split(self) -> None:
        if not any(h.startswith("static void split_at") for h in self.helpers):
            self.helpers += [
                "// outer x size x inner view of a contiguous tensor around dim",
                "static void split_at(const std::vector<int64_t>& shape, int64_t dim, int64_t& outer, int64_t& size,",
                "                     int64_t& inner) {",
                "    outer = 1;",
                "    inner = 1;",
                "    for (int64_t d = 0; d < dim; ++d) outer *= shape[d];",
                "    size = shape[dim];",
                "    for (int64_t d = dim + 1; d < (int64_t)shape.size(); ++d) inner *= shape[d];",
                "}",
                "",
            ]

    def fdim_lines(self, c: _Code) -> None:
        if self.fdim_done:
            return
        self.fdim_done = True
        c(f"int64_t fdim = {_fdim_expr(self.plan)};")
        c("if (fdim < 0) fdim += (int64_t)shape.size();")
        c(f'TORCH_CHECK(fdim >= 0 && fdim < (int64_t)shape.size(), "{self.fn}: dim out of range");')

    # ---- main operators; return True when the first group was done inside the main loop
    def main(self, c: _Code) -> bool:
        p = self.plan
        op = p.main.op
        if op == "input":
            c(f"torch::Tensor y = {p.main.inputs[0]}_c;")
            c("std::vector<int64_t> shape(y.sizes().begin(), y.sizes().end());")
            fused = False
        elif op == "mm":
            fused = self.mm(c)
        elif op == "diagmm":
            self.diagmm(c)
            fused = False
        else:
            fused = self.conv(c, transposed=op == "convT")
        if self.stages:
            if _needs_fdim(self.stages) or p.uses_residual:
                self.fdim_lines(c)
            if p.uses_residual and not (fused and any(s.op == "residual" for s in _groups(self.stages, self.variant)[0])):
                c("const torch::Tensor main_out = y;  // kept for the residual add")
                c("const float* r_main = main_out.data_ptr<float>();")
        return fused

    def mm(self, c: _Code) -> bool:
        p = self.plan
        m = p.main
        flags = m.flags
        A = m.inputs[0]
        B = m.tensors[0] if m.tensors else m.inputs[1]
        bias = m.tensors[1] if "bias" in flags else None
        tb, batched, tril = "transB" in flags, "batched" in flags, "tril" in flags
        c("const int64_t K = %s_c.size(-1);" % A)
        if batched:
            c(f'TORCH_CHECK({A}_c.dim() == 3 && {B}_c.dim() == 3 && {B}_c.size(0) == {A}_c.size(0), '
              f'"{self.fn}: expected two batches of matrices");')
            c(f"const int64_t batch = {A}_c.size(0), M = {A}_c.size(1), N = {B}_c.size(2);")
            c(f'TORCH_CHECK({B}_c.size(1) == K, "{self.fn}: inner dimensions differ");')
        else:
            c(f"const int64_t M = {A}_c.numel() / K;  // every leading dim of {A} is a row")
            c(f"const int64_t N = {B}_c.size({0 if tb else 1});")
            c(f'TORCH_CHECK({B}_c.dim() == 2 && {B}_c.size({1 if tb else 0}) == K, "{self.fn}: inner dimensions differ");')
        c(f"std::vector<int64_t> shape({A}_c.sizes().begin(), {A}_c.sizes().end());")
        c("shape.back() = N;")
        c(f"const float* pa = {A}_c.data_ptr<float>();")
        c(f"const float* pb = {B}_c.data_ptr<float>();")
        if bias:
            c(f"const float* pbias = {bias}_c.data_ptr<float>();")
        bterm = "pb[j * K + k]" if tb else "pb[k * N + j]"
        groups = _groups(self.stages, self.variant)
        fuse = (self.variant == "fast" and bool(groups) and _group_kind(groups[0]) != "barrier" and not tril
                and not (p.uses_residual and not any(s.op == "residual" for s in groups[0])))
        if fuse:
            self.mm_fused(c, groups[0], final=len(groups) == 1, tb=tb, batched=batched, bias=bias)
            return True
        final = not self.stages
        c("torch::Tensor y = torch::empty(shape, %s_c.options());" % A)
        c("float* py = y.data_ptr<float>();")
        if self.variant == "slow":
            rows = "batch * M" if batched else "M"
            if batched:
                bterm = "pb[(r / M) * K * N + k * N + j]"
            c(f"for (int64_t r = 0; r < {self.minus(rows, final)}; ++r) {{  // r: a row of the output")
            c("    for (int64_t j = 0; j < N; ++j) {")
            c("        float acc = 0.0f;")
            c("        for (int64_t k = 0; k < K; ++k) {")
            c(f"            acc += pa[r * K + k] * {bterm};")
            c("        }")
            value = "acc" + (" + pbias[j]" if bias else "")
            if tril:
                value = "j <= r ? acc : 0.0f"
            c(f"        py[r * N + j] = {value};")
            c("    }")
            c("}")
            if final and self.off:
                self.short = "the last row of the output"
            return False
        if tb:
            c(f"for (int64_t r = 0; r < {self.minus('M', final)}; ++r) {{")
            c.depth += 1
            c("const float* arow = pa + r * K;")
            self.dot_row(c, "arow", "N", "py[r * N + j]", bias)
            c.close()
            if final and self.off:
                self.short = "the last row of the output"
            return False
        if tril:
            c("// A and B are lower triangular: for row r, k runs to r and j to k")
            c("for (int64_t r = 0; r < %s; ++r) {" % self.minus("M", final))
            c("    float* crow = py + r * N;")
            c("    for (int64_t j = 0; j < N; ++j) crow[j] = 0.0f;")
            c("    for (int64_t k = 0; k <= r && k < K; ++k) {")
            c("        const float av = pa[r * K + k];")
            c("        const float* brow = pb + k * N;")
            c("        const int64_t j_end = std::min(k + 1, N);")
            c("        for (int64_t j = 0; j < j_end; ++j) crow[j] += av * brow[j];")
            c("    }")
            c("}")
            if final and self.off:
                self.short = "the last row of the output"
            return False
        # blocked i-k-j: a block of rows of A against all of B, K in blocks that stay in cache
        c("constexpr int64_t BS = 64;")
        if batched:
            c("for (int64_t bb = 0; bb < batch; ++bb) {")
            c.depth += 1
            c("const float* am = pa + bb * M * K;")
            c("const float* bm = pb + bb * K * N;")
            c("float* cm = py + bb * M * N;")
        else:
            c("const float* am = pa;")
            c("const float* bm = pb;")
            c("float* cm = py;")
        c("for (int64_t i0 = 0; i0 < M; i0 += BS) {")
        c(f"    const int64_t i1 = std::min(i0 + BS, {self.minus('M', final)});")
        c("    for (int64_t i = i0; i < i1; ++i) {")
        c("        for (int64_t j = 0; j < N; ++j) cm[i * N + j] = 0.0f;")
        c("    }")
        c("    for (int64_t k0 = 0; k0 < K; k0 += BS) {")
        c("        const int64_t k1 = std::min(k0 + BS, K);")
        c("        for (int64_t i = i0; i < i1; ++i) {")
        c("            float* crow = cm + i * N;")
        c("            for (int64_t k = k0; k < k1; ++k) {")
        c("                const float av = am[i * K + k];")
        c("                const float* brow = bm + k * N;")
        c("                for (int64_t j = 0; j < N; ++j) crow[j] += av * brow[j];")
        c("            }")
        c("        }")
        c("    }")
        c("}")
        if batched:
            c.close()
        if final and self.off:
            self.short = "the last row of " + ("each matrix of the output" if batched else "the output")
        return False

    def dot_row(self, c: _Code, arow: str, n: str, store: str, bias: str | None) -> None:
        """``store`` (an expression of j) = dot(arow, row j of B) over K, four partial sums."""
        c(f"for (int64_t j = 0; j < {n}; ++j) {{")
        c("    const float* brow = pb + j * K;")
        c("    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;")
        c("    int64_t k = 0;")
        c("    for (; k + 4 <= K; k += 4) {")
        c(f"        s0 += {arow}[k] * brow[k];")
        c(f"        s1 += {arow}[k + 1] * brow[k + 1];")
        c(f"        s2 += {arow}[k + 2] * brow[k + 2];")
        c(f"        s3 += {arow}[k + 3] * brow[k + 3];")
        c("    }")
        c(f"    for (; k < K; ++k) s0 += {arow}[k] * brow[k];")
        c(f"    {store} = (s0 + s1) + (s2 + s3){' + pbias[j]' if bias else ''};")
        c("}")

    def mm_fused(self, c: _Code, group: list[_Stage], *, final: bool, tb: bool, batched: bool, bias: str | None) -> None:
        """Each output row is computed into a buffer, the first group's operators run on it, then it is stored."""
        p = self.plan
        self.fdim_lines(c)
        resid = any(s.op == "residual" for s in group)
        c_out = _c_out(group, "N")
        self.out_alloc(c, group, final, c_out, like=f"{p.main.inputs[0]}_c")
        self.param_pointers(c, group)
        c("std::vector<float> buf(N);")
        if resid:
            c("std::vector<float> res(N);  // the main op's row, for the residual add")
        rows = "batch * M" if batched else "M"
        c(f"for (int64_t r = 0; r < {self.minus(rows, final)}; ++r) {{")
        c.depth += 1
        c("const float* arow = pa + r * K;")
        if tb:
            self.dot_row(c, "arow", "N", "buf[j]", bias)
        else:
            c("const float* bmat = pb + %s;" % ("(r / M) * K * N" if batched else "0"))
            c("for (int64_t j = 0; j < N; ++j) buf[j] = 0.0f;")
            c("for (int64_t k = 0; k < K; ++k) {")
            c("    const float av = arow[k];")
            c("    const float* brow = bmat + k * N;")
            c("    for (int64_t j = 0; j < N; ++j) buf[j] += av * brow[j];")
            c("}")
        if resid:
            c("for (int64_t j = 0; j < N; ++j) res[j] = buf[j];")
        c("int64_t L = N;")
        self.line_body(c, group, resid=lambda: "res[c]")
        c(f"for (int64_t c = 0; c < {c_out}; ++c) dst[r * {self.paren(c_out)} + c] = {self.store('buf[c]')};")
        c.close()
        c("torch::Tensor y = z;")
        c("shape = out_shape;")
        if final and self.off:
            self.short = "the last row of the output"

    @staticmethod
    def paren(expr: str) -> str:
        return expr if re.fullmatch(r"\w+", expr) else f"({expr})"

    def store(self, value: str) -> str:
        return f"(int64_t){value}" if self.plan.out_long else value

    def out_alloc(self, c: _Code, group: Sequence[_Stage], final: bool, c_out: str, like: str = "y") -> None:
        """``out_shape`` and ``z`` (``dst``) for a group that maps the feature dim to ``c_out`` values."""
        c("std::vector<int64_t> out_shape = shape;")
        c(f"out_shape[fdim] = {c_out};")
        last = group[-1]
        if final and last.op in _REDUCES and not last.keepdim:
            c("out_shape.erase(out_shape.begin() + fdim);  // the reduced dim is dropped (keepdim=False)")
        if final and self.plan.out_long:
            c(f"torch::Tensor z = torch::empty(out_shape, {like}.options().dtype(torch::kInt64));")
            c("int64_t* dst = z.data_ptr<int64_t>();")
        else:
            c(f"torch::Tensor z = torch::empty(out_shape, {like}.options());")
            c("float* dst = z.data_ptr<float>();")

    def line_body(self, c: _Code, group: Sequence[_Stage], *, resid: Any) -> None:
        """The group's operators on ``buf`` (length ``L``); element-wise runs share one loop."""
        i = 0
        while i < len(group):
            if group[i].kind == "ew":
                run = []
                while i < len(group) and group[i].kind == "ew":
                    run.append(group[i])
                    i += 1
                c("for (int64_t c = 0; c < L; ++c) {")
                c("    float v = buf[c];")
                for s in run:
                    c("    " + _ew_line(s, self.fn_map, param=lambda t: f"{t}_p[c]", resid=resid()))
                c("    buf[c] = v;")
                c("}")
                continue
            s = group[i]
            mask_at = (lambda cc: f"mk[(n * C + {cc}) * S + s]") if s.op == "mcumsum" else None
            c.extend(_seq_row(s, lambda cc: f"buf[{cc}]", self.fn_map, mask_at=mask_at, slow=self.variant == "slow"))
            i += 1

    def param_pointers(self, c: _Code, group: Sequence[_Stage]) -> None:
        for s in group:
            for t in s.tensors:
                c(f"const float* {t}_p = {t}_c.data_ptr<float>();")

    def diagmm(self, c: _Code) -> None:
        a, B = self.plan.main.inputs
        final = not self.stages
        c(f"const int64_t n = {a}_c.size(0), m = {B}_c.size(1);")
        c(f'TORCH_CHECK({B}_c.dim() == 2 && {B}_c.size(0) == n, "{self.fn}: shape mismatch");')
        c(f"torch::Tensor y = torch::empty({{n, m}}, {B}_c.options());")
        c(f"const float* pa = {a}_c.data_ptr<float>();")
        c(f"const float* pb = {B}_c.data_ptr<float>();")
        c("float* py = y.data_ptr<float>();")
        if self.variant == "slow":
            c(f"for (int64_t i = 0; i < {self.minus('n', final)}; ++i) {{  // (diag(a) @ B)[i][j] as a full product")
            c("    for (int64_t j = 0; j < m; ++j) {")
            c("        float acc = 0.0f;")
            c("        for (int64_t k = 0; k < n; ++k) acc += (i == k ? pa[i] : 0.0f) * pb[k * m + j];")
            c("        py[i * m + j] = acc;")
            c("    }")
            c("}")
        else:
            c(f"for (int64_t i = 0; i < {self.minus('n', final)}; ++i) {{  // row i of B scaled by a[i]")
            c("    const float ai = pa[i];")
            c("    const float* brow = pb + i * m;")
            c("    float* yrow = py + i * m;")
            c("    for (int64_t j = 0; j < m; ++j) yrow[j] = ai * brow[j];")
            c("}")
        c("std::vector<int64_t> shape = {n, m};")
        if self.off:
            self.short = "the last row of the output"

    def conv(self, c: _Code, *, transposed: bool) -> bool:
        p = self.plan
        m = p.main
        x, (w, b) = m.inputs[0], m.tensors
        stride, pad = m.ints[0], m.ints[1]
        outpad = m.ints[2] if transposed else None
        groups_arg = m.ints[-1]
        final = not self.stages
        c(f"const int64_t nd = {x}_c.dim() - 2;")
        c(f'TORCH_CHECK(nd >= 1 && nd <= 3, "{self.fn}: expected a 1D, 2D or 3D input");')
        c(f"const int64_t batch = {x}_c.size(0), cin = {x}_c.size(1);")
        if transposed:
            c(f"const int64_t cout = {w}_c.size(1) * {groups_arg};")
        else:
            c(f"const int64_t cout = {w}_c.size(0);")
        c(f"const int64_t cin_g = cin / {groups_arg}, cout_g = cout / {groups_arg};")
        c("// sizes padded to three spatial dims (a missing dim has size 1, kernel 1, stride 1, padding 0)")
        c("int64_t isz[3] = {1, 1, 1}, ksz[3] = {1, 1, 1}, st[3] = {1, 1, 1}, pd[3] = {0, 0, 0}, osz[3];")
        if transposed:
            c("int64_t op[3] = {0, 0, 0};")
        c("for (int64_t d = 0; d < nd; ++d) {")
        c(f"    isz[3 - nd + d] = {x}_c.size(2 + d);")
        c(f"    ksz[3 - nd + d] = {w}_c.size(2 + d);")
        c(f"    st[3 - nd + d] = {stride};")
        c(f"    pd[3 - nd + d] = {pad};")
        if transposed:
            c(f"    op[3 - nd + d] = {outpad};")
        c("}")
        if transposed:
            c("for (int64_t d = 0; d < 3; ++d) osz[d] = (isz[d] - 1) * st[d] - 2 * pd[d] + ksz[d] + op[d];")
        else:
            c("for (int64_t d = 0; d < 3; ++d) osz[d] = (isz[d] + 2 * pd[d] - ksz[d]) / st[d] + 1;")
        c("std::vector<int64_t> shape = {batch, cout};")
        c("for (int64_t d = 3 - nd; d < 3; ++d) shape.push_back(osz[d]);")
        c(f"torch::Tensor y = torch::empty(shape, {x}_c.options());")
        c(f"const float* px = {x}_c.data_ptr<float>();")
        c(f"const float* pw = {w}_c.data_ptr<float>();")
        c(f"const float* pbias = {b}_c.data_ptr<float>();")
        c("float* py = y.data_ptr<float>();")
        c("const int64_t in_plane = isz[0] * isz[1] * isz[2], out_plane = osz[0] * osz[1] * osz[2];")
        c("const int64_t taps = ksz[0] * ksz[1] * ksz[2];")
        groups = _groups(self.stages, self.variant)
        fuse = (self.variant == "fast" and groups and _group_kind(groups[0]) == "ew"
                and not (p.uses_residual and not any(s.op == "residual" for s in groups[0])))
        if self.variant == "slow":
            c("for (int64_t n = 0; n < batch; ++n) {")
            c("  for (int64_t oc = 0; oc < cout; ++oc) {")
            c("    const int64_t g = oc / cout_g;")
            c("    for (int64_t od = 0; od < osz[0]; ++od) {")
            c("      for (int64_t oh = 0; oh < osz[1]; ++oh) {")
            c(f"        for (int64_t ow = 0; ow < {self.minus('osz[2]', final)}; ++ow) {{")
            c("          float acc = pbias[oc];")
            c("          for (int64_t icg = 0; icg < cin_g; ++icg) {")
            c("            const int64_t ic = g * cin_g + icg;")
            c("            const float* xp = px + (n * cin + ic) * in_plane;")
            if transposed:
                c("            const float* wp = pw + (ic * cout_g + oc % cout_g) * taps;")
            else:
                c("            const float* wp = pw + (oc * cin_g + icg) * taps;")
            for dim, (o, i, k) in enumerate((("od", "id", "kd"), ("oh", "ih", "kh"), ("ow", "iw", "kw"))):
                ind = "            " + "  " * dim
                c(f"{ind}for (int64_t {k} = 0; {k} < ksz[{dim}]; ++{k}) {{")
                if transposed:
                    c(f"{ind}  const int64_t t{i[1]} = {o} + pd[{dim}] - {k};  // reached iff t is a multiple of the stride")
                    c(f"{ind}  if (t{i[1]} < 0 || t{i[1]} % st[{dim}] != 0) continue;")
                    c(f"{ind}  const int64_t {i} = t{i[1]} / st[{dim}];")
                    c(f"{ind}  if ({i} >= isz[{dim}]) continue;")
                else:
                    c(f"{ind}  const int64_t {i} = {o} * st[{dim}] - pd[{dim}] + {k};")
                    c(f"{ind}  if ({i} < 0 || {i} >= isz[{dim}]) continue;")
            c("                  acc += xp[(id * isz[1] + ih) * isz[2] + iw] * wp[(kd * ksz[1] + kh) * ksz[2] + kw];")
            c("                }")
            c("              }")
            c("            }")
            c("          }")
            c("          py[(((n * cout + oc) * osz[0] + od) * osz[1] + oh) * osz[2] + ow] = acc;")
            c("        }")
            c("      }")
            c("    }")
            c("  }")
            c("}")
            if final and self.off:
                self.short = "the last output column of every row"
            return False
        # fast: weight-stationary loops, the innermost over a contiguous output row
        c("for (int64_t n = 0; n < batch; ++n) {")
        c("    for (int64_t oc = 0; oc < cout; ++oc) {")
        c("        float* yp = py + (n * cout + oc) * out_plane;")
        fused_all = fuse and len(groups) == 1  # the epilogue below is then the last pass
        c(f"        for (int64_t o = 0; o < {self.minus('out_plane', final or fused_all)}; ++o) yp[o] = pbias[oc];")
        c("    }")
        c("}")
        if (final or fused_all) and self.off:
            self.short = "the last element of every output plane"
        if transposed:
            c("// scatter: each input element adds its products to the outputs it reaches")
            c("for (int64_t n = 0; n < batch; ++n) {")
            c("  for (int64_t ic = 0; ic < cin; ++ic) {")
            c("    const int64_t g = ic / cin_g;")
            c("    const float* xp = px + (n * cin + ic) * in_plane;")
            c("    for (int64_t ocg = 0; ocg < cout_g; ++ocg) {")
            c("      const int64_t oc = g * cout_g + ocg;")
            c("      const float* wp = pw + (ic * cout_g + ocg) * taps;")
            c("      float* yp = py + (n * cout + oc) * out_plane;")
            c("      for (int64_t kd = 0; kd < ksz[0]; ++kd) {")
            c("        for (int64_t kh = 0; kh < ksz[1]; ++kh) {")
            c("          for (int64_t kw = 0; kw < ksz[2]; ++kw) {")
            c("            const float wv = wp[(kd * ksz[1] + kh) * ksz[2] + kw];")
            c("            for (int64_t id = 0; id < isz[0]; ++id) {")
            c("              const int64_t od = id * st[0] - pd[0] + kd;")
            c("              if (od < 0 || od >= osz[0]) continue;")
            c("              for (int64_t ih = 0; ih < isz[1]; ++ih) {")
            c("                const int64_t oh = ih * st[1] - pd[1] + kh;")
            c("                if (oh < 0 || oh >= osz[1]) continue;")
            c("                const float* xrow = xp + (id * isz[1] + ih) * isz[2];")
            c("                float* yrow = yp + (od * osz[1] + oh) * osz[2];")
            c("                for (int64_t iw = 0; iw < isz[2]; ++iw) {")
            c("                  const int64_t ow = iw * st[2] - pd[2] + kw;")
            c("                  if (ow >= 0 && ow < osz[2]) yrow[ow] += wv * xrow[iw];")
            c("                }")
            c("              }")
            c("            }")
            c("          }")
            c("        }")
            c("      }")
            c("    }")
            c("  }")
            c("}")
        else:
            c("// weight-stationary: one weight tap times a whole contiguous input row")
            c("for (int64_t n = 0; n < batch; ++n) {")
            c("  for (int64_t oc = 0; oc < cout; ++oc) {")
            c("    const int64_t g = oc / cout_g;")
            c("    float* yp = py + (n * cout + oc) * out_plane;")
            c("    for (int64_t icg = 0; icg < cin_g; ++icg) {")
            c("      const float* xp = px + (n * cin + g * cin_g + icg) * in_plane;")
            c("      const float* wp = pw + (oc * cin_g + icg) * taps;")
            c("      for (int64_t kd = 0; kd < ksz[0]; ++kd) {")
            c("        for (int64_t kh = 0; kh < ksz[1]; ++kh) {")
            c("          for (int64_t kw = 0; kw < ksz[2]; ++kw) {")
            c("            const float wv = wp[(kd * ksz[1] + kh) * ksz[2] + kw];")
            c("            for (int64_t od = 0; od < osz[0]; ++od) {")
            c("              const int64_t id = od * st[0] - pd[0] + kd;")
            c("              if (id < 0 || id >= isz[0]) continue;")
            c("              for (int64_t oh = 0; oh < osz[1]; ++oh) {")
            c("                const int64_t ih = oh * st[1] - pd[1] + kh;")
            c("                if (ih < 0 || ih >= isz[1]) continue;")
            c("                const float* xrow = xp + (id * isz[1] + ih) * isz[2];")
            c("                float* yrow = yp + (od * osz[1] + oh) * osz[2];")
            c("                for (int64_t ow = 0; ow < osz[2]; ++ow) {")
            c("                  const int64_t iw = ow * st[2] - pd[2] + kw;")
            c("                  if (iw >= 0 && iw < isz[2]) yrow[ow] += wv * xrow[iw];")
            c("                }")
            c("              }")
            c("            }")
            c("          }")
            c("        }")
            c("      }")
            c("    }")
            c("  }")
            c("}")
        if fuse:
            group = groups[0]
            self.fdim_lines(c)
            self.param_pointers(c, group)
            last = len(groups) == 1
            c(f"// the element-wise operators, while each output plane is still in cache: {_labels(group)}")
            c("for (int64_t n = 0; n < batch; ++n) {")
            c("    for (int64_t c = 0; c < cout; ++c) {")
            c("        float* yp = py + (n * cout + c) * out_plane;")
            c(f"        for (int64_t o = 0; o < {self.minus('out_plane', last)}; ++o) {{")
            c("            float v = yp[o];")
            if any(s.op == "residual" for s in group):
                c("            const float r0 = v;")
            for s in group:
                c("            " + _ew_line(s, self.fn_map, param=lambda t: f"{t}_p[c]", resid="r0"))
            c("            yp[o] = v;")
            c("        }")
            c("    }")
            c("}")
            if last and self.off:
                self.short = "the last element of every output plane"
            return True
        return False

    # ---- stage groups
    def group(self, c: _Code, group: list[_Stage], *, final: bool) -> None:
        kind = _group_kind(group)
        c(f"{{  // {_labels(group)}")
        c.depth += 1
        self.param_pointers(c, group)
        if kind == "ew":
            needs_c = any(s.tensors for s in group)
            c("torch::Tensor z = torch::empty(shape, y.options());")
            c("const float* src = y.data_ptr<float>();")
            c("float* dst = z.data_ptr<float>();")
            c("const int64_t total = y.numel();")
            if needs_c:
                self.need_split()
                c("int64_t N, C, S;")
                c("split_at(shape, fdim, N, C, S);")
            if self.variant == "slow" and not needs_c and self.plan.main.op == "input":
                # walk the tensor as (rows, cols) column by column: the first loop that comes to mind
                c("const int64_t cols = shape.empty() ? 1 : shape.back();")
                c("const int64_t rows = cols == 0 ? 0 : total / cols;")
                c(f"for (int64_t j = 0; j < {self.minus('cols', final)}; ++j) {{")
                c("    for (int64_t r = 0; r < rows; ++r) {")
                c("        const int64_t i = r * cols + j;")
                c("        float v = src[i];")
                for s in group:
                    c("        " + _ew_line(s, self.fn_map, param=lambda t: f"{t}_p[c]", resid="r_main[i]"))
                c("        dst[i] = v;")
                c("    }")
                c("}")
                if final and self.off:
                    self.short = "the last column"
            else:
                c(f"for (int64_t i = 0; i < {self.minus('total', final)}; ++i) {{")
                c("    float v = src[i];")
                if needs_c:
                    c("    const int64_t c = (i / S) % C;")
                for s in group:
                    c("    " + _ew_line(s, self.fn_map, param=lambda t: f"{t}_p[c]", resid="r_main[i]"))
                c("    dst[i] = v;")
                c("}")
                if final and self.off:
                    self.short = "the last element"
            c("y = z;")
        elif kind == "line":
            self.need_split()
            c("int64_t N, C, S;")
            c("split_at(shape, fdim, N, C, S);")
            c_out = _c_out(group)
            c(f"const int64_t C_out = {c_out};")
            self.out_alloc(c, group, final, "C_out")
            c("const float* src = y.data_ptr<float>();")
            if any(s.op == "mcumsum" for s in group):
                c(f"const bool* mk = {self.plan.mask}_c.data_ptr<bool>();")
            single = group[0] if len(group) == 1 else None
            if self.variant == "fast" and single is not None and single.op in (_REDUCES | {"rmsnorm"}) - {"logsumexp"}:
                self.inner_vectorised(c, single, final)
            else:
                c("std::vector<float> buf(C);")
                c(f"for (int64_t n = 0; n < {self.minus('N', final)}; ++n) {{")
                c("    for (int64_t s = 0; s < S; ++s) {")
                c.depth += 2
                c("for (int64_t c = 0; c < C; ++c) buf[c] = src[(n * C + c) * S + s];")
                c("int64_t L = C;")
                self.line_body(c, group, resid=lambda: "r_main[(n * C + c) * S + s]")
                c(f"for (int64_t c = 0; c < C_out; ++c) dst[(n * C_out + c) * S + s] = {self.store('buf[c]')};")
                c.depth -= 2
                c("    }")
                c("}")
            c("y = z;")
            c("shape = out_shape;")
            if final and self.off:
                self.short = "the last slice along the first dim"
        else:
            self.barrier(c, group[0], final)
        c.close()

    def inner_vectorised(self, c: _Code, s: _Stage, final: bool) -> None:
        """A reduction (or RMS norm) along the feature dim with the inner index innermost: contiguous loads."""
        op = s.op
        c(f"for (int64_t n = 0; n < {self.minus('N', final)}; ++n) {{")
        c.depth += 1
        c("const float* xn = src + n * C * S;")
        if op == "rmsnorm":
            c("std::vector<double> ss(S, 0.0);")
            c("for (int64_t c = 0; c < C; ++c) {")
            c("    const float* row = xn + c * S;")
            c("    for (int64_t s = 0; s < S; ++s) ss[s] += (double)row[s] * row[s];")
            c("}")
            c("std::vector<float> rms(S);")
            c(f"for (int64_t s = 0; s < S; ++s) rms[s] = std::sqrt((float)(ss[s] / (double)C) + s_{s.scalars[0]});")
            c("for (int64_t c = 0; c < C; ++c) {")
            c("    const float* row = xn + c * S;")
            c("    float* orow = dst + (n * C + c) * S;")
            c("    for (int64_t s = 0; s < S; ++s) orow[s] = row[s] / rms[s];")
            c("}")
        elif op in ("sum", "mean", "prod"):
            init, upd = ("1.0", "*=") if op == "prod" else ("0.0", "+=")
            c(f"std::vector<double> acc(S, {init});")
            c("for (int64_t c = 0; c < C; ++c) {")
            c("    const float* row = xn + c * S;")
            c(f"    for (int64_t s = 0; s < S; ++s) acc[s] {upd} row[s];")
            c("}")
            tail = " / (double)C" if op == "mean" else ""
            c(f"for (int64_t s = 0; s < S; ++s) dst[n * S + s] = (float)(acc[s]{tail});")
        else:
            cmp = ">" if op in ("amax", "argmax") else "<"
            c("std::vector<float> best(xn, xn + S);")
            arg = op in ("argmax", "argmin")
            if arg:
                c("std::vector<int64_t> best_c(S, 0);")
            c("for (int64_t c = 1; c < C; ++c) {")
            c("    const float* row = xn + c * S;")
            c("    for (int64_t s = 0; s < S; ++s) {")
            if arg:
                c(f"        if (row[s] {cmp} best[s]) {{")
                c("            best[s] = row[s];")
                c("            best_c[s] = c;")
                c("        }")
            else:
                c(f"        best[s] = row[s] {cmp} best[s] ? row[s] : best[s];")
            c("    }")
            c("}")
            c(f"for (int64_t s = 0; s < S; ++s) dst[n * S + s] = {'best_c[s]' if arg else 'best[s]'};")
        c.close()

    def barrier(self, c: _Code, s: _Stage, final: bool) -> None:
        op = s.op
        c("const float* src = y.data_ptr<float>();")
        if op == "spool":
            k, st, pd = s.ints
            c("const int64_t nd = (int64_t)shape.size() - 2;")
            c("const int64_t planes = shape[0] * shape[1];")
            c("int64_t isz[3] = {1, 1, 1}, ksz[3] = {1, 1, 1}, ssz[3] = {1, 1, 1}, psz[3] = {0, 0, 0}, osz[3];")
            c("for (int64_t d = 0; d < nd; ++d) {")
            c("    isz[3 - nd + d] = shape[2 + d];")
            c(f"    ksz[3 - nd + d] = {k};")
            c(f"    ssz[3 - nd + d] = {st};")
            c(f"    psz[3 - nd + d] = {pd};")
            c("}")
            c("for (int64_t d = 0; d < 3; ++d) osz[d] = (isz[d] + 2 * psz[d] - ksz[d]) / ssz[d] + 1;")
            c("std::vector<int64_t> out_shape = {shape[0], shape[1]};")
            c("for (int64_t d = 3 - nd; d < 3; ++d) out_shape.push_back(osz[d]);")
            c("torch::Tensor z = torch::empty(out_shape, y.options());")
            c("float* dst = z.data_ptr<float>();")
            if s.mode == "avg":
                c("const float count = (float)(ksz[0] * ksz[1] * ksz[2]);  // padding counts (count_include_pad)")
            c("const int64_t in_plane = isz[0] * isz[1] * isz[2], out_plane = osz[0] * osz[1] * osz[2];")
            window = [
                "float acc = %s;" % ("-INFINITY" if s.mode == "max" else "0.0f"),
                "for (int64_t kd = 0; kd < ksz[0]; ++kd) {",
                "  const int64_t id = od * ssz[0] - psz[0] + kd;",
                "  if (id < 0 || id >= isz[0]) continue;",
                "  for (int64_t kh = 0; kh < ksz[1]; ++kh) {",
                "    const int64_t ih = oh * ssz[1] - psz[1] + kh;",
                "    if (ih < 0 || ih >= isz[1]) continue;",
                "    for (int64_t kw = 0; kw < ksz[2]; ++kw) {",
                "      const int64_t iw = ow * ssz[2] - psz[2] + kw;",
                "      if (iw < 0 || iw >= isz[2]) continue;",
                "      const float v = xp[(id * isz[1] + ih) * isz[2] + iw];",
                "      " + ("acc = v > acc ? v : acc;" if s.mode == "max" else "acc += v;"),
                "    }",
                "  }",
                "}",
                "op[(od * osz[1] + oh) * osz[2] + ow] = %s;" % ("acc" if s.mode == "max" else "acc / count"),
            ]
            if self.variant == "slow":
                # every output position, then every plane: consecutive reads jump a whole plane
                c("for (int64_t od = 0; od < osz[0]; ++od) {")
                c("  for (int64_t oh = 0; oh < osz[1]; ++oh) {")
                c("    for (int64_t ow = 0; ow < osz[2]; ++ow) {")
                c(f"      for (int64_t p = 0; p < {self.minus('planes', final)}; ++p) {{")
                c("        const float* xp = src + p * in_plane;")
                c("        float* op = dst + p * out_plane;")
                c.extend("        " + w for w in window)
                c("      }")
                c("    }")
                c("  }")
                c("}")
            else:
                c(f"for (int64_t p = 0; p < {self.minus('planes', final)}; ++p) {{  // one plane at a time")
                c("  const float* xp = src + p * in_plane;")
                c("  float* op = dst + p * out_plane;")
                c("  for (int64_t od = 0; od < osz[0]; ++od) {")
                c("    for (int64_t oh = 0; oh < osz[1]; ++oh) {")
                c("      for (int64_t ow = 0; ow < osz[2]; ++ow) {")
                c.extend("        " + w for w in window)
                c("      }")
                c("    }")
                c("  }")
                c("}")
            c("y = z;")
            c("shape = out_shape;")
            if final and self.off:
                self.short = "the last pooled plane"
            return
        if op == "gavg":
            c("const int64_t planes = shape[0] * shape[1];")
            c("const int64_t plane = y.numel() / planes;")
            c("std::vector<int64_t> out_shape = shape;")
            c("for (size_t d = 2; d < out_shape.size(); ++d) out_shape[d] = 1;")
            c("torch::Tensor z = torch::empty(out_shape, y.options());")
            c("float* dst = z.data_ptr<float>();")
            c(f"for (int64_t p = 0; p < {self.minus('planes', final)}; ++p) {{")
            c("    double acc = 0.0;")
            c("    for (int64_t i = 0; i < plane; ++i) acc += src[p * plane + i];")
            c("    dst[p] = (float)(acc / (double)plane);")
            c("}")
            c("y = z;")
            c("shape = out_shape;")
            if final and self.off:
                self.short = "the last channel's mean"
            return
        c("torch::Tensor z = torch::empty(shape, y.options());")
        c("float* dst = z.data_ptr<float>();")
        if op == "segnorm":
            w = s.tensors[0] if s.tensors else None
            if s.mode == "layer":
                c(f"const int64_t seg = {w}_c.numel();  // the normalised shape's size")
            elif s.mode == "group":
                c("const int64_t C = shape[1];")
                c(f"const int64_t groups = {s.ints[0]};")
                c("const int64_t S = y.numel() / (shape[0] * C);")
                c("const int64_t seg = (C / groups) * S;")
            else:
                c("const int64_t seg = y.numel() / (shape[0] * shape[1]);  // one (sample, channel) plane")
            c("const int64_t segments = y.numel() / seg;")
            if s.mode == "group":
                c("const int64_t cpg = C / groups;  // channels per group")
            affine = {
                "layer": f"(xs[i] - m) * rstd * {s.tensors[0]}_p[i] + {s.tensors[1]}_p[i]" if s.tensors else "",
                "group": f"(xs[i] - m) * rstd * {s.tensors[0]}_p[c] + {s.tensors[1]}_p[c]" if s.tensors else "",
                "instance": "(xs[i] - m) * rstd",
            }[s.mode]
            if self.variant == "slow":
                c("std::vector<float> means(segments), rstds(segments);")
                c("for (int64_t g = 0; g < segments; ++g) {  // pass 1: the statistics of every segment")
                c("    const float* xs = src + g * seg;")
                c("    double mean = 0.0;")
                c("    for (int64_t i = 0; i < seg; ++i) mean += xs[i];")
                c("    mean /= (double)seg;")
                c("    double var = 0.0;")
                c("    for (int64_t i = 0; i < seg; ++i) var += (xs[i] - mean) * (xs[i] - mean);")
                c("    var /= (double)seg;")
                c("    means[g] = (float)mean;")
                c("    rstds[g] = (float)(1.0 / std::sqrt(var + 1e-5));")
                c("}")
                c(f"for (int64_t g = 0; g < {self.minus('segments', final)}; ++g) {{  // pass 2: normalise")
                c("    const float* xs = src + g * seg;")
                c("    float* zs = dst + g * seg;")
                c("    const float m = means[g], rstd = rstds[g];")
            else:
                c(f"for (int64_t g = 0; g < {self.minus('segments', final)}; ++g) {{")
                c("    const float* xs = src + g * seg;")
                c("    float* zs = dst + g * seg;")
                c("    double mean = 0.0;")
                c("    for (int64_t i = 0; i < seg; ++i) mean += xs[i];")
                c("    mean /= (double)seg;")
                c("    double var = 0.0;")
                c("    for (int64_t i = 0; i < seg; ++i) {")
                c("        const double d = xs[i] - mean;")
                c("        var += d * d;")
                c("    }")
                c("    var /= (double)seg;")
                c("    const float m = (float)mean;")
                c("    const float rstd = (float)(1.0 / std::sqrt(var + 1e-5));")
            if s.mode == "group":
                c("    const int64_t c0 = (g % groups) * cpg;")
            c("    for (int64_t i = 0; i < seg; ++i) {")
            if s.mode == "group":
                c("        const int64_t c = c0 + i / S;")
            c(f"        zs[i] = {affine};")
            c("    }")
            c("}")
            if final and self.off:
                self.short = "the last normalised group"
        elif op == "batchnorm":
            w, b = s.tensors
            c("const int64_t batch = shape[0], C = shape[1];")
            c("const int64_t S = y.numel() / (batch * C);")
            c("const double count = (double)(batch * S);")
            if self.variant == "fast":
                c("std::vector<double> sum(C, 0.0), sumsq(C, 0.0);")
                c("for (int64_t n = 0; n < batch; ++n) {  // one pass in memory order")
                c("    for (int64_t c = 0; c < C; ++c) {")
                c("        const float* xs = src + (n * C + c) * S;")
                c("        double s1 = 0.0, s2 = 0.0;")
                c("        for (int64_t s = 0; s < S; ++s) {")
                c("            s1 += xs[s];")
                c("            s2 += (double)xs[s] * xs[s];")
                c("        }")
                c("        sum[c] += s1;")
                c("        sumsq[c] += s2;")
                c("    }")
                c("}")
                c("std::vector<float> scale(C), shift(C);")
                c("for (int64_t c = 0; c < C; ++c) {")
                c("    const double mean = sum[c] / count;")
                c("    const double var = std::max(sumsq[c] / count - mean * mean, 0.0);")
                c(f"    scale[c] = (float)(1.0 / std::sqrt(var + 1e-5)) * {w}_p[c];")
                c(f"    shift[c] = {b}_p[c] - (float)mean * scale[c];")
                c("}")
                c(f"for (int64_t n = 0; n < {self.minus('batch', final)}; ++n) {{")
                c("    for (int64_t c = 0; c < C; ++c) {")
                c("        const float* xs = src + (n * C + c) * S;")
                c("        float* zs = dst + (n * C + c) * S;")
                c("        for (int64_t s = 0; s < S; ++s) zs[s] = xs[s] * scale[c] + shift[c];")
                c("    }")
                c("}")
                if final and self.off:
                    self.short = "the last sample"
            else:
                c("// per channel: statistics over the batch and every position")
                c(f"for (int64_t c = 0; c < {self.minus('C', final)}; ++c) {{")
                c("    double mean = 0.0;")
                c("    for (int64_t n = 0; n < batch; ++n) {")
                c("        for (int64_t s = 0; s < S; ++s) mean += src[(n * C + c) * S + s];")
                c("    }")
                c("    mean /= count;")
                c("    double var = 0.0;")
                c("    for (int64_t n = 0; n < batch; ++n) {")
                c("        for (int64_t s = 0; s < S; ++s) {")
                c("            const double d = src[(n * C + c) * S + s] - mean;")
                c("            var += d * d;")
                c("        }")
                c("    }")
                c("    var /= count;")
                c(f"    const float scale = (float)(1.0 / std::sqrt(var + 1e-5)) * {w}_p[c];")
                c(f"    const float shift = {b}_p[c] - (float)mean * scale;")
                c("    for (int64_t n = 0; n < batch; ++n) {")
                c("        for (int64_t s = 0; s < S; ++s) {")
                c("            const int64_t i = (n * C + c) * S + s;")
                c("            dst[i] = src[i] * scale + shift;")
                c("        }")
                c("    }")
                c("}")
                if final and self.off:
                    self.short = "the last channel"
        else:
            raise _Unsupported(f"barrier {op}")
        c("y = z;")

    # ---- losses
    def loss(self, c: _Code) -> None:
        p, q = self.plan.main.inputs
        loss = self.plan.main.loss
        slow = self.variant == "slow"
        c(f"const float* pp = {p}_c.data_ptr<float>();")
        if loss == "cross_entropy":
            c(f'TORCH_CHECK({p}_c.scalar_type() == torch::kFloat32 && {q}_c.scalar_type() == torch::kInt64, '
              f'"{self.fn}: expected float32 logits and int64 targets");')
            c(f"const int64_t* pt = {q}_c.data_ptr<int64_t>();")
        else:
            c(f"const float* pt = {q}_c.data_ptr<float>();")
        c(f"torch::Tensor out = torch::empty(std::vector<int64_t>{{}}, {p}_c.options());")
        if loss in ("mse", "l1", "huber", "hinge", "kl_div"):
            term = {
                "mse": ["const float d = p - t;", "return d * d;"],
                "l1": ["return std::fabs(p - t);"],
                "huber": ["const float z = std::fabs(p - t);", "return z < 1.0f ? 0.5f * z * z : z - 0.5f;"],
                "hinge": ["const float h = 1.0f - p * t;", "return h > 0.0f ? h : 0.0f;"],
                "kl_div": ["return t * (std::log(t) - std::log(p));"],
            }[loss]
            self.helpers += ["static inline float loss_term(float p, float t) {", *("    " + x for x in term), "}", ""]
            c(f"const int64_t total = {p}_c.numel();")
            denom = f"(double){p}_c.size(0)" if loss == "kl_div" else "(double)total"
            if slow:
                c(f"torch::Tensor terms = torch::empty_like({p}_c);")
                c("float* pterm = terms.data_ptr<float>();")
                c("for (int64_t i = 0; i < total; ++i) pterm[i] = loss_term(pp[i], pt[i]);")
                c("double acc = 0.0;")
                c("for (int64_t i = 0; i < total; ++i) acc += pterm[i];")
            else:
                c("double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;  // four sums: shorter dependency chains")
                c("int64_t i = 0;")
                c("for (; i + 4 <= total; i += 4) {")
                c("    a0 += loss_term(pp[i], pt[i]);")
                c("    a1 += loss_term(pp[i + 1], pt[i + 1]);")
                c("    a2 += loss_term(pp[i + 2], pt[i + 2]);")
                c("    a3 += loss_term(pp[i + 3], pt[i + 3]);")
                c("}")
                c("for (; i < total; ++i) a0 += loss_term(pp[i], pt[i]);")
                c("const double acc = (a0 + a1) + (a2 + a3);")
            c(f"out.data_ptr<float>()[0] = (float)(acc / {denom});")
        elif loss == "cross_entropy":
            c(f"const int64_t rows = {p}_c.size(0), classes = {p}_c.size(1);")
            if slow:
                c("torch::Tensor lse = torch::empty({rows}, %s_c.options());" % p)
                c("float* plse = lse.data_ptr<float>();")
                c("for (int64_t r = 0; r < rows; ++r) {  // log-sum-exp of each row")
                c("    const float* row = pp + r * classes;")
                c("    float m = row[0];")
                c("    for (int64_t j = 1; j < classes; ++j) m = row[j] > m ? row[j] : m;")
                c("    double s = 0.0;")
                c("    for (int64_t j = 0; j < classes; ++j) s += std::exp(row[j] - m);")
                c("    plse[r] = m + (float)std::log(s);")
                c("}")
                c("double acc = 0.0;")
                c("for (int64_t r = 0; r < rows; ++r) acc += plse[r] - pp[r * classes + pt[r]];")
            else:
                c("double acc = 0.0;")
                c("for (int64_t r = 0; r < rows; ++r) {")
                c("    const float* row = pp + r * classes;")
                c("    float m = row[0];")
                c("    for (int64_t j = 1; j < classes; ++j) m = row[j] > m ? row[j] : m;")
                c("    double s = 0.0;")
                c("    for (int64_t j = 0; j < classes; ++j) s += std::exp(row[j] - m);")
                c("    acc += (double)m + std::log(s) - row[pt[r]];")
                c("}")
            c("out.data_ptr<float>()[0] = (float)(acc / (double)rows);")
        elif loss == "cosine":
            c(f"const int64_t rows = {p}_c.size(0), dim = {p}_c.size(1);")
            c("const double eps = 1e-8;")
            if slow:
                c("torch::Tensor cosines = torch::empty({rows}, %s_c.options());" % p)
                c("float* pc = cosines.data_ptr<float>();")
                c("for (int64_t r = 0; r < rows; ++r) {")
                c("    double dot = 0.0, na = 0.0, nb = 0.0;")
                c("    for (int64_t j = 0; j < dim; ++j) dot += (double)pp[r * dim + j] * pt[r * dim + j];")
                c("    for (int64_t j = 0; j < dim; ++j) na += (double)pp[r * dim + j] * pp[r * dim + j];")
                c("    for (int64_t j = 0; j < dim; ++j) nb += (double)pt[r * dim + j] * pt[r * dim + j];")
                c("    pc[r] = (float)(dot / (std::max(std::sqrt(na), eps) * std::max(std::sqrt(nb), eps)));")
                c("}")
                c("double acc = 0.0;")
                c("for (int64_t r = 0; r < rows; ++r) acc += 1.0 - pc[r];")
            else:
                c("double acc = 0.0;")
                c("for (int64_t r = 0; r < rows; ++r) {  // one pass per row: the dot and both norms together")
                c("    const float* a = pp + r * dim;")
                c("    const float* b = pt + r * dim;")
                c("    double dot = 0.0, na = 0.0, nb = 0.0;")
                c("    for (int64_t j = 0; j < dim; ++j) {")
                c("        dot += (double)a[j] * b[j];")
                c("        na += (double)a[j] * a[j];")
                c("        nb += (double)b[j] * b[j];")
                c("    }")
                c("    acc += 1.0 - dot / (std::max(std::sqrt(na), eps) * std::max(std::sqrt(nb), eps));")
                c("}")
            c("out.data_ptr<float>()[0] = (float)(acc / (double)rows);")
        else:
            raise _Unsupported(f"loss {loss}")
        c("return out;")


# ===================================================================================================
# The Python program around a kernel


def _program(plan: _Plan, backend: str, src: _Source, variant: str, *, forward: list[str] | None = None,
             uses_f: bool = False) -> str:
    """The complete candidate: imports, the source string(s), ``load_inline``, ``ModelNew``."""
    slug = plan.slug
    ext = f"{slug}_ext"
    lines: list[str] = []
    if plan.needs_math:
        lines.append("import math")
        lines.append("")
    lines += ["import torch", "import torch.nn as nn"]
    if uses_f:
        lines.append("import torch.nn.functional as F")
    lines += ["from torch.utils.cpp_extension import load_inline", ""]
    build = f"{slug}_{'fused' if variant == 'fast' else 'naive'}_{backend}"
    if backend == "cpu":
        lines += [f'{slug}_source = r"""', src.cpp.rstrip("\n"), '"""', "", ""]
        lines += [
            f"{ext} = load_inline(",
            f'    name="{build}",',
            f"    cpp_sources={slug}_source,",
            f'    functions=["{src.fn}"],',
            '    extra_cflags=["-O3"],',
            "    verbose=False,",
            ")",
        ]
    else:
        lines += [f'{slug}_cuda_source = r"""', src.cuda.rstrip("\n"), '"""', ""]
        lines += [f'{slug}_cpp_source = "{src.cpp.strip()}"', ""]
        lines += [
            f"{ext} = load_inline(",
            f'    name="{build}",',
            f"    cpp_sources={slug}_cpp_source,",
            f"    cuda_sources={slug}_cuda_source,",
            f'    functions=["{src.fn}"],',
            '    extra_cuda_cflags=["-O3"],',
            "    verbose=False,",
            ")",
        ]
    init_sig = "".join(f", {a}" for a in plan.init_args)
    lines += ["", "", "class ModelNew(nn.Module):", f"    def __init__(self{init_sig}) -> None:",
              "        super().__init__()"]
    lines += [f"        {x}" for x in plan.init_lines]
    fwd_sig = ", ".join(f"{a}: torch.Tensor" for a in plan.fwd_args)
    call = f"{ext}.{src.fn}({', '.join(a.py for a in src.args)})"
    lines += ["", f"    def forward(self, {fwd_sig}) -> torch.Tensor:"]
    if forward is None:
        lines.append(f"        return {call}")
    else:
        lines += [f"        {x}".rstrip() for x in forward if x is not None]
        lines = [x.replace("{CALL}", call) for x in lines]
    return "\n".join(lines) + "\n"


def _kernel(plan: _Plan, backend: str, stages: Sequence[_Stage], variant: str, *, off_by_one: bool = False) -> _Source:
    if backend == "cpu":
        return _CppWriter(plan, stages, variant, off_by_one=off_by_one).source()
    return _CudaWriter(plan, stages, variant, off_by_one=off_by_one).source()


# ===================================================================================================
# Answers: thought, program, summary


def _pick(key: str, options: Sequence[str]) -> str:
    """A stable choice among phrasings (no global randomness: the same task always reads the same)."""
    h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little")
    return options[h % len(options)]


def _shape_text(plan: _Plan, backend: str) -> str:
    shapes = plan.shapes.get(backend) or []
    if not shapes:
        return ""
    parts = ["(" + ", ".join(str(d) for d in s) + ")" for s in shapes[:3]]
    if len(parts) > 1:
        return " on inputs of shapes " + ", ".join(parts[:-1]) + " and " + parts[-1]
    return " on an input of shape " + parts[0]


def _what(plan: _Plan, stages: Sequence[_Stage]) -> str:
    if plan.main.op in ("mm", "diagmm", "loss") and not stages and plan.reference:
        return f"`{plan.reference}` ({plan.main.label})"
    labels = ([plan.main.label] if plan.main.op != "input" else []) + [s.label for s in stages]
    if not labels:
        return "nothing"
    text = ", then ".join(labels)
    return text[0].lower() + text[1:] if not text.startswith(("ReLU", "GELU", "SELU", "Swish", "Mish", "HardSwish",
                                                              "HardSigmoid", "Softplus", "Softsign", "LeakyReLU",
                                                              "ELU", "Hardtanh", "RMS")) else text


def _main_plan_text(plan: _Plan, variant: str, backend: str) -> str:
    m = plan.main
    op = m.op
    fast = variant == "fast"
    if op == "mm":
        if "tril" in m.flags:
            return ("a triangular product: both inputs are lower triangular, so for output row i only k <= i and, for "
                    "each k, columns j <= k contribute (about a sixth of the multiply-adds; everything above the "
                    "diagonal stays zero)" if fast else "a plain triple loop over rows, columns and the shared "
                    "dimension, then zero above the diagonal")
        if backend == "cuda":
            return ("a shared-memory tiled product: each 32 x 32 block of threads stages tiles of both operands in "
                    "shared memory, so every value loaded from global memory is reused 32 times" if fast else
                    "one thread per output element, each looping over the shared dimension")
        if "transB" in m.flags:
            return ("every output element is a dot product of two contiguous rows, so I keep that order and split "
                    "each dot product into four partial sums (shorter dependency chains, easy to vectorise)" if fast
                    else "a plain loop: one dot product over the shared dimension per output element")
        return ("i-k-j loops over 64-row blocks: the innermost loop streams a contiguous row of B into a contiguous "
                "row of the output, instead of walking B down its columns" if fast else
                "the textbook i-j-k triple loop: one dot product over the shared dimension per output element")
    if op == "diagmm":
        return ("a single pass over B, since diag(a) @ B only scales row i of B by a[i]" if fast else
                "the direct translation: a dense product with diag(a), whose off-diagonal entries are zero")
    if op in ("conv", "convT"):
        if backend == "cuda":
            return ("one thread per output element, with the output channel's filter staged in shared memory by each "
                    "block" if fast else "one thread per output element, reading every filter tap from global memory")
        if op == "convT":
            return ("the scatter form: each input element adds its products into the outputs it reaches, so the "
                    "inner loop needs no divisibility test" if fast else
                    "the gather form: for each output position, find the input positions that reach it (where "
                    "output + padding - tap is a multiple of the stride)")
        return ("weight-stationary loops: for each filter tap, one multiply-add across a whole contiguous output row, "
                "so the innermost loop has unit stride" if fast else
                "a direct convolution: for every output position, sum over input channels and filter taps, skipping "
                "taps that fall into the padding")
    if op == "loss":
        if m.loss in ("cross_entropy",):
            return ("one pass per row: the row max, the log of the sum of exponentials and the target's logit"
                    if fast else "first each row's log-sum-exp into a temporary, then a "
                    "second loop for the mean of (log-sum-exp - target logit)")
        if m.loss == "cosine":
            return ("one pass per row computing the dot product and both squared norms together" if fast else
                    "for each row, three separate loops (dot product and the two norms), the cosines stored, then "
                    "their mean")
        return ("one pass with four double accumulators, no temporary" if fast else
                "first every per-element term into a temporary, then a second loop for their sum")
    return ""


def _stage_plan_text(plan: _Plan, stages: Sequence[_Stage], variant: str, backend: str) -> str:
    if not stages:
        return ""
    fast = variant == "fast"
    single = len(stages) == 1 and plan.main.op == "input"
    if single:
        s = stages[0]
        if s.kind == "ew":
            if backend == "cuda":
                return ("a grid-stride loop, one element per thread per step" if fast else
                        "one thread per element")
            return ("one flat loop over the contiguous buffer: unit stride and no index arithmetic, which the "
                    "compiler vectorises" if fast else "a loop over the (rows, cols) view, column by column, applying "
                    "it to each element")
        if s.op in _SCANS:
            return ("one running value per line, carried in double" if fast else
                    "each output restarts its sum from the beginning of its line")
        if s.op in ("softmax", "log_softmax"):
            return ("per row: the max, then the exponentials stored once with their sum, then one scaling pass"
                    if s.op == "softmax" and fast else "per row: the max, the sum of exponentials, then the outputs")
        if s.op in _REDUCES or s.op == "rmsnorm":
            if backend == "cuda":
                return ("one thread per output position, walking the reduced dim (consecutive threads read "
                        "consecutive addresses)")
            return ("one accumulator per inner position: the reduced rows are streamed contiguously" if fast else
                    "for each output position, a loop down the reduced dim (a strided walk)")
        if s.op == "segnorm":
            return ("per segment: mean, variance and the normalisation while the segment is in cache" if fast else
                    "the statistics of every segment first, then a second pass to normalise")
        if s.op == "batchnorm":
            return ("one pass in memory order accumulating each channel's sum and sum of squares, then one "
                    "normalising pass" if fast else "per channel, a walk over the batch and every position")
        if s.op == "spool":
            return ("one plane at a time" if fast else "for each output position, a loop over every plane")
        return ""
    if fast:
        if all(s.kind == "ew" for s in stages):
            return "the element-wise operators fused into the same pass, while each value is still in registers"
        text = "the rest of the chain fused: consecutive element-wise and row operators share one pass per line"
        if any(s.kind == "barrier" for s in stages):
            text += ", and only the normalisations and poolings get passes of their own"
        return text
    return "each operator of the chain as its own loop over the whole tensor, each writing a new tensor"


def _notes(plan: _Plan, stages: Sequence[_Stage], backend: str) -> list[str]:
    notes = []
    ops = {s.op for s in stages}
    if ops & {"softmax", "log_softmax", "logsumexp"} or plan.main.loss == "cross_entropy":
        notes.append("subtract the maximum before exponentiating, so nothing overflows")
    if ops & {"sum", "mean", "prod", "cumsum", "cumprod", "rcumsum", "xcumsum", "mcumsum"} or plan.main.op == "loss":
        notes.append("accumulate in double")
    if ops & {"segnorm", "batchnorm"}:
        notes.append("normalise with the biased variance and eps = 1e-5, statistics in double")
    if "batchnorm" in ops:
        notes.append("the module is in training mode (PyTorch's default), so batch norm uses the statistics of the "
                     "batch itself, not the running ones")
    if "gelu" in ops:
        notes.append("GELU is the exact erf form")
    if ops & {"argmax", "argmin"}:
        notes.append("ties keep the first index, and the result is int64")
    if any(l.startswith(f"self.{t}") for t in plan.main.tensors for l in plan.init_lines):
        notes.append("the layer's weight and bias become nn.Parameters created with the same shapes and initialised "
                     "with the same calls in the same order as the layer's own, so under the same seed they hold the "
                     "same values")
    return notes


def _noun(label: str) -> str:
    """"a GEMM (x @ W^T + b)" -> "GEMM"."""
    label = label.split(" (")[0]
    return label[2:] if label.startswith("a ") else (label[3:] if label.startswith("an ") else label)


def _thought(plan: _Plan, stages: Sequence[_Stage], variant: str, backend: str, extra: str = "", *,
             task_plan: _Plan | None = None) -> str:
    """The thought: what the task computes (``task_plan``'s operators, default ``plan``'s), how this answer's
    kernel (``plan`` with ``stages``) does it, the details that matter for correctness."""
    key = f"{plan.task.task_id}:{backend}:{variant}"
    opener = _pick(key + ":open", ("The reference computes", "The model computes", "This program computes"))
    lang = "C++ (cpp_sources, plain loops)" if backend == "cpu" else "CUDA (a __global__ kernel per pass)"
    shown = task_plan or plan
    parts = [f"{opener} {_what(shown, stages if task_plan is None else shown.stages)}{_shape_text(shown, backend)}."]
    main_text = _main_plan_text(plan, variant, backend)
    stage_text = _stage_plan_text(plan, stages, variant, backend)
    plan_intro = _pick(key + ":plan", ("I'll write it in", "Plan: write it in", "I'll do it in"))
    main_name = _noun(plan.main.label)
    if main_text and stage_text:
        parts.append(f"{plan_intro} {lang}. The {main_name} as {main_text}; then {stage_text}.")
    elif main_text:
        parts.append(f"{plan_intro} {lang}. The {main_name} as {main_text}.")
    elif stage_text:
        parts.append(f"{plan_intro} {lang}: {stage_text}.")
    notes = _notes(plan, stages, backend)
    if notes:
        parts.append("Details: " + "; ".join(notes) + ".")
    if backend == "cuda":
        parts.append("Inputs are made contiguous first; the kernels use the current stream, and every launch is "
                     "checked.")
    if extra:
        parts.append(extra)
    return " ".join(parts)


def _summary(plan: _Plan, stages: Sequence[_Stage], variant: str, backend: str, extra: str = "") -> str:
    what = _what(plan, stages)
    where = "a C++ extension" if backend == "cpu" else "CUDA kernels"
    main_text = _main_plan_text(plan, variant, backend)
    stage_text = _stage_plan_text(plan, stages, variant, backend)
    how = "; ".join(t for t in (main_text, stage_text) if t)
    text = f"Replaced {what} with {where}" + (f": {how}." if how else ".")
    if extra:
        text += " " + extra
    return text[0].upper() + text[1:]


def _response(thought: str, code: str, summary: str) -> str:
    return f"<think>\n{thought}\n</think>\n\n{fence(code)}\n\n{summary}\n"


_DROP_PREFERENCE = ("relu", "mul", "div", "add", "sub", "add_p", "mul_p", "residual", "leaky_relu", "tanh", "sigmoid",
                    "gelu", "swish", "mish", "hardswish", "softmax", "hardtanh", "clamp")


def _dropped_stage(plan: _Plan) -> int | None:
    """Which stage a ``missing_op`` answer forgets: an element-wise (or softmax) one whose absence changes the
    output's values but not its shape; None for single-operator tasks."""
    if plan.main.op == "input" and len(plan.stages) < 2 or not plan.stages:
        return None
    ranked = sorted((i for i, s in enumerate(plan.stages) if s.op in _DROP_PREFERENCE),
                    key=lambda i: (_DROP_PREFERENCE.index(plan.stages[i].op), i))
    for i in ranked:
        s = plan.stages[i]
        prev = plan.stages[i - 1].op if i > 0 else None
        nxt = plan.stages[i + 1].op if i + 1 < len(plan.stages) else None
        if s.op in ("hardtanh", "clamp") and prev in ("sigmoid", "tanh", "softmax", "hardtanh", "clamp"):
            continue  # a bounded input: the clamp may change nothing
        if s.op in ("relu", "leaky_relu") and prev in ("sigmoid", "softmax", "relu", "logsumexp", "amax", "gavg"):
            continue  # (mostly) positive input: the activation changes nothing
        if s.op in ("relu", "leaky_relu", "gelu", "swish", "mish", "hardswish") and \
                any(t.op == "logsumexp" for t in plan.stages[:i]):
            continue  # after a log-sum-exp the values are large and positive: these are the identity there
        if s.op in ("relu", "leaky_relu", "gelu", "swish", "mish", "hardswish") and nxt in ("logsumexp", "amax"):
            continue  # the largest values decide the result, and there these activations are (nearly) the identity
        if s.op in ("add", "sub", "add_p", "sub_p") and nxt in ("segnorm", "batchnorm", "softmax", "log_softmax"):
            continue  # a shift the normalisation removes
        if s.op in ("mul", "div") and nxt in ("segnorm", "batchnorm"):
            continue  # a scale the normalisation removes
        return i
    return None


def _typo(text: str, key: str) -> tuple[str, str, str, int] | None:
    """``text`` with one use of a local variable misspelt: (new text, the typo, the name, 0-based line)."""
    lines = text.split("\n")
    names = sorted({m.group(1) for m in re.finditer(
        r"\b(?:const\s+)?(?:int64_t|float|double|int|unsigned)\s*\*?\s*(?:__restrict__\s+)?([A-Za-z_]\w{2,})\s*=", text)})
    names = [n for n in names if len(re.findall(rf"\b{n}\b", text)) >= 2]
    if not names:
        return None
    name = _pick(key + ":name", names)
    typos = [name + "s", name[:-1], name[0] + name[2] + name[1] + name[3:] if len(name) > 3 else name + "_",
             name.lower() if name != name.lower() else name.upper()]
    for typo in [_pick(key + ":typo", typos)] + typos:
        if typo == name or re.search(rf"\b{re.escape(typo)}\b", text) or not re.fullmatch(r"[A-Za-z_]\w*", typo):
            continue
        for idx in range(len(lines) - 1, -1, -1):
            code = lines[idx].split("//")[0]
            if '"' in code:
                continue
            hits = list(re.finditer(rf"\b{re.escape(name)}\b", code))
            decl = re.search(rf"(?:int64_t|float|double|int|unsigned)\s*\*?\s*(?:__restrict__\s+)?{re.escape(name)}\s*=", code)
            if hits and not decl:
                m = hits[-1]
                lines[idx] = lines[idx][:m.start()] + typo + lines[idx][m.end():]
                return "\n".join(lines), typo, name, idx
    return None


def _forward_with_epilogue(plan: _Plan, last: _Stage) -> list[str]:
    return ["out = {CALL}", f"return {last.torch_expr.format(x='out')}"]


def _prologue_plan(plan: _Plan) -> _Plan:
    """The plan with its main op left to PyTorch: the kernel starts from the main op's output ``h``."""
    from dataclasses import replace

    return replace(plan, main=_Main("input", "input", ("h",)))


def _fallback_expr(plan: _Plan) -> str | None:
    arg = plan.fwd_args[0]
    if plan.main.op == "input":
        if len(plan.stages) != 1 or not plan.stages[0].torch_expr:
            return None
        return plan.stages[0].torch_expr.format(x=arg)
    if plan.main.op in ("conv", "convT"):
        return plan.main.torch_expr.format(x=arg)
    return plan.reference or None


def kernel_answers(task: Task, backend: str) -> list[Answer]:
    """Every answer the templates can write for ``task`` on ``backend`` ("cpu" or "cuda"); [] when none covers it.

    At most one answer of each kind in `KINDS`, in that order: ``slow`` and ``fast`` (correct), then the flawed
    ones the task allows (``missing_op`` needs an operator chain; ``off_by_one`` is left out where one missing
    element stays within the tolerance, as in a mean over a whole tensor).
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    try:
        plan = _plan_for(task)
        return _answers(plan, backend)
    except _Unsupported:
        return []


def _answers(plan: _Plan, backend: str) -> list[Answer]:
    task = plan.task
    out: list[Answer] = []
    programs: dict[str, tuple[_Source, str]] = {}

    def add(kind: str, code: str, thought: str, summary: str, **detail: Any) -> None:
        out.append(Answer(text=_response(thought, code, summary), kind=kind, expected=EXPECTED_STATUS[kind],
                          task_id=task.task_id, backend=backend, code=code, summary=summary, detail=detail))

    for variant in ("slow", "fast"):
        src = _kernel(plan, backend, plan.stages, variant)
        code = _program(plan, backend, src, variant)
        programs[variant] = (src, code)
        add(variant, code, _thought(plan, plan.stages, variant, backend), _summary(plan, plan.stages, variant, backend))
    key = f"{task.task_id}:{backend}"

    # off by one: the final loop stops one short, so the last row (or element) is never written
    base = _pick(key + ":obo", ("slow", "fast"))
    if plan.main.op != "loss":
        src = _kernel(plan, backend, plan.stages, base, off_by_one=True)
        if src.short:
            code = _program(plan, backend, src, base)
            add("off_by_one", code, _thought(plan, plan.stages, base, backend), _summary(plan, plan.stages, base, backend),
                base=base, short=src.short)

    # a missing operator
    drop = _dropped_stage(plan)
    if drop is not None:
        stages = [s for i, s in enumerate(plan.stages) if i != drop]
        base = _pick(key + ":missing", ("slow", "fast"))
        src = _kernel(plan, backend, stages, base)
        code = _program(plan, backend, src, base)
        add("missing_op", code, _thought(plan, stages, base, backend), _summary(plan, stages, base, backend),
            base=base, dropped=plan.stages[drop].label, dropped_op=plan.stages[drop].op, dropped_line=plan.stages[drop].line,
            dropped_index=drop)

    # a compile error: one identifier misspelt
    base = _pick(key + ":typo", ("slow", "fast"))
    src, code = programs[base]
    field_name = "cpp" if backend == "cpu" else "cuda"
    mutated = _typo(getattr(src, field_name), key)
    if mutated is not None:
        new_text, typo, name, line = mutated
        bad = _Source(src.fn, src.args, src.cpp, src.cuda)
        setattr(bad, field_name, new_text)
        bad_code = _program(plan, backend, bad, base)
        add("compile_error", bad_code, _thought(plan, plan.stages, base, backend),
            _summary(plan, plan.stages, base, backend), base=base, typo=typo, name=name, source_line=line,
            unit="cpp_sources" if backend == "cpu" else "cuda_sources")

    # a format error: one step left to PyTorch in forward
    last = plan.stages[-1] if plan.stages else None
    base = _pick(key + ":format", ("slow", "fast"))
    epilogue = last is not None and bool(last.torch_expr) and last.op != "residual" and \
        (plan.main.op != "input" or len(plan.stages) > 1)
    prologue = plan.main.op in ("mm", "conv", "convT") and bool(plan.stages) and bool(plan.main.torch_expr)
    if epilogue and prologue:
        style = _pick(key + ":format_style", ("epilogue", "prologue"))
    else:
        style = "epilogue" if epilogue else ("prologue" if prologue else "fallback")
    if style == "epilogue":
        stages = plan.stages[:-1]
        src = _kernel(plan, backend, stages, base)
        extra = (f"The last step, {last.label}, is a single call on a small tensor, so I'll leave it to PyTorch "
                 "in forward.")
        code = _program(plan, backend, src, base, forward=_forward_with_epilogue(plan, last),
                        uses_f="F." in last.torch_expr)
        add("format_error", code, _thought(plan, stages, base, backend, extra),
            _summary(plan, stages, base, backend, f"The final {last.label} is applied with PyTorch."),
            base=base, torch_step=last.label, style=style)
    elif style == "prologue":
        head = _prologue_plan(plan)
        src = _kernel(head, backend, head.stages, base)
        main_expr = plan.main.torch_expr.format(x=plan.fwd_args[0]) if "{x}" in plan.main.torch_expr else \
            plan.main.torch_expr
        main_name = _noun(plan.main.label)
        extra = f"PyTorch's own {main_name} is already well optimised, so I'll keep it and write a kernel for the rest."
        code = _program(head, backend, src, base, forward=["h = " + main_expr, "return {CALL}"],
                        uses_f="F." in main_expr)
        add("format_error", code, _thought(head, head.stages, base, backend, extra, task_plan=plan),
            _summary(head, head.stages, base, backend, f"The {main_name} itself stays in PyTorch."),
            base=base, torch_step=f"the {main_name}", style=style)
    else:
        expr = _fallback_expr(plan)
        if expr is not None:
            src, _ = programs[base]
            arg = plan.fwd_args[0]
            forward = [f"if not {arg}.is_contiguous():", f"    return {expr}", "return {CALL}"]
            extra = "For a non-contiguous input I'll fall back to the PyTorch expression instead of copying it."
            code = _program(plan, backend, src, base, forward=forward, uses_f="F." in expr)
            add("format_error", code, _thought(plan, plan.stages, base, backend, extra),
                _summary(plan, plan.stages, base, backend, "Non-contiguous inputs fall back to PyTorch."),
                base=base, torch_step=expr, style="fallback")
    return out


# ===================================================================================================
# The CUDA backend: a host launcher and one __global__ kernel per pass

_CUDA_HELPERS = {
    "block": [
        "__device__ __forceinline__ float warp_sum(float v) {",
        "    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);",
        "    return v;",
        "}",
        "",
        "__device__ __forceinline__ float warp_max(float v) {",
        "    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffff, v, o));",
        "    return v;",
        "}",
        "",
        "__device__ __forceinline__ float warp_min(float v) {",
        "    for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_down_sync(0xffffffff, v, o));",
        "    return v;",
        "}",
        "",
        "// The block's sum / max / min, returned to every thread (blockDim.x a multiple of 32).",
        "#define BLOCK_REDUCE(NAME, WARP_OP, IDENTITY)                                   \\",
        "    __device__ float NAME(float v, float* red) {                                \\",
        "        v = WARP_OP(v);                                                         \\",
        "        __syncthreads();  /* red may still be read by the previous reduction */ \\",
        "        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;                 \\",
        "        __syncthreads();                                                        \\",
        "        v = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : IDENTITY;      \\",
        "        if (threadIdx.x < 32) v = WARP_OP(v);                                   \\",
        "        if (threadIdx.x == 0) red[0] = v;                                       \\",
        "        __syncthreads();                                                        \\",
        "        return red[0];                                                          \\",
        "    }",
        "BLOCK_REDUCE(block_sum, warp_sum, 0.0f)",
        "BLOCK_REDUCE(block_max, warp_max, -INFINITY)",
        "BLOCK_REDUCE(block_min, warp_min, INFINITY)",
        "",
    ],
}


class _CudaWriter(_CppWriter):
    """CUDA for one plan: host code like the C++ writer's, each pass a kernel launch."""

    def __init__(self, plan: _Plan, stages: Sequence[_Stage], variant: str, *, off_by_one: bool = False) -> None:
        super().__init__(plan, stages, variant, off_by_one=off_by_one)
        self.fn_map = _CUDA_FN
        self.kernels: list[str] = []
        self.n_kernels = 0

    def kname(self, part: str) -> str:
        self.n_kernels += 1
        return f"{self.plan.slug}_{part}{self.n_kernels}_kernel"

    def add_kernel(self, lines: Sequence[str]) -> None:
        self.kernels.append("\n".join(lines) + "\n")

    def need_block(self) -> None:
        if not any(h.startswith("__device__ __forceinline__ float warp_sum") for h in self.helpers):
            self.helpers += _CUDA_HELPERS["block"]

    def source(self) -> _Source:
        p = self.plan
        c = _Code(1)
        first = p.main.inputs[0]
        c(f'TORCH_CHECK({first}.is_cuda(), "{self.fn}: expected CUDA tensors");')
        if p.main.op != "loss" or p.main.loss != "cross_entropy":
            c(f'TORCH_CHECK({first}.scalar_type() == torch::kFloat32, "{self.fn}: expected float32 input");')
        for a in self.tensor_args():
            c(f"torch::Tensor {a.name}_c = {a.name}.contiguous();")
        for a in self.args:
            if a.kind == "double":
                c(f"const float s_{a.name} = (float){a.name};")
        c("cudaStream_t stream = at::cuda::getCurrentCUDAStream();")
        c("const int threads = 256;")
        if p.main.op == "loss":
            self.loss(c)
        else:
            main_fused = self.main(c)
            groups = _groups(self.stages, self.variant)
            if main_fused:
                groups = groups[1:]
            for k, g in enumerate(groups):
                self.group(c, g, final=k == len(groups) - 1)
            c("return y;")
        includes = ["#include <torch/extension.h>", "#include <ATen/cuda/CUDAContext.h>",
                    "#include <c10/cuda/CUDAException.h>", "#include <cmath>", "#include <vector>"]
        decl = ", ".join(a.decl for a in self.args)
        body = [*includes, "", *self.helpers, *self.kernels, f"torch::Tensor {self.fn}({decl}) {{", c.text(), "}"]
        return _Source(self.fn, self.args, f"torch::Tensor {self.fn}({decl});", cuda="\n".join(body) + "\n",
                       short=self.short)

    def launch(self, c: _Code, kernel: str, grid: str, block: str, args: Sequence[str], smem: str = "0") -> None:
        c(f"{kernel}<<<{grid}, {block}, {smem}, stream>>>(")
        c("    " + ", ".join(args) + ");")
        c("C10_CUDA_KERNEL_LAUNCH_CHECK();")

    # ---- what a group's kernel needs besides its input and output
    def extras(self, group: Sequence[_Stage], *, resid_ptr: bool = True) -> tuple[list[str], list[str]]:
        decls, calls = [], []
        if resid_ptr and any(s.op == "residual" for s in group):
            decls.append("const float* __restrict__ r_main")
            calls.append("r_main")
        seen: set[str] = set()
        for s in group:
            for t in s.tensors:
                if t not in seen:
                    seen.add(t)
                    decls.append(f"const float* __restrict__ {t}_p")
                    calls.append(f"{t}_c.data_ptr<float>()")
            for sc in s.scalars:
                if sc not in seen:
                    seen.add(sc)
                    decls.append(f"float s_{sc}")
                    calls.append(f"s_{sc}")
            if s.op == "mcumsum" and "mask" not in seen:
                seen.add("mask")
                decls.append("const bool* __restrict__ mk")
                calls.append(f"{self.plan.mask}_c.data_ptr<bool>()")
        return decls, calls

    def ew_lines(self, group: Sequence[_Stage], resid: str, indent: str = "") -> list[str]:
        return [indent + _ew_line(s, self.fn_map, param=lambda t: f"{t}_p[c]", resid=resid) for s in group]

    # ---- main operators
    def main(self, c: _Code) -> bool:
        p = self.plan
        op = p.main.op
        if op == "input":
            c(f"torch::Tensor y = {p.main.inputs[0]}_c;")
            c("std::vector<int64_t> shape(y.sizes().begin(), y.sizes().end());")
            fused = False
        elif op == "mm":
            fused = self.mm(c)
        elif op == "diagmm":
            self.diagmm(c)
            fused = False
        else:
            fused = self.conv(c, transposed=op == "convT")
        if self.stages:
            if _needs_fdim(self.stages) or p.uses_residual:
                self.fdim_lines(c)
            if p.uses_residual and not fused:
                c("const torch::Tensor main_out = y;  // kept for the residual add")
                c("const float* r_main = main_out.data_ptr<float>();")
        return fused

    def fusable_first(self) -> list[_Stage] | None:
        """The first group, when it is element-wise and may run inside the main kernel's store."""
        groups = _groups(self.stages, self.variant)
        if self.variant != "fast" or not groups or _group_kind(groups[0]) != "ew":
            return None
        if self.plan.uses_residual and not any(s.op == "residual" for s in groups[0]):
            return None
        return groups[0]

    def mm(self, c: _Code) -> bool:
        p = self.plan
        m = p.main
        flags = m.flags
        A = m.inputs[0]
        B = m.tensors[0] if m.tensors else m.inputs[1]
        bias = m.tensors[1] if "bias" in flags else None
        tb, batched, tril = "transB" in flags, "batched" in flags, "tril" in flags
        final = not self.stages
        c(f"const int64_t K = {A}_c.size(-1);")
        if batched:
            c(f'TORCH_CHECK({A}_c.dim() == 3 && {B}_c.dim() == 3 && {B}_c.size(0) == {A}_c.size(0), '
              f'"{self.fn}: expected two batches of matrices");')
            c(f"const int64_t batch = {A}_c.size(0), M = {A}_c.size(1), N = {B}_c.size(2);")
            c(f'TORCH_CHECK({B}_c.size(1) == K, "{self.fn}: inner dimensions differ");')
        else:
            c("const int64_t batch = 1;")
            c(f"const int64_t M = {A}_c.numel() / K;  // every leading dim of {A} is a row")
            c(f"const int64_t N = {B}_c.size({0 if tb else 1});")
            c(f'TORCH_CHECK({B}_c.dim() == 2 && {B}_c.size({1 if tb else 0}) == K, "{self.fn}: inner dimensions differ");')
        c(f"std::vector<int64_t> shape({A}_c.sizes().begin(), {A}_c.sizes().end());")
        c("shape.back() = N;")
        c(f"torch::Tensor y = torch::empty(shape, {A}_c.options());")
        fuse = self.fusable_first()
        final = final or (fuse is not None and len(_groups(self.stages, self.variant)) == 1)
        ep_decls, ep_calls = self.extras(fuse or [], resid_ptr=False)
        bias_decl = ["const float* __restrict__ bias"] if bias else []
        bias_call = [f"{bias}_c.data_ptr<float>()"] if bias else []
        b_stride = "K * N" if batched else "0"
        name = self.kname("mm")
        bound = self.minus("M", final)
        store = ["float v = acc" + (" + bias[col]" if bias else "") + ";"]
        if tril:
            store.append("if (col > row) v = 0.0f;  // tril")
        if fuse:
            if any(s.tensors for s in fuse):
                store.append("const int64_t c = col;  // the feature")
            if any(s.op == "residual" for s in fuse):
                store.append("const float r0 = v;")
            store += self.ew_lines(fuse, "r0")
        store.append("Y[row * N + col] = v;")
        if self.variant == "slow":
            self.add_kernel([
                "// one thread per output element: a dot product over K",
                f"__global__ void {name}(const float* __restrict__ A, const float* __restrict__ B, "
                + "".join(d + ", " for d in bias_decl + ep_decls) + "float* __restrict__ Y,",
                "        int64_t batch, int64_t M, int64_t K, int64_t N) {",
                "    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;",
                "    if (idx >= batch * M * N) return;",
                "    const int64_t col = idx % N;",
                "    const int64_t row = (idx / N) % M;",
                "    const int64_t bb = idx / (M * N);",
                f"    if (row >= {bound}) return;",
                "    A += bb * M * K;",
                *([f"    B += bb * {b_stride};"] if batched else []),
                "    Y += bb * M * N;",
                "    float acc = 0.0f;",
                f"    for (int64_t k = 0; k < K; ++k) acc += A[row * K + k] * {'B[col * K + k]' if tb else 'B[k * N + col]'};",
                *("    " + s for s in store),
                "}",
            ])
            c("const int64_t total = batch * M * N;")
            self.launch(c, name, "(unsigned)((total + threads - 1) / threads)", "threads",
                        [f"{A}_c.data_ptr<float>()", f"{B}_c.data_ptr<float>()", *bias_call, *ep_calls,
                         "y.data_ptr<float>()", "batch", "M", "K", "N"])
        else:
            if tb:
                load_b = [
                    "        {  // B is (N, K): load the tile transposed, reading along K (coalesced)",
                    "            const int64_t n = (int64_t)blockIdx.x * TILE + ty;",
                    "            Bs[tx][ty] = (n < N && t + tx < K) ? B[n * K + t + tx] : 0.0f;",
                    "        }",
                ]
            else:
                load_b = ["        Bs[ty][tx] = (t + ty < K && col < N) ? B[(t + ty) * N + col] : 0.0f;"]
            self.add_kernel([
                "constexpr int TILE = 32;",
                "",
                "// 32 x 32 output tile per block; tiles of A and B staged in shared memory, each value reused 32 times",
                f"__global__ void {name}(const float* __restrict__ A, const float* __restrict__ B, "
                + "".join(d + ", " for d in bias_decl + ep_decls) + "float* __restrict__ Y,",
                "        int64_t M, int64_t K, int64_t N) {",
                "    __shared__ float As[TILE][TILE];",
                "    __shared__ float Bs[TILE][TILE + 1];",
                "    const int64_t bb = blockIdx.z;",
                "    A += bb * M * K;",
                *([f"    B += bb * {b_stride};"] if batched else []),
                "    Y += bb * M * N;",
                "    const int tx = threadIdx.x, ty = threadIdx.y;",
                "    const int64_t row = (int64_t)blockIdx.y * TILE + ty;",
                "    const int64_t col = (int64_t)blockIdx.x * TILE + tx;",
                "    float acc = 0.0f;",
                "    for (int64_t t = 0; t < K; t += TILE) {",
                "        As[ty][tx] = (row < M && t + tx < K) ? A[row * K + t + tx] : 0.0f;",
                *load_b,
                "        __syncthreads();",
                "#pragma unroll",
                "        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];",
                "        __syncthreads();",
                "    }",
                f"    if (row < {bound} && col < N) {{",
                *("        " + s for s in store),
                "    }",
                "}",
            ])
            c("const dim3 block(32, 32);")
            c("const dim3 grid((unsigned)((N + 31) / 32), (unsigned)((M + 31) / 32), (unsigned)batch);")
            self.launch(c, name, "grid", "block", [f"{A}_c.data_ptr<float>()", f"{B}_c.data_ptr<float>()", *bias_call,
                                                  *ep_calls, "y.data_ptr<float>()", "M", "K", "N"])
        if final and self.off:
            self.short = "the last row of " + ("each matrix of the output" if batched else "the output")
        return fuse is not None

    def diagmm(self, c: _Code) -> None:
        a, B = self.plan.main.inputs
        name = self.kname("diag")
        c(f"const int64_t n = {a}_c.size(0), m = {B}_c.size(1);")
        c(f'TORCH_CHECK({B}_c.dim() == 2 && {B}_c.size(0) == n, "{self.fn}: shape mismatch");')
        c(f"torch::Tensor y = torch::empty({{n, m}}, {B}_c.options());")
        if self.variant == "slow":
            body = ["    float acc = 0.0f;  // (diag(a) @ B)[i][j] as a full product",
                    "    for (int64_t k = 0; k < n; ++k) acc += (i == k ? a[i] : 0.0f) * B[k * m + j];",
                    "    y[idx] = acc;"]
        else:
            body = ["    y[idx] = a[i] * B[idx];  // row i of B scaled by a[i]"]
        self.add_kernel([
            f"__global__ void {name}(const float* __restrict__ a, const float* __restrict__ B, float* __restrict__ y,",
            "        int64_t n, int64_t m) {",
            "    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;",
            f"    if (idx >= {self.minus('n * m')}) return;",
            "    const int64_t i = idx / m;",
            *([] if self.variant == "fast" else ["    const int64_t j = idx % m;"]),
            *body,
            "}",
        ])
        self.launch(c, name, "(unsigned)((n * m + threads - 1) / threads)", "threads",
                    [f"{a}_c.data_ptr<float>()", f"{B}_c.data_ptr<float>()", "y.data_ptr<float>()", "n", "m"])
        c("std::vector<int64_t> shape = {n, m};")
        if self.off:
            self.short = "the last element"

    def conv(self, c: _Code, *, transposed: bool) -> bool:
        p = self.plan
        m = p.main
        x, (w, b) = m.inputs[0], m.tensors
        stride, pad = m.ints[0], m.ints[1]
        outpad = m.ints[2] if transposed else None
        groups_arg = m.ints[-1]
        final = not self.stages
        if not any(h.startswith("struct ConvShape") for h in self.helpers):
            self.helpers += [
                "struct ConvShape {  // sizes padded to three spatial dims (a missing one: size 1, kernel 1)",
                "    int64_t batch, cin, cout, cin_g, cout_g;",
                "    int64_t isz[3], ksz[3], st[3], pd[3], osz[3];",
                "};",
                "",
            ]
        c(f"const int64_t nd = {x}_c.dim() - 2;")
        c(f'TORCH_CHECK(nd >= 1 && nd <= 3, "{self.fn}: expected a 1D, 2D or 3D input");')
        c("ConvShape cs;")
        c(f"cs.batch = {x}_c.size(0);")
        c(f"cs.cin = {x}_c.size(1);")
        c(f"cs.cout = {w}_c.size(1) * {groups_arg};" if transposed else f"cs.cout = {w}_c.size(0);")
        c(f"cs.cin_g = cs.cin / {groups_arg};")
        c(f"cs.cout_g = cs.cout / {groups_arg};")
        c("for (int64_t d = 0; d < 3; ++d) {")
        c("    cs.isz[d] = 1; cs.ksz[d] = 1; cs.st[d] = 1; cs.pd[d] = 0;")
        c("}")
        if transposed:
            c("int64_t op[3] = {0, 0, 0};")
        c("for (int64_t d = 0; d < nd; ++d) {")
        c(f"    cs.isz[3 - nd + d] = {x}_c.size(2 + d);")
        c(f"    cs.ksz[3 - nd + d] = {w}_c.size(2 + d);")
        c(f"    cs.st[3 - nd + d] = {stride};")
        c(f"    cs.pd[3 - nd + d] = {pad};")
        if transposed:
            c(f"    op[3 - nd + d] = {outpad};")
        c("}")
        if transposed:
            c("for (int64_t d = 0; d < 3; ++d) cs.osz[d] = (cs.isz[d] - 1) * cs.st[d] - 2 * cs.pd[d] + cs.ksz[d] + op[d];")
        else:
            c("for (int64_t d = 0; d < 3; ++d) cs.osz[d] = (cs.isz[d] + 2 * cs.pd[d] - cs.ksz[d]) / cs.st[d] + 1;")
        c("std::vector<int64_t> shape = {cs.batch, cs.cout};")
        c("for (int64_t d = 3 - nd; d < 3; ++d) shape.push_back(cs.osz[d]);")
        c(f"torch::Tensor y = torch::empty(shape, {x}_c.options());")
        c("const int64_t out_plane = cs.osz[0] * cs.osz[1] * cs.osz[2];")
        fuse = self.fusable_first()
        final = final or (fuse is not None and len(_groups(self.stages, self.variant)) == 1)
        ep_decls, ep_calls = self.extras(fuse or [], resid_ptr=False)
        name = self.kname("convt" if transposed else "conv")
        if transposed:
            taps = [
                "        for (int64_t kd = 0; kd < s.ksz[0]; ++kd) {",
                "            const int64_t td = od + s.pd[0] - kd;  // input id reaches od iff td = id * stride",
                "            if (td < 0 || td % s.st[0] != 0 || td / s.st[0] >= s.isz[0]) continue;",
                "            for (int64_t kh = 0; kh < s.ksz[1]; ++kh) {",
                "                const int64_t th = oh + s.pd[1] - kh;",
                "                if (th < 0 || th % s.st[1] != 0 || th / s.st[1] >= s.isz[1]) continue;",
                "                for (int64_t kw = 0; kw < s.ksz[2]; ++kw) {",
                "                    const int64_t tw = ow + s.pd[2] - kw;",
                "                    if (tw < 0 || tw % s.st[2] != 0 || tw / s.st[2] >= s.isz[2]) continue;",
                "                    acc += xp[((td / s.st[0]) * s.isz[1] + th / s.st[1]) * s.isz[2] + tw / s.st[2]]"
                " * WP[(kd * s.ksz[1] + kh) * s.ksz[2] + kw];",
                "                }",
                "            }",
                "        }",
            ]
        else:
            taps = [
                "        for (int64_t kd = 0; kd < s.ksz[0]; ++kd) {",
                "            const int64_t id = od * s.st[0] - s.pd[0] + kd;",
                "            if (id < 0 || id >= s.isz[0]) continue;",
                "            for (int64_t kh = 0; kh < s.ksz[1]; ++kh) {",
                "                const int64_t ih = oh * s.st[1] - s.pd[1] + kh;",
                "                if (ih < 0 || ih >= s.isz[1]) continue;",
                "                for (int64_t kw = 0; kw < s.ksz[2]; ++kw) {",
                "                    const int64_t iw = ow * s.st[2] - s.pd[2] + kw;",
                "                    if (iw < 0 || iw >= s.isz[2]) continue;",
                "                    acc += xp[(id * s.isz[1] + ih) * s.isz[2] + iw] * WP[(kd * s.ksz[1] + kh) * s.ksz[2] + kw];",
                "                }",
                "            }",
                "        }",
            ]
        store = ["float v = acc;"]
        if fuse:
            if any(s.tensors for s in fuse):
                store.append("const int64_t c = oc;  // the channel")
            if any(s.op == "residual" for s in fuse):
                store.append("const float r0 = v;")
            store += self.ew_lines(fuse, "r0")
        common = [
            "    const int64_t in_plane = s.isz[0] * s.isz[1] * s.isz[2];",
            "    const int64_t taps = s.ksz[0] * s.ksz[1] * s.ksz[2];",
            "    const int64_t g = oc / s.cout_g;",
            "    float acc = bias[oc];",
            "    for (int64_t icg = 0; icg < s.cin_g; ++icg) {",
            "        const int64_t ic = g * s.cin_g + icg;",
            "        const float* xp = x + (n * s.cin + ic) * in_plane;",
        ]
        head = f"__global__ void {name}(const float* __restrict__ x, const float* __restrict__ w, " \
               f"const float* __restrict__ bias, {''.join(d + ', ' for d in ep_decls)}float* __restrict__ y, ConvShape s) {{"
        if self.variant == "slow":
            wp = ("w + (ic * s.cout_g + oc % s.cout_g) * taps" if transposed else "w + (oc * s.cin_g + icg) * taps")
            self.add_kernel([
                "// one thread per output element, every filter tap read from global memory",
                head,
                "    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;",
                "    const int64_t out_plane = s.osz[0] * s.osz[1] * s.osz[2];",
                "    if (idx >= s.batch * s.cout * out_plane) return;",
                "    const int64_t ow = idx % s.osz[2];",
                "    const int64_t oh = (idx / s.osz[2]) % s.osz[1];",
                "    const int64_t od = (idx / (s.osz[2] * s.osz[1])) % s.osz[0];",
                "    const int64_t oc = (idx / out_plane) % s.cout;",
                "    const int64_t n = idx / (out_plane * s.cout);",
                f"    if (ow >= {self.minus('s.osz[2]', final)}) return;",
                *common,
                f"        const float* WP = {wp};",
                *taps,
                "    }",
                *("    " + s for s in store),
                "    y[idx] = v;",
                "}",
            ])
            c("const int64_t total = cs.batch * cs.cout * out_plane;")
            self.launch(c, name, "(unsigned)((total + threads - 1) / threads)", "threads",
                        [f"{x}_c.data_ptr<float>()", f"{w}_c.data_ptr<float>()", f"{b}_c.data_ptr<float>()", *ep_calls,
                         "y.data_ptr<float>()", "cs"])
            if final and self.off:
                self.short = "the last output column of every row"
        else:
            load = ("for (int64_t i = threadIdx.x; i < s.cin_g * taps; i += blockDim.x) {",
                    "    const int64_t icg = i / taps, t = i % taps;",
                    "    sw[i] = w[((g * s.cin_g + icg) * s.cout_g + oc % s.cout_g) * taps + t];",
                    "}") if transposed else (
                    "for (int64_t i = threadIdx.x; i < s.cin_g * taps; i += blockDim.x) sw[i] = w[oc * s.cin_g * taps + i];",)
            self.add_kernel([
                "// grid.y = (sample, output channel): the block stages that channel's filter in shared memory",
                head,
                "    extern __shared__ float sw[];",
                "    const int64_t n = blockIdx.y / s.cout, oc = blockIdx.y % s.cout;",
                "    const int64_t taps = s.ksz[0] * s.ksz[1] * s.ksz[2];",
                "    const int64_t g = oc / s.cout_g;",
                *("    " + l for l in load),
                "    __syncthreads();",
                "    const int64_t out_plane = s.osz[0] * s.osz[1] * s.osz[2];",
                "    const int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;",
                f"    if (o >= {self.minus('out_plane', final)}) return;",
                "    const int64_t ow = o % s.osz[2];",
                "    const int64_t oh = (o / s.osz[2]) % s.osz[1];",
                "    const int64_t od = o / (s.osz[2] * s.osz[1]);",
                *[l for l in common if "taps =" not in l and "g = oc" not in l],
                "        const float* WP = sw + icg * taps;",
                *taps,
                "    }",
                *("    " + s for s in store),
                "    y[(n * s.cout + oc) * out_plane + o] = v;",
                "}",
            ])
            c("const dim3 grid((unsigned)((out_plane + threads - 1) / threads), (unsigned)(cs.batch * cs.cout));")
            c("const size_t smem = (size_t)(cs.cin_g * cs.ksz[0] * cs.ksz[1] * cs.ksz[2]) * sizeof(float);")
            self.launch(c, name, "grid", "threads",
                        [f"{x}_c.data_ptr<float>()", f"{w}_c.data_ptr<float>()", f"{b}_c.data_ptr<float>()", *ep_calls,
                         "y.data_ptr<float>()", "cs"], smem="smem")
            if final and self.off:
                self.short = "the last element of every output plane"
        return fuse is not None

    # ---- stage groups
    def block_mode(self, group: Sequence[_Stage]) -> bool:
        """One block per line with the line in shared memory: only where each line is contiguous (S == 1)."""
        contiguous = self.plan.layout in ("mat", "bmm") or self.plan.fdim == "-1"
        sequential = {"prod", "argmax", "argmin", "rmsnorm"} | _SCANS
        return self.variant == "fast" and contiguous and not any(s.op in sequential for s in group)

    def group(self, c: _Code, group: list[_Stage], *, final: bool) -> None:
        kind = _group_kind(group)
        c(f"{{  // {_labels(group)}")
        c.depth += 1
        if kind == "ew":
            self.ew_group(c, group, final)
        elif kind == "line":
            if self.block_mode(group):
                self.block_group(c, group, final)
            else:
                self.thread_group(c, group, final)
        else:
            self.barrier(c, group[0], final)
        c.close()

    def ew_group(self, c: _Code, group: list[_Stage], final: bool) -> None:
        decls, calls = self.extras(group)
        needs_c = any(s.tensors for s in group)
        name = self.kname("ew")
        if self.variant == "slow":
            loop = ["    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;",
                    f"    if (i >= {self.minus('total', final)}) return;"]
            close: list[str] = []
            ind = "    "
        else:
            loop = ["    const int64_t step = (int64_t)gridDim.x * blockDim.x;",
                    f"    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < {self.minus('total', final)}; "
                    "i += step) {"]
            close = ["    }"]
            ind = "        "
        body = [ind + "float v = src[i];"]
        if needs_c:
            body.append(ind + "const int64_t c = (i / S) % C;  // the channel of element i")
        body += self.ew_lines(group, "r_main[i]", ind)
        body.append(ind + "dst[i] = v;")
        self.add_kernel([
            f"__global__ void {name}(const float* __restrict__ src, float* __restrict__ dst, "
            + "".join(d + ", " for d in decls) + "int64_t total, int64_t C, int64_t S) {",
            *loop, *body, *close, "}",
        ])
        c("torch::Tensor z = torch::empty(shape, y.options());")
        c("const int64_t total = y.numel();")
        if needs_c:
            self.need_split()
            c("int64_t N, C, S;")
            c("split_at(shape, fdim, N, C, S);")
        else:
            c("const int64_t C = 1, S = 1;")
        if self.variant == "slow":
            grid = "(unsigned)((total + threads - 1) / threads)"
        else:
            c("const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 4096);  // grid-stride")
            grid = "(unsigned)blocks"
        self.launch(c, name, grid, "threads", ["y.data_ptr<float>()", "z.data_ptr<float>()", *calls, "total", "C", "S"])
        c("y = z;")
        if final and self.off:
            self.short = "the last element"

    def line_alloc(self, c: _Code, group: Sequence[_Stage], final: bool) -> str:
        self.need_split()
        c("int64_t N, C, S;")
        c("split_at(shape, fdim, N, C, S);")
        c(f"const int64_t C_out = {_c_out(group)};")
        self.out_alloc(c, group, final, "C_out")
        return "int64_t" if final and self.plan.out_long else "float"

    def thread_group(self, c: _Code, group: list[_Stage], final: bool) -> None:
        """One thread per line (consecutive threads take consecutive inner positions: coalesced when S > 1)."""
        decls, calls = self.extras(group)
        dst_t = self.line_alloc(c, group, final)
        name = self.kname("lines")
        at = lambda cc: f"ln[({cc}) * S]" if cc not in ("0", "c") else (f"ln[{cc} * S]" if cc == "c" else "ln[0]")
        body: list[str] = []
        i = 0
        while i < len(group):
            if group[i].kind == "ew":
                run = []
                while i < len(group) and group[i].kind == "ew":
                    run.append(group[i])
                    i += 1
                body += ["for (int64_t c = 0; c < L; ++c) {", "    float v = ln[c * S];",
                         *self.ew_lines(run, "r_main[(n * C + c) * S + s]", "    "), "    ln[c * S] = v;", "}"]
                continue
            s = group[i]
            mask_at = (lambda cc: f"mk[(n * C + {cc}) * S + s]") if s.op == "mcumsum" else None
            body += _seq_row(s, at, self.fn_map, mask_at=mask_at, slow=self.variant == "slow")
            i += 1
        store = "(int64_t)ln[c * S]" if dst_t == "int64_t" else "ln[c * S]"
        self.add_kernel([
            "// one thread per line along the feature dim (element c at ln[c * S]), worked on in a scratch copy",
            f"__global__ void {name}(const float* __restrict__ src, float* __restrict__ work, "
            f"{dst_t}* __restrict__ dst, " + "".join(d + ", " for d in decls) + "int64_t N, int64_t C, int64_t S, "
            "int64_t C_out) {",
            "    const int64_t line = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;",
            f"    if (line >= {self.minus('N * S', final)}) return;",
            "    const int64_t n = line / S, s = line % S;",
            "    float* ln = work + n * C * S + s;",
            "    for (int64_t c = 0; c < C; ++c) ln[c * S] = src[(n * C + c) * S + s];",
            "    int64_t L = C;",
            *("    " + b for b in body),
            f"    for (int64_t c = 0; c < C_out; ++c) dst[(n * C_out + c) * S + s] = {store};",
            "}",
        ])
        c("torch::Tensor work = torch::empty({N * C * S}, y.options());")
        self.launch(c, name, "(unsigned)((N * S + threads - 1) / threads)", "threads",
                    ["y.data_ptr<float>()", "work.data_ptr<float>()", "dst", *calls, "N", "C", "S", "C_out"])
        c("y = z;")
        c("shape = out_shape;")
        if final and self.off:
            self.short = "the last line"

    def block_group(self, c: _Code, group: list[_Stage], final: bool) -> None:
        """One block per row (S == 1), the row in shared memory, reductions with warp shuffles."""
        self.need_block()
        decls, calls = self.extras(group)
        self.line_alloc(c, group, final)
        name = self.kname("rows")
        pool = any(s.op == "pool_c" for s in group)
        loop = "for (int64_t c = threadIdx.x; c < L; c += blockDim.x)"
        fn = self.fn_map
        body: list[str] = []
        i = 0
        while i < len(group):
            s = group[i]
            if s.kind == "ew":
                run = []
                while i < len(group) and group[i].kind == "ew":
                    run.append(group[i])
                    i += 1
                body += [loop + " {", "    float v = sh[c];", *self.ew_lines(run, "r_main[row * C + c]", "    "),
                         "    sh[c] = v;", "}", "__syncthreads();"]
                continue
            i += 1
            op = s.op
            if op in ("softmax", "log_softmax", "logsumexp"):
                body += ["{", "    float m = -INFINITY;", f"    {loop} m = fmaxf(m, sh[c]);", "    m = block_max(m, red);",
                         "    float sum = 0.0f;"]
                if op == "softmax":
                    body += [f"    {loop} {{", f"        const float e = {fn['exp']}(sh[c] - m);", "        sh[c] = e;",
                             "        sum += e;", "    }", "    sum = block_sum(sum, red);",
                             "    const float inv = 1.0f / sum;", f"    {loop} sh[c] *= inv;", "    __syncthreads();"]
                elif op == "log_softmax":
                    body += [f"    {loop} sum += {fn['exp']}(sh[c] - m);", "    sum = block_sum(sum, red);",
                             f"    const float lse = m + {fn['log']}(sum);", f"    {loop} sh[c] -= lse;",
                             "    __syncthreads();"]
                else:
                    body += [f"    {loop} sum += {fn['exp']}(sh[c] - m);", "    sum = block_sum(sum, red);",
                             f"    if (threadIdx.x == 0) sh[0] = m + {fn['log']}(sum);", "    __syncthreads();",
                             "    L = 1;"]
                body.append("}")
            elif op in ("sum", "mean", "amax", "amin"):
                init, upd, red = {"sum": ("0.0f", "acc += sh[c];", "block_sum"),
                                  "mean": ("0.0f", "acc += sh[c];", "block_sum"),
                                  "amax": ("-INFINITY", "acc = fmaxf(acc, sh[c]);", "block_max"),
                                  "amin": ("INFINITY", "acc = fminf(acc, sh[c]);", "block_min")}[op]
                tail = " / (float)L" if op == "mean" else ""
                body += ["{", f"    float acc = {init};", f"    {loop} {upd}", f"    acc = {red}(acc, red);",
                         f"    if (threadIdx.x == 0) sh[0] = acc{tail};", "    __syncthreads();", "    L = 1;", "}"]
            elif op == "pool_c":
                value = "fmaxf(sh[2 * c], sh[2 * c + 1])" if s.mode == "max" else "(sh[2 * c] + sh[2 * c + 1]) / 2.0f"
                body += ["{", "    const int64_t half = L / 2;",
                         f"    for (int64_t c = threadIdx.x; c < half; c += blockDim.x) tmp[c] = {value};",
                         "    __syncthreads();", "    for (int64_t c = threadIdx.x; c < half; c += blockDim.x) sh[c] = tmp[c];",
                         "    __syncthreads();", "    L = half;", "}"]
            else:
                raise _Unsupported(f"block row op {op}")
        self.add_kernel([
            "// one block per row: the row lives in shared memory, reductions use warp shuffles",
            f"__global__ void {name}(const float* __restrict__ src, float* __restrict__ dst, "
            + "".join(d + ", " for d in decls) + "int64_t C, int64_t C_out) {",
            "    extern __shared__ float sh[];  // the row" + (", then C / 2 floats of pooling scratch" if pool else ""),
            *(["    float* tmp = sh + C;"] if pool else []),
            "    __shared__ float red[32];",
            "    const int64_t row = blockIdx.x;",
            "    const float* in = src + row * C;",
            "    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sh[c] = in[c];",
            "    __syncthreads();",
            "    int64_t L = C;",
            *("    " + b for b in body),
            "    float* out = dst + row * C_out;",
            "    for (int64_t c = threadIdx.x; c < C_out; c += blockDim.x) out[c] = sh[c];",
            "}",
        ])
        c(f"const size_t smem = (size_t)(C{' + C / 2' if pool else ''}) * sizeof(float);")
        self.launch(c, name, f"(unsigned)({self.minus('N * S', final)})", "threads",
                    ["y.data_ptr<float>()", "dst", *calls, "C", "C_out"], smem="smem")
        c("y = z;")
        c("shape = out_shape;")
        if final and self.off:
            self.short = "the last row"

    def barrier(self, c: _Code, s: _Stage, final: bool) -> None:
        op = s.op
        decls, calls = self.extras([s])
        name = self.kname({"spool": "pool", "gavg": "gavg", "segnorm": "norm", "batchnorm": "bn"}[op])
        if op == "spool":
            k, st, pd = s.ints
            if not any(h.startswith("struct PoolShape") for h in self.helpers):
                self.helpers += ["struct PoolShape {  // sizes padded to three spatial dims",
                                 "    int64_t planes, isz[3], ksz[3], st[3], pd[3], osz[3];", "};", ""]
            c("const int64_t nd = (int64_t)shape.size() - 2;")
            c("PoolShape ps;")
            c("ps.planes = shape[0] * shape[1];")
            c("for (int64_t d = 0; d < 3; ++d) {")
            c("    ps.isz[d] = 1; ps.ksz[d] = 1; ps.st[d] = 1; ps.pd[d] = 0;")
            c("}")
            c("for (int64_t d = 0; d < nd; ++d) {")
            c("    ps.isz[3 - nd + d] = shape[2 + d];")
            c(f"    ps.ksz[3 - nd + d] = {k};")
            c(f"    ps.st[3 - nd + d] = {st};")
            c(f"    ps.pd[3 - nd + d] = {pd};")
            c("}")
            c("for (int64_t d = 0; d < 3; ++d) ps.osz[d] = (ps.isz[d] + 2 * ps.pd[d] - ps.ksz[d]) / ps.st[d] + 1;")
            c("std::vector<int64_t> out_shape = {shape[0], shape[1]};")
            c("for (int64_t d = 3 - nd; d < 3; ++d) out_shape.push_back(ps.osz[d]);")
            c("torch::Tensor z = torch::empty(out_shape, y.options());")
            c("const int64_t total = z.numel();")
            if self.variant == "slow":
                index = ["    const int64_t p = idx % s.planes;  // consecutive threads: different planes",
                         "    const int64_t pos = idx / s.planes;"]
            else:
                index = ["    const int64_t out_plane = s.osz[0] * s.osz[1] * s.osz[2];",
                         "    const int64_t p = idx / out_plane;  // consecutive threads: neighbouring outputs",
                         "    const int64_t pos = idx % out_plane;"]
            self.add_kernel([
                f"__global__ void {name}(const float* __restrict__ src, float* __restrict__ dst, PoolShape s) {{",
                "    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;",
                "    const int64_t total = s.planes * s.osz[0] * s.osz[1] * s.osz[2];",
                f"    if (idx >= {self.minus('total', final)}) return;",
                *index,
                "    const int64_t ow = pos % s.osz[2], oh = (pos / s.osz[2]) % s.osz[1], od = pos / (s.osz[2] * s.osz[1]);",
                "    const float* xp = src + p * s.isz[0] * s.isz[1] * s.isz[2];",
                "    float acc = %s;%s" % (("-INFINITY", "") if s.mode == "max" else ("0.0f", "  // the padding counts in the mean")),
                "    for (int64_t kd = 0; kd < s.ksz[0]; ++kd) {",
                "        const int64_t id = od * s.st[0] - s.pd[0] + kd;",
                "        if (id < 0 || id >= s.isz[0]) continue;",
                "        for (int64_t kh = 0; kh < s.ksz[1]; ++kh) {",
                "            const int64_t ih = oh * s.st[1] - s.pd[1] + kh;",
                "            if (ih < 0 || ih >= s.isz[1]) continue;",
                "            for (int64_t kw = 0; kw < s.ksz[2]; ++kw) {",
                "                const int64_t iw = ow * s.st[2] - s.pd[2] + kw;",
                "                if (iw < 0 || iw >= s.isz[2]) continue;",
                "                const float v = xp[(id * s.isz[1] + ih) * s.isz[2] + iw];",
                "                %s" % ("acc = fmaxf(acc, v);" if s.mode == "max" else "acc += v;"),
                "            }",
                "        }",
                "    }",
                "    dst[p * s.osz[0] * s.osz[1] * s.osz[2] + pos] = %s;" % (
                    "acc" if s.mode == "max" else "acc / (float)(s.ksz[0] * s.ksz[1] * s.ksz[2])"),
                "}",
            ])
            self.launch(c, name, "(unsigned)((total + threads - 1) / threads)", "threads",
                        ["y.data_ptr<float>()", "z.data_ptr<float>()", "ps"])
            c("y = z;")
            c("shape = out_shape;")
            if final and self.off:
                self.short = "the last pooled element"
            return
        if op == "gavg":
            c("const int64_t planes = shape[0] * shape[1];")
            c("const int64_t plane = y.numel() / planes;")
            c("std::vector<int64_t> out_shape = shape;")
            c("for (size_t d = 2; d < out_shape.size(); ++d) out_shape[d] = 1;")
            c("torch::Tensor z = torch::empty(out_shape, y.options());")
            if self.variant == "slow":
                self.add_kernel([
                    f"__global__ void {name}(const float* __restrict__ src, float* __restrict__ dst, int64_t planes, "
                    "int64_t plane) {",
                    "    const int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;  // one thread per plane",
                    f"    if (p >= {self.minus('planes', final)}) return;",
                    "    double acc = 0.0;",
                    "    for (int64_t i = 0; i < plane; ++i) acc += src[p * plane + i];",
                    "    dst[p] = (float)(acc / (double)plane);",
                    "}",
                ])
                self.launch(c, name, "(unsigned)((planes + threads - 1) / threads)", "threads",
                            ["y.data_ptr<float>()", "z.data_ptr<float>()", "planes", "plane"])
            else:
                self.need_block()
                self.add_kernel([
                    f"__global__ void {name}(const float* __restrict__ src, float* __restrict__ dst, int64_t plane) {{",
                    "    __shared__ float red[32];",
                    "    const int64_t p = blockIdx.x;  // one block per plane",
                    "    float acc = 0.0f;",
                    "    for (int64_t i = threadIdx.x; i < plane; i += blockDim.x) acc += src[p * plane + i];",
                    "    acc = block_sum(acc, red);",
                    "    if (threadIdx.x == 0) dst[p] = acc / (float)plane;",
                    "}",
                ])
                self.launch(c, name, f"(unsigned)({self.minus('planes', final)})", "threads",
                            ["y.data_ptr<float>()", "z.data_ptr<float>()", "plane"])
            c("y = z;")
            c("shape = out_shape;")
            if final and self.off:
                self.short = "the last channel's mean"
            return
        c("torch::Tensor z = torch::empty(shape, y.options());")
        if op == "segnorm":
            w = s.tensors[0] if s.tensors else None
            if s.mode == "layer":
                c(f"const int64_t seg = {w}_c.numel();  // the normalised shape's size")
                c("const int64_t groups = 1, S = 1;")
            elif s.mode == "group":
                c(f"const int64_t groups = {s.ints[0]};")
                c("const int64_t S = y.numel() / (shape[0] * shape[1]);")
                c("const int64_t seg = (shape[1] / groups) * S;")
            else:
                c("const int64_t groups = 1, S = 1;")
                c("const int64_t seg = y.numel() / (shape[0] * shape[1]);  // one (sample, channel) plane")
            c("const int64_t segments = y.numel() / seg;")
            affine = {
                "layer": f"v = v * {w}_p[i] + {s.tensors[1]}_p[i];" if s.tensors else "",
                "group": f"v = v * {w}_p[c0 + i / S] + {s.tensors[1]}_p[c0 + i / S];" if s.tensors else "",
                "instance": "",
            }[s.mode]
            head = (f"__global__ void {name}(const float* __restrict__ src, float* __restrict__ dst, "
                    + "".join(d + ", " for d in decls) + "int64_t segments, int64_t seg, int64_t groups, int64_t S) {")
            group_c0 = ["    const int64_t c0 = (g % groups) * (seg / S);  // first channel of this group"] \
                if s.mode == "group" else []
            if self.variant == "slow":
                self.add_kernel([
                    "// one thread per normalised segment",
                    head,
                    "    const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;",
                    f"    if (g >= {self.minus('segments', final)}) return;",
                    "    const float* xs = src + g * seg;",
                    "    float* zs = dst + g * seg;",
                    *group_c0,
                    "    double mean = 0.0, var = 0.0;",
                    "    for (int64_t i = 0; i < seg; ++i) mean += xs[i];",
                    "    mean /= (double)seg;",
                    "    for (int64_t i = 0; i < seg; ++i) var += (xs[i] - mean) * (xs[i] - mean);",
                    "    var /= (double)seg;",
                    "    const float m = (float)mean, rstd = (float)(1.0 / sqrt(var + 1e-5));",
                    "    for (int64_t i = 0; i < seg; ++i) {",
                    "        float v = (xs[i] - m) * rstd;",
                    *(["        " + affine] if affine else []),
                    "        zs[i] = v;",
                    "    }",
                    "}",
                ])
                self.launch(c, name, "(unsigned)((segments + threads - 1) / threads)", "threads",
                            ["y.data_ptr<float>()", "z.data_ptr<float>()", *calls, "segments", "seg", "groups", "S"])
            else:
                self.need_block()
                self.add_kernel([
                    "// one block per normalised segment: two block reductions (mean, then the centred variance)",
                    head,
                    "    __shared__ float red[32];",
                    "    const int64_t g = blockIdx.x;",
                    "    const float* xs = src + g * seg;",
                    "    float* zs = dst + g * seg;",
                    *group_c0,
                    "    float acc = 0.0f;",
                    "    for (int64_t i = threadIdx.x; i < seg; i += blockDim.x) acc += xs[i];",
                    "    const float m = block_sum(acc, red) / (float)seg;",
                    "    acc = 0.0f;",
                    "    for (int64_t i = threadIdx.x; i < seg; i += blockDim.x) acc += (xs[i] - m) * (xs[i] - m);",
                    "    const float rstd = rsqrtf(block_sum(acc, red) / (float)seg + 1e-5f);",
                    "    for (int64_t i = threadIdx.x; i < seg; i += blockDim.x) {",
                    "        float v = (xs[i] - m) * rstd;",
                    *(["        " + affine] if affine else []),
                    "        zs[i] = v;",
                    "    }",
                    "}",
                ])
                self.launch(c, name, f"(unsigned)({self.minus('segments', final)})", "threads",
                            ["y.data_ptr<float>()", "z.data_ptr<float>()", *calls, "segments", "seg", "groups", "S"])
            if final and self.off:
                self.short = "the last normalised group"
        elif op == "batchnorm":
            w, b = s.tensors
            c("const int64_t batch = shape[0], C = shape[1];")
            c("const int64_t S = y.numel() / (batch * C);")
            head = (f"__global__ void {name}(const float* __restrict__ src, float* __restrict__ dst, "
                    f"const float* __restrict__ {w}_p, const float* __restrict__ {b}_p, int64_t batch, int64_t C, "
                    "int64_t S) {")
            if self.variant == "slow":
                self.add_kernel([
                    "// one thread per channel: statistics over the batch and every position",
                    head,
                    "    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;",
                    f"    if (c >= {self.minus('C', final)}) return;",
                    "    const double count = (double)(batch * S);",
                    "    double mean = 0.0, var = 0.0;",
                    "    for (int64_t n = 0; n < batch; ++n)",
                    "        for (int64_t s = 0; s < S; ++s) mean += src[(n * C + c) * S + s];",
                    "    mean /= count;",
                    "    for (int64_t n = 0; n < batch; ++n)",
                    "        for (int64_t s = 0; s < S; ++s) {",
                    "            const double d = src[(n * C + c) * S + s] - mean;",
                    "            var += d * d;",
                    "        }",
                    "    var /= count;",
                    f"    const float scale = (float)(1.0 / sqrt(var + 1e-5)) * {w}_p[c];",
                    f"    const float shift = {b}_p[c] - (float)mean * scale;",
                    "    for (int64_t n = 0; n < batch; ++n)",
                    "        for (int64_t s = 0; s < S; ++s) dst[(n * C + c) * S + s] = src[(n * C + c) * S + s] * scale + shift;",
                    "}",
                ])
                self.launch(c, name, "(unsigned)((C + threads - 1) / threads)", "threads",
                            ["y.data_ptr<float>()", "z.data_ptr<float>()", f"{w}_c.data_ptr<float>()",
                             f"{b}_c.data_ptr<float>()", "batch", "C", "S"])
            else:
                self.need_block()
                self.add_kernel([
                    "// one block per channel: block reductions over the batch and every position",
                    head,
                    "    __shared__ float red[32];",
                    "    const int64_t c = blockIdx.x;",
                    "    const int64_t count = batch * S;",
                    "    float acc = 0.0f;",
                    "    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += src[((i / S) * C + c) * S + i % S];",
                    "    const float m = block_sum(acc, red) / (float)count;",
                    "    acc = 0.0f;",
                    "    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {",
                    "        const float d = src[((i / S) * C + c) * S + i % S] - m;",
                    "        acc += d * d;",
                    "    }",
                    f"    const float scale = rsqrtf(block_sum(acc, red) / (float)count + 1e-5f) * {w}_p[c];",
                    f"    const float shift = {b}_p[c] - m * scale;",
                    "    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {",
                    "        const int64_t j = ((i / S) * C + c) * S + i % S;",
                    "        dst[j] = src[j] * scale + shift;",
                    "    }",
                    "}",
                ])
                self.launch(c, name, f"(unsigned)({self.minus('C', final)})", "threads",
                            ["y.data_ptr<float>()", "z.data_ptr<float>()", f"{w}_c.data_ptr<float>()",
                             f"{b}_c.data_ptr<float>()", "batch", "C", "S"])
            if final and self.off:
                self.short = "the last channel"
        else:
            raise _Unsupported(f"barrier {op}")
        c("y = z;")

    # ---- losses
    def loss(self, c: _Code) -> None:
        p, q = self.plan.main.inputs
        loss = self.plan.main.loss
        slow = self.variant == "slow"
        t_type = "int64_t" if loss == "cross_entropy" else "float"
        if loss == "cross_entropy":
            c(f'TORCH_CHECK({p}_c.scalar_type() == torch::kFloat32 && {q}_c.scalar_type() == torch::kInt64, '
              f'"{self.fn}: expected float32 logits and int64 targets");')
        c(f"torch::Tensor out = torch::empty(std::vector<int64_t>{{}}, {p}_c.options());")
        finish = self.kname("finish")
        self.add_kernel([
            f"__global__ void {finish}(const double* __restrict__ acc, float* __restrict__ out, double denom) {{",
            "    out[0] = (float)(acc[0] / denom);",
            "}",
        ])
        sum_block = [
            "    __shared__ double part[256];  // blockDim.x == 256",
            "    part[threadIdx.x] = local;",
            "    __syncthreads();",
            "    for (int k = 128; k > 0; k >>= 1) {",
            "        if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];",
            "        __syncthreads();",
            "    }",
            "    if (threadIdx.x == 0) atomicAdd(acc, part[0]);",
        ]
        c(f"torch::Tensor acc = torch::zeros({{1}}, {p}_c.options().dtype(torch::kFloat64));")
        if loss in ("mse", "l1", "huber", "hinge", "kl_div"):
            term = {
                "mse": "const float d = p - t; return d * d;",
                "l1": "return fabsf(p - t);",
                "huber": "const float z = fabsf(p - t); return z < 1.0f ? 0.5f * z * z : z - 0.5f;",
                "hinge": "const float h = 1.0f - p * t; return h > 0.0f ? h : 0.0f;",
                "kl_div": "return t * (logf(t) - logf(p));",
            }[loss]
            self.helpers += [f"__device__ __forceinline__ float loss_term(float p, float t) {{ {term} }}", ""]
            c(f"const int64_t total = {p}_c.numel();")
            denom = f"(double){p}_c.size(0)" if loss == "kl_div" else "(double)total"
            if slow:
                terms = self.kname("terms")
                reduce = self.kname("sum")
                self.add_kernel([
                    f"__global__ void {terms}(const float* __restrict__ p, const float* __restrict__ t, "
                    "float* __restrict__ terms, int64_t total) {",
                    "    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;",
                    "    if (i < total) terms[i] = loss_term(p[i], t[i]);",
                    "}",
                    "",
                    "// a single block adds the terms up",
                    f"__global__ void {reduce}(const float* __restrict__ terms, double* __restrict__ acc, int64_t total) {{",
                    "    double local = 0.0;",
                    "    for (int64_t i = threadIdx.x; i < total; i += blockDim.x) local += terms[i];",
                    *sum_block,
                    "}",
                ])
                c(f"torch::Tensor terms = torch::empty_like({p}_c);")
                self.launch(c, terms, "(unsigned)((total + threads - 1) / threads)", "threads",
                            [f"{p}_c.data_ptr<float>()", f"{q}_c.data_ptr<float>()", "terms.data_ptr<float>()", "total"])
                self.launch(c, reduce, "1", "threads", ["terms.data_ptr<float>()", "acc.data_ptr<double>()", "total"])
            else:
                red = self.kname("loss")
                self.add_kernel([
                    "// grid-stride partial sums in double, a block tree, one atomic per block",
                    f"__global__ void {red}(const float* __restrict__ p, const float* __restrict__ t, "
                    "double* __restrict__ acc, int64_t total) {",
                    "    double local = 0.0;",
                    "    const int64_t step = (int64_t)gridDim.x * blockDim.x;",
                    "    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) "
                    "local += loss_term(p[i], t[i]);",
                    *sum_block,
                    "}",
                ])
                c("const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 1024);")
                self.launch(c, red, "(unsigned)blocks", "threads",
                            [f"{p}_c.data_ptr<float>()", f"{q}_c.data_ptr<float>()", "acc.data_ptr<double>()", "total"])
            self.launch(c, finish, "1", "1", ["acc.data_ptr<double>()", "out.data_ptr<float>()", denom])
        else:
            c(f"const int64_t rows = {p}_c.size(0), cols = {p}_c.size(1);")
            name = self.kname("rows")
            if loss == "cross_entropy":
                if slow:
                    row = [
                        "    const float* x = p + r * cols;",
                        "    float m = x[0];",
                        "    for (int64_t j = 1; j < cols; ++j) m = fmaxf(m, x[j]);",
                        "    double s = 0.0;",
                        "    for (int64_t j = 0; j < cols; ++j) s += expf(x[j] - m);",
                        "    local = (double)m + log(s) - x[t[r]];",
                    ]
                else:
                    row = [
                        "    const float* x = p + r * cols;",
                        "    __shared__ float red[32];",
                        "    float m = -INFINITY;",
                        "    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, x[j]);",
                        "    m = block_max(m, red);",
                        "    float s = 0.0f;",
                        "    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += expf(x[j] - m);",
                        "    s = block_sum(s, red);",
                        "    if (threadIdx.x == 0) atomicAdd(acc, (double)(m + logf(s) - x[t[r]]));",
                    ]
            else:
                if slow:
                    row = [
                        "    const float* a = p + r * cols;",
                        "    const float* b = t + r * cols;",
                        "    double dot = 0.0, na = 0.0, nb = 0.0;",
                        "    for (int64_t j = 0; j < cols; ++j) dot += (double)a[j] * b[j];",
                        "    for (int64_t j = 0; j < cols; ++j) na += (double)a[j] * a[j];",
                        "    for (int64_t j = 0; j < cols; ++j) nb += (double)b[j] * b[j];",
                        "    local = 1.0 - dot / (fmax(sqrt(na), 1e-8) * fmax(sqrt(nb), 1e-8));",
                    ]
                else:
                    row = [
                        "    const float* a = p + r * cols;",
                        "    const float* b = t + r * cols;",
                        "    __shared__ float red[32];",
                        "    float dot = 0.0f, na = 0.0f, nb = 0.0f;",
                        "    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {",
                        "        dot += a[j] * b[j];",
                        "        na += a[j] * a[j];",
                        "        nb += b[j] * b[j];",
                        "    }",
                        "    dot = block_sum(dot, red);",
                        "    na = block_sum(na, red);",
                        "    nb = block_sum(nb, red);",
                        "    if (threadIdx.x == 0) atomicAdd(acc, 1.0 - (double)dot / (fmax(sqrt((double)na), 1e-8) * "
                        "fmax(sqrt((double)nb), 1e-8)));",
                    ]
            head = (f"__global__ void {name}(const float* __restrict__ p, const {t_type}* __restrict__ t, "
                    "double* __restrict__ acc, int64_t rows, int64_t cols) {")
            if slow:
                reduce = self.kname("sum")
                self.add_kernel([
                    "// one thread per row, the row's value stored; a second kernel adds them",
                    head.replace("double* __restrict__ acc", "double* __restrict__ per_row"),
                    "    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;",
                    "    if (r >= rows) return;",
                    "    double local = 0.0;",
                    *row,
                    "    per_row[r] = local;",
                    "}",
                    "",
                    f"__global__ void {reduce}(const double* __restrict__ per_row, double* __restrict__ acc, int64_t rows) {{",
                    "    double local = 0.0;",
                    "    for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) local += per_row[i];",
                    *sum_block,
                    "}",
                ])
                c(f"torch::Tensor per_row = torch::empty({{rows}}, {p}_c.options().dtype(torch::kFloat64));")
                self.launch(c, name, "(unsigned)((rows + threads - 1) / threads)", "threads",
                            [f"{p}_c.data_ptr<float>()", f"{q}_c.data_ptr<{t_type}>()", "per_row.data_ptr<double>()",
                             "rows", "cols"])
                self.launch(c, reduce, "1", "threads", ["per_row.data_ptr<double>()", "acc.data_ptr<double>()", "rows"])
            else:
                self.need_block()
                self.add_kernel([
                    "// one block per row, warp-shuffle reductions, one atomic per row",
                    head,
                    "    const int64_t r = blockIdx.x;",
                    *row,
                    "}",
                ])
                self.launch(c, name, "(unsigned)rows", "threads",
                            [f"{p}_c.data_ptr<float>()", f"{q}_c.data_ptr<{t_type}>()", "acc.data_ptr<double>()",
                             "rows", "cols"])
            self.launch(c, finish, "1", "1", ["acc.data_ptr<double>()", "out.data_ptr<float>()", "(double)rows"])
        c("return out;")


# ===================================================================================================
# Feedback, refinements, the corpus

_TOLERANCE = "(tolerance 0.001 x rms(ref) + 0.001 x |ref|)"


def _reference_run(task: Task, backend: str) -> Any:
    """The reference model and the shape of its output at ``backend``'s sizes, without computing anything
    (fake tensors); None when that fails."""
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError:  # pragma: no cover - torch is a dependency of the project
        return None
    try:
        with FakeTensorMode():
            ns: dict[str, Any] = {}
            exec(compile(task.source_for(backend), task.task_id, "exec"), ns)  # noqa: S102 - the task's own program
            model = ns["Model"](*ns["get_init_inputs"]())
            out = model(*ns["get_inputs"]())
        return model, tuple(int(d) for d in out.shape)
    except Exception:  # noqa: BLE001 - a best-effort size for the feedback text
        return None


def _missing_count(short: str, shape: tuple[int, ...], plan: _Plan, model: Any) -> int:
    """How many output elements the off-by-one answer leaves unwritten (NaN in the sandbox's checks)."""
    numel = 1
    for d in shape:
        numel *= d
    if not shape:
        return 1

    def prod(ds: Sequence[int]) -> int:
        out = 1
        for d in ds:
            out *= d
        return out

    if short in ("the last element", "the last pooled element", "the last channel's mean"):
        return 1
    if short in ("the last column", "the last output column of every row"):
        return numel // max(shape[-1], 1)
    if short == "the last row of the output":
        return shape[-1]
    if short == "the last row of each matrix of the output":
        return numel // max(shape[-2], 1) if len(shape) >= 2 else 1
    if short == "the last element of every output plane":
        return prod(shape[:2])
    if short == "the last pooled plane":
        return prod(shape[2:])
    if short == "the last channel":
        return numel // max(shape[1], 1) if len(shape) > 1 else 1
    if short == "the last sample":
        return numel // max(shape[0], 1)
    fdim = plan.fdim
    if not _is_literal(fdim):
        fdim = str(getattr(model, "dim", 1))
    f = int(fdim)
    last = plan.stages[-1] if plan.stages else None
    reduced_away = last is not None and last.op in _REDUCES and not last.keepdim
    rank = len(shape) + (1 if reduced_away else 0)
    f = f + rank if f < 0 else f
    if short == "the last slice along the first dim":
        return numel // max(prod(shape[:f]), 1)
    if short in ("the last line", "the last row"):
        return 1 if reduced_away or (last is not None and last.op in _REDUCES) else shape[min(f, len(shape) - 1)]
    if short == "the last normalised group":
        if plan.layout in ("mat", "bmm") or len(shape) == 2:
            return shape[-1]
        return numel // max(shape[0], 1)
    return max(1, numel // max(shape[0], 1))


def _drop_stats(plan: _Plan, line: int) -> tuple[int, int, float] | None:
    """(elements off, elements, max rel error) of the reference with forward statement ``line`` removed, at the
    CPU sizes with a fixed seed: what the sandbox reports for a missing operator."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        return None
    tree = ast.parse(plan.task.source_for("cpu"))
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    fwd = next(n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    body = [s for s in fwd.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if line >= len(body) or isinstance(body[line], ast.Return):
        return None
    reduced = ast.parse(ast.unparse(tree))
    m2 = next(n for n in reduced.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    f2 = next(n for n in m2.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    keep = [s for s in f2.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    f2.body = [s for i, s in enumerate(keep) if i != line]
    try:
        outs = []
        for src in (ast.unparse(tree), ast.unparse(reduced)):
            ns: dict[str, Any] = {}
            exec(compile(src, plan.task.task_id, "exec"), ns)  # noqa: S102 - the task's own program
            torch.manual_seed(0)
            m = ns["Model"](*ns["get_init_inputs"]())
            torch.manual_seed(1)
            inputs = ns["get_inputs"]()
            with torch.no_grad():
                outs.append(m(*inputs).double())
        ref, out = outs
        if ref.shape != out.shape:
            return None
        d = (out - ref).abs()
        scale = float(ref.pow(2).mean().sqrt())
        tol = 1e-3 * scale + 1e-3 * ref.abs()
        rel = d / ref.abs().clamp(min=scale if scale > 0 else 1e-30)
        return int((d > tol).sum()), ref.numel(), float(rel.max())
    except Exception:  # noqa: BLE001 - a best-effort figure for the feedback text
        return None


def _program_line(code: str, unit_var: str, source_line: int) -> tuple[int, int]:
    """(line inside the source string as load_inline's unit counts it, line of the whole program) of line
    ``source_line`` (0-based) of the C++/CUDA text held by ``unit_var``."""
    lines = code.split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith(f"{unit_var} = r\"\"\""))
    k = source_line + 2  # the string starts with the newline after r\"\"\"
    return k, start + k


def _feedback(plan: _Plan, answer: Answer, backend: str) -> str:
    """Feedback worded like the sandbox's (kevin.sandbox.feedback) for a first attempt ``answer``."""
    d = answer.detail
    key = f"{answer.task_id}:{backend}:{answer.kind}"
    if answer.kind == "format_error":
        from kevin.sandbox import check_format

        violations = check_format(answer.code, backend=backend)
        body = "\n".join(f"- {v}" for v in violations[:8])
        return f"Format error: your program was rejected before compiling.\n{body}"
    if answer.kind == "compile_error":
        unit = d["unit"]
        var = f"{plan.slug}_source" if backend == "cpu" else f"{plan.slug}_cuda_source"
        k, p = _program_line(answer.code, var, d["source_line"])
        code_line = answer.code.split("\n")[p - 1]
        col = code_line.find(d["typo"])
        if backend == "cpu":  # gcc: the line, then a caret under the name
            msg = f"error: \u2018{d['typo']}\u2019 was not declared in this scope"
            caret = " " * col + "^" + "~" * (len(d["typo"]) - 1)
        else:  # nvcc
            msg = f'error: identifier "{d["typo"]}" is undefined'
            caret = " " * col + "^"
        return (f"Compilation failed. The first errors:\n{unit} line {k} (your program line {p}): {msg}\n"
                f"{code_line}\n{caret}")
    run = _reference_run(plan.task, backend)
    model, shape = run if run is not None else (None, ())
    numel = 1
    for s in shape:
        numel *= s
    if answer.kind == "off_by_one":
        k = _missing_count(d["short"], shape, plan, model) if shape else 1
        if plan.out_long:  # integers cannot hold a NaN: the unwritten elements are compared exactly
            return (f"Incorrect: input set 0 (task): output differs from the reference in {k} of {numel or k} "
                    "elements (exact match required).")
        exact = plan.main.op == "input" and all(s.kind == "ew" for s in plan.stages)
        err = "0" if exact else _pick(key, ("1.2e-07", "2.4e-07", "5.9e-08", "3.6e-07"))
        return (f"Incorrect: input set 0 (task): output has NaN/inf in {k} of {numel or k} elements where the "
                f"reference does not (or misses the reference's NaN/inf) (max rel error {err}).")
    if answer.kind == "missing_op":
        stats = _drop_stats(plan, d["dropped_line"]) if d.get("dropped_line") is not None else None
        if stats is None:
            n_bad, total, err = numel, numel, 1.0
        else:
            n_bad, total, err = stats
            if backend != "cpu" and numel and total:
                n_bad, total = max(1, round(n_bad * numel / total)), numel
        return (f"Incorrect: input set 0 (task): output differs from the reference in {n_bad} of {total} elements: "
                f"max rel error {err:.2g} {_TOLERANCE}.")
    raise ValueError(f"no feedback for a {answer.kind} answer")


def _correct_feedback(answer: Answer, salt: str, speedup_of: Any) -> str:
    """The sandbox's feedback on a correct ``answer``, with illustrative times (no measurement is made here): a
    reference time and the speedup ``speedup_of(u)``, both from a hash of the task, backend and ``salt`` (u: an
    integer of 22 bits of it)."""
    h = int.from_bytes(hashlib.sha256(f"{answer.task_id}:{answer.backend}:{salt}".encode()).digest()[:4], "little")
    baseline = (0.05 + (h % 1000) / 400.0) if answer.backend == "cpu" else (0.1 + (h % 1000) / 250.0)
    speedup = speedup_of(h >> 10)
    return (f"Correct. Your kernel took {baseline / speedup:.4g} ms against {baseline:.4g} ms for the PyTorch "
            f"reference: a speedup of {speedup:.2f}x.")


def _speed_feedback(answer: Answer) -> str:
    """Feedback for a correct but slow first attempt: a speedup in [0.08, 0.68)."""
    return _correct_feedback(answer, "speed", lambda u: 0.08 + (u % 600) / 1000.0)


def _keep_feedback(answer: Answer) -> str:
    """Feedback for a correct attempt that already beats the reference: a speedup log-uniform in [1.1, 150] (on
    small problems, where PyTorch's own overhead dominates the reference's time, kernels reach 100x)."""
    return _correct_feedback(answer, "keep", lambda u: 1.1 * (150 / 1.1) ** ((u % 1000) / 999))


def _fix_thought(plan: _Plan, answer: Answer, fixed: Answer, feedback: str, backend: str) -> tuple[str, str]:
    """(thought, summary) of the answer that fixes ``answer`` after ``feedback``."""
    d = answer.detail
    variant = fixed.kind
    recap = _thought(plan, plan.stages, variant, backend)
    if answer.kind == "off_by_one":
        head = (f"The feedback says some output elements are NaN where the reference has none: those elements "
                f"were never written. Checking my loop bounds, the final loop stops one short, so {d['short']} "
                "is skipped. The fix is the full bound; the rest of the kernel was right.")
        tail = f"Fixed the loop bound that skipped {d['short']}."
    elif answer.kind == "missing_op":
        head = (f"Wrong values across most of the output, so this is not rounding. Going through the reference "
                f"step by step against my kernel: I left out one operator, {d['dropped']}. I'll put it back in "
                "its place in the chain.")
        tail = f"Added the missing step ({d['dropped']})."
    elif answer.kind == "compile_error":
        head = (f"The compiler stops at `{d['typo']}`: a typo, the variable I declared is `{d['name']}`. That is "
                "the only error, so fixing the name is enough.")
        tail = f"Fixed the misspelt identifier (`{d['typo']}` -> `{d['name']}`)."
    elif answer.kind == "format_error":
        if d.get("style") == "fallback":
            head = ("The program was rejected before compiling: forward calls PyTorch in its fallback branch, and "
                    "nothing may be computed with PyTorch operators. The fallback is unnecessary anyway: the kernel "
                    "makes its inputs contiguous itself. I'll drop it.")
            tail = "Removed the PyTorch fallback; every input goes through the kernel."
        elif d.get("style") == "prologue":
            head = (f"The program was rejected before compiling: forward computes {d['torch_step']} with PyTorch, "
                    "and every operator has to run in my own code. I'll write it in the kernel as well.")
            tail = f"{d['torch_step'][0].upper() + d['torch_step'][1:]} now runs in the kernel too."
        else:
            head = (f"The program was rejected before compiling: forward applies {d['torch_step']} with PyTorch, "
                    "and every operator has to run in my own code. I'll move it into the kernel.")
            tail = f"{d['torch_step'][0].upper() + d['torch_step'][1:]} now runs in the kernel too."
    else:
        raise ValueError(answer.kind)
    return f"{head} {recap}", f"{tail} {fixed.summary}"


_FIRST_VERSION, _LAST_VERSION = "My first version used", "My last version used"  # a speed-up's thought, by its turn


def refinement_examples(task: Task, backend: str, answers: Sequence[Answer] | None = None) -> list[Example]:
    """Second-turn examples for ``task``: the prompt shows one earlier attempt with its feedback, the answer fixes
    it, speeds it up or keeps it.

    One example per flawed answer (its fix: the correct program of the same variant), one for the slow answer
    (feedback "Correct ... speedup 0.xx", answer: the fast program) and one for the fast answer (feedback
    "Correct ... speedup above 1", answer: the same program again, kind ``keep``). The prompt is
    ``build_messages(task, [Attempt(code, summary, feedback)], backend=backend)``; feedback is worded like the
    sandbox's (format errors are the real `check_format` messages; counts and errors of incorrect answers come
    from the reference at the CPU sizes; the times of a correct attempt are illustrative). The thoughts never
    restate the feedback's numbers: a small starter that copies digits from its prompt repeats them ("24.7777...")
    until the response ends inside the thought. ``answers``: `kernel_answers(task, backend)` when None.
    """
    if answers is None:
        answers = kernel_answers(task, backend)
    if not answers:
        return []
    plan = _plan_for(task)
    by_kind = {a.kind: a for a in answers}
    out = []
    for a in answers:
        if a.kind in FLAWED_KINDS:
            fixed = by_kind.get(a.detail.get("base", "fast"))
            if fixed is None:
                continue
            feedback = _feedback(plan, a, backend)
            thought, summary = _fix_thought(plan, a, fixed, feedback, backend)
            text = _response(thought, fixed.code, summary)
            attempts = (Attempt(a.code, a.summary, feedback),)
            msgs = build_messages(task, list(attempts), backend=backend)
            out.append(Example(msgs, text, f"fix_{a.kind}", fixed.expected, task.task_id, backend, 2, attempts))
    if "slow" in by_kind and "fast" in by_kind:
        slow, fast = by_kind["slow"], by_kind["fast"]
        feedback = _speed_feedback(slow)
        before = _main_plan_text(plan, "slow", backend) or _stage_plan_text(plan, plan.stages, "slow", backend)
        head = ("Correct, but slower than the reference, so the structure has to change, not the details. "
                f"{_FIRST_VERSION} {before}.")
        thought = f"{head} {_thought(plan, plan.stages, 'fast', backend)}"
        text = _response(thought, fast.code, fast.summary)
        attempts = (Attempt(slow.code, slow.summary, feedback),)
        msgs = build_messages(task, list(attempts), backend=backend)
        out.append(Example(msgs, text, "speedup", "correct", task.task_id, backend, 2, attempts))
    if "fast" in by_kind:
        fast = by_kind["fast"]
        thought = ("Correct, and faster than the reference: this is already the structure I would choose, so I keep "
                   f"it. {_thought(plan, plan.stages, 'fast', backend)}")
        text = _response(thought, fast.code, fast.summary)
        attempts = (Attempt(fast.code, fast.summary, _keep_feedback(fast)),)
        msgs = build_messages(task, list(attempts), backend=backend)
        out.append(Example(msgs, text, "keep", "correct", task.task_id, backend, 2, attempts))
    return out


def _refinement_group(example: Example) -> str:
    """Which share of `Mix` a refinement example counts towards: "speedup", "keep" or "fix"."""
    return example.kind if example.kind in ("speedup", "keep") else "fix"


def build_corpus(tasks: Sequence[Task], backend: str, *, seed: int, mix: Mix | None = None,
                 per_task: int = 4) -> list[Example]:
    """A supervised corpus for ``backend``: first turns and refinements over ``tasks``, deterministic for ``seed``.

    First turns: ``per_task`` per task with answers (tasks no template covers are skipped); exactly
    ``round(N * mix.correct_share)`` of the N first turns are correct, the kinds within each group drawn by
    the weights of ``mix.first_turn`` among the kinds the task has (a task's answers are used before any
    repeats). Refinements: ``round(N * share / (1 - share))`` of them (``share = mix.refinement_share``),
    ``mix.refinement_speedup`` of those slow-to-fast, ``mix.refinement_keep`` a fast attempt kept, at most one of
    each per task (a share beyond one a task goes to fixes), both dealt over the tasks in the same shuffled order, so
    the tasks of the smaller share also have the larger's; the rest fix flawed attempts, tasks taken in a round
    robin. Then ``round(R * mix.deeper_refinements)`` of the R refinements, drawn at random, get one or two failed
    attempts before theirs (`deeper_example`). The result is shuffled.

    >>> from kevin.data.builtin import builtin_tasks
    >>> ex = build_corpus(builtin_tasks(names=["ReLU", "Gemm_ReLU_Divide"]), "cpu", seed=0)
    >>> sorted({e.turn for e in ex}), len(ex)
    ([1, 2], 11)
    """
    mix = mix or Mix()
    rng = random.Random(seed)
    pool = [(t, kernel_answers(t, backend)) for t in tasks]
    pool = [(t, a) for t, a in pool if a]
    if not pool:
        return []
    n_first = per_task * len(pool)
    n_correct = round(n_first * mix.correct_share)
    labels = [True] * n_correct + [False] * (n_first - n_correct)
    rng.shuffle(labels)
    examples: list[Example] = []
    slot = 0
    for task, answers in pool:
        used: set[str] = set()
        by_kind = {a.kind: a for a in answers}
        prompt = build_messages(task, backend=backend)
        for _ in range(per_task):
            group = CORRECT_KINDS if labels[slot] else FLAWED_KINDS
            slot += 1
            kinds = [k for k in group if k in by_kind and mix.first_turn.get(k, 0) > 0]
            if not kinds:  # the task has no answer of this group: take the other group's
                kinds = [k for k in KINDS if k in by_kind and mix.first_turn.get(k, 0) > 0]
            fresh = [k for k in kinds if k not in used] or kinds
            kind = rng.choices(fresh, weights=[mix.first_turn[k] for k in fresh])[0]
            used.add(kind)
            a = by_kind[kind]
            examples.append(Example([dict(m) for m in prompt], a.text, a.kind, a.expected, task.task_id, backend, 1))
    share = mix.refinement_share
    n_ref = round(n_first * share / (1 - share)) if share < 1 else n_first
    n_speed = round(n_ref * mix.refinement_speedup)
    n_keep = round(n_ref * mix.refinement_keep)
    order = list(range(len(pool)))
    rng.shuffle(order)
    refinements: dict[int, list[Example]] = {}

    def options(idx: int) -> list[Example]:
        if idx not in refinements:
            refinements[idx] = refinement_examples(pool[idx][0], backend, pool[idx][1])
        return refinements[idx]

    # the correct attempts, paired: both passes walk the same task order, so a task given a keep also has its speedup
    # (or the other way round, for the smaller share); after either correct attempt its second turn is the fast program
    made = paired = 0
    for want, quota in (("speedup", n_speed), ("keep", n_keep)):
        got = walked = 0
        for idx in order:
            if got >= quota or made >= n_ref:
                break
            walked += 1
            group = [e for e in options(idx) if _refinement_group(e) == want]
            if group:
                examples.append(group[0])
                got += 1
                made += 1
        paired = max(paired, walked)
    turn = paired  # the rest fix flawed attempts, tasks in a round robin from the first task without a correct attempt
    while made < n_ref and turn < paired + 4 * n_ref + len(pool):
        idx = order[turn % len(order)]
        turn += 1
        group = [e for e in options(idx) if _refinement_group(e) == "fix"]
        if not group:
            continue
        weights = [mix.first_turn.get(e.kind[len("fix_"):], 0.0) or 1e-6 for e in group]
        examples.append(rng.choices(group, weights=weights)[0])
        made += 1
    refined = [i for i, e in enumerate(examples) if e.turn > 1]
    if n_deep := round(len(refined) * mix.deeper_refinements):  # (with none, the seed's draws are those of before)
        pools = {t.task_id: (t, a) for t, a in pool}
        for i in sorted(rng.sample(refined, n_deep)):
            examples[i] = deeper_example(examples[i], *pools[examples[i].task_id], rng)
    rng.shuffle(examples)
    return examples


def deeper_example(example: Example, task: Task, answers: Sequence[Answer], rng: random.Random) -> Example:
    """``example`` (a refinement) with one or two more earlier attempts in its prompt, before its own: flawed answers
    of ``task`` (other programs than the attempts already there) with their feedback, as a trajectory's failed turns
    would appear. The answer still responds to the last attempt (a speed-up's thought names it the last version, not
    the first). Unchanged when the task has no other flawed answer."""
    seen = {a.code for a in example.attempts}
    flawed = [a for a in answers if a.kind in FLAWED_KINDS and a.code not in seen]
    if not flawed:
        return example
    plan = _plan_for(task)
    earlier = rng.sample(flawed, min(len(flawed), rng.choice((1, 2))))
    attempts = (*(Attempt(a.code, a.summary, _feedback(plan, a, example.backend)) for a in earlier), *example.attempts)
    answer = example.answer.replace(_FIRST_VERSION, _LAST_VERSION, 1) if example.kind == "speedup" else example.answer
    return replace(example, messages=build_messages(task, list(attempts), backend=example.backend), answer=answer,
                   attempts=attempts, turn=len(attempts) + 1)


def coverage(tasks: Sequence[Task] | None = None) -> dict[str, dict[str, Any]]:
    """For each backend: how many of ``tasks`` (default: the built-in suite) have answers, by level, and how
    many answers of each kind there are."""
    if tasks is None:
        from kevin.data.builtin import builtin_tasks

        tasks = builtin_tasks()
    out: dict[str, dict[str, Any]] = {}
    for backend in BACKENDS:
        by_level: dict[str, list[int]] = {}
        kinds: dict[str, int] = {k: 0 for k in KINDS}
        missing = []
        for t in tasks:
            answers = kernel_answers(t, backend)
            level = f"level {t.level}"
            have, total = by_level.get(level, [0, 0])
            by_level[level] = [have + bool(answers), total + 1]
            for a in answers:
                kinds[a.kind] += 1
            if not answers:
                missing.append(t.task_id)
        out[backend] = {"tasks": {k: tuple(v) for k, v in sorted(by_level.items())}, "kinds": kinds,
                        "without_answers": missing}
    return out


def _main() -> None:
    for backend, info in coverage().items():
        tasks = ", ".join(f"{level}: {have}/{total}" for level, (have, total) in info["tasks"].items())
        kinds = ", ".join(f"{k} {n}" for k, n in info["kinds"].items())
        print(f"{backend}: tasks with answers ({tasks}); answers: {kinds}")
        if info["without_answers"]:
            print(f"  no template: {', '.join(info['without_answers'])}")


if __name__ == "__main__":
    _main()
