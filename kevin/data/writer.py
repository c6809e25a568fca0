"""The program writer: the paper's Appendix A op vocabulary, rendered as KernelBench programs.

A program is one main (expensive) op followed by others from the vocabulary. Each op knows when it
applies to the current tensor (``_Builder.dims``, tracked symbolically as expressions of the
module-level size constants, and concretely for the GPU and the CPU sizes) and what it adds to
``__init__``, ``forward`` and the module constants. The source is KernelBench format (``Model``,
``get_inputs``, ``get_init_inputs``) with GPU sizes in the constants and CPU sizes in
``Task.sizes["cpu"]``.

Every choice an op makes (a size, a constant, a clamp range) comes from a small menu:
with a ``random.Random`` the writer picks at random (``kevin.data.synth`` samples programs this
way), without one it takes each menu's first entry (``render_task``, which rendered the built-in
level-2 files). The writer runs nothing: whether a program is informative and slow enough is
``kevin.data.synth``'s concern.

>>> render_task(["Gemm", "ReLU", "BiasAdd"]).name
'Gemm_ReLU_BiasAdd'
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from kevin.data.task import Task

MAIN_OPS = ("Conv2d", "Matmul", "Gemm", "BMM", "Conv3d", "ConvTranspose2d", "ConvTranspose3d")
ACTIVATIONS = ("ReLU", "Sigmoid", "Tanh", "LeakyReLU", "GELU", "Swish", "Softmax", "Mish", "Hardtanh", "HardSwish")
ELEMENTWISE = ("Add", "Multiply", "Subtract", "Divide", "Clamp", "Scaling", "ResidualAdd")
NORMALIZATIONS = ("BatchNorm", "LayerNorm", "InstanceNorm", "GroupNorm")
POOLING = ("MaxPool", "AvgPool", "GlobalAvgPool")
BIAS = ("BiasAdd",)
REDUCTIONS = ("Sum", "Mean", "Max", "Min", "LogSumExp")
OTHER_OPS = ACTIVATIONS + ELEMENTWISE + NORMALIZATIONS + POOLING + BIAS + REDUCTIONS


class NotApplicable(Exception):
    """An op cannot follow the program built so far (wrong tensor kind or a dimension too small)."""


# ---------------------------------------------------------------------------------------------------
# The program under construction


@dataclass
class _Builder:
    """Mutable scratch state while one program is written; ``finish_program`` freezes it into a Task.

    ``kind`` is the tensor layout: "img2d" [N, C, H, W], "img3d" [N, C, D, H, W], "mat" [N, F] or
    "bmm" [B, M, N]. ``dims`` holds one Python expression per dimension over the module constants
    (e.g. ``"height * 2"``), so derived shapes in the source follow the CPU overrides automatically.
    """

    rng: random.Random | None
    kind: str = ""
    dims: list[str] = field(default_factory=list)
    consts: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # name -> (gpu, cpu)
    derived: list[tuple[str, str]] = field(default_factory=list)  # module-level name = expression
    init_args: list[str] = field(default_factory=list)
    init_lines: list[str] = field(default_factory=list)
    forward_args: list[str] = field(default_factory=list)
    forward_lines: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    phrases: list[str] = field(default_factory=list)
    residual_dims: list[str] | None = None
    residual_used: bool = False
    _names: set[str] = field(default_factory=set)

    # -- choices: random with an rng, the menu's first entry without one (the built-in suite) --
    def choose(self, menu: Sequence[Any]) -> Any:
        return menu[0] if self.rng is None else self.rng.choice(list(menu))

    # -- names --
    def unique(self, name: str) -> str:
        out, i = name, 2
        while out in self._names:
            out, i = f"{name}_{i}", i + 1
        self._names.add(out)
        return out

    def const(self, name: str, gpu: Any, cpu: Any) -> str:
        """A module-level size constant with its GPU value in the source and its CPU override."""
        name = self.unique(name)
        self.consts[name] = (gpu, cpu)
        return name

    def module_value(self, name: str, expr: str, *, init_arg: bool = True) -> str:
        """A module-level derived value (``bias_shape = (out_channels, 1, 1)``), passed to __init__."""
        name = self.unique(name)
        self.derived.append((name, expr))
        if init_arg:
            self.init_args.append(name)
        return name

    # -- sizes --
    def namespace(self, backend: str) -> dict[str, Any]:
        idx = 0 if backend == "cuda" else 1
        ns: dict[str, Any] = {k: v[idx] for k, v in self.consts.items()}
        for name, expr in self.derived:
            ns[name] = eval(expr, {"__builtins__": {}}, ns)  # noqa: S307 - our own expressions
        return ns

    def size(self, expr: str, backend: str) -> int:
        return int(eval(expr, {"__builtins__": {}}, self.namespace(backend)))  # noqa: S307

    def sizes(self, exprs: Iterable[str]) -> list[tuple[int, int]]:
        """(gpu, cpu) value of each expression."""
        return [(self.size(e, "cuda"), self.size(e, "cpu")) for e in exprs]

    def min_size(self, exprs: Iterable[str]) -> int:
        """The smaller of the GPU and CPU products of ``exprs`` (1 for none)."""
        gpu = cpu = 1
        for g, c in self.sizes(exprs):
            gpu, cpu = gpu * g, cpu * c
        return min(gpu, cpu)

    # -- the tensor layout --
    @property
    def feature_dim(self) -> int:
        """The dim that softmax and the reductions act on: channels / features, or the last of bmm."""
        return 2 if self.kind == "bmm" else 1

    @property
    def spatial(self) -> list[str]:
        return self.dims[2:] if self.kind in ("img2d", "img3d") else []

    def param_shape(self) -> str:
        """Shape of a per-feature parameter that broadcasts against the current tensor."""
        if self.kind in ("img2d", "img3d"):
            return "(" + ", ".join([self.dims[1]] + ["1"] * len(self.spatial)) + ")"
        return f"({self.dims[-1]},)"

    def dim_arg(self) -> str:
        return "-1" if self.kind == "bmm" else "1"

    def input_expr(self, *dims: str) -> str:
        """A signed input with a random scale in [0.5, 1.5) per sample (dim 0), so that averages over
        the other dims (global pooling, reductions) still depend on the input."""
        ones = ", ".join(["1"] * (len(dims) - 1))
        return f"torch.randn({', '.join(dims)}) * (0.5 + torch.rand({dims[0]}, {ones}))"

    # -- code --
    def layer(self, attr: str, ctor: str) -> str:
        attr = self.unique(attr)
        self.init_lines.append(f"self.{attr} = {ctor}")
        return attr

    def emit(self, line: str) -> None:
        self.forward_lines.append(line)

    def add_op(self, op: str, phrase: str) -> None:
        self.ops.append(op)
        self.phrases.append(phrase)

    # -- the finished program --
    def render(self) -> str:
        doc = _sentence(self.phrases)
        fwd = list(self.forward_lines)
        if self.residual_used:
            fwd.insert(1, "residual = x")
        lines = [
            "import torch",
            "import torch.nn as nn",
            "import torch.nn.functional as F",
            "",
            "",
            "class Model(nn.Module):",
            f'    """{doc}"""',
            "",
            f"    def __init__(self{''.join(', ' + a for a in self.init_args)}):",
            "        super().__init__()",
            *("        " + s for s in self.init_lines),
            "",
            f"    def forward(self, {', '.join(self.forward_args)}):",
            *("        " + s for s in fwd),
            "        return x",
            "",
            "",
            *(f"{k} = {v[0]!r}" for k, v in self.consts.items()),
            *(f"{k} = {e}" for k, e in self.derived),
            "",
            "",
            "def get_inputs():",
            f"    return [{', '.join(self.inputs)}]",
            "",
            "",
            "def get_init_inputs():",
            f"    return [{', '.join(self.init_args)}]",
            "",
        ]
        return "\n".join(lines)

    def cpu_sizes(self) -> dict[str, Any]:
        return {k: v[1] for k, v in self.consts.items() if v[1] != v[0]}


def _sentence(phrases: Sequence[str]) -> str:
    """["A", "b", "c"] -> "A, then b, then c." """
    return ", then ".join(phrases) + "."


# ---------------------------------------------------------------------------------------------------
# Main ops: each starts a program and sets its sizes.
# Menus: GPU values (first = default) sized so that eager PyTorch on an H200 takes well over 0.1 ms;
# CPU values so that the whole program runs in a few milliseconds on 2 cores.


def _main_conv2d(b: _Builder) -> None:
    n = b.const("batch_size", b.choose([32, 16]), 2)
    cin = b.const("in_channels", b.choose([64, 32]), 4)
    cout = b.const("out_channels", b.choose([128, 64]), 16)
    h = b.const("height", b.choose([64, 128]), 16)
    w = b.const("width", b.consts[h][0], 16)
    k = b.const("kernel_size", 3, 3)
    b.init_args += [cin, cout, k]
    b.layer("conv", f"nn.Conv2d({cin}, {cout}, {k}, padding={k} // 2)")
    b.forward_args, b.kind, b.dims = ["x"], "img2d", [n, cout, h, w]
    b.inputs.append(b.input_expr(n, cin, h, w))
    b.emit("x = self.conv(x)")
    b.add_op("Conv2d", "A 2D convolution (same padding)")


def _main_conv3d(b: _Builder) -> None:
    n = b.const("batch_size", b.choose([16, 8]), 2)
    cin = b.const("in_channels", b.choose([16, 32]), 3)
    cout = b.const("out_channels", b.choose([32, 64]), 8)
    d = b.const("depth", b.choose([16, 8]), 4)
    h = b.const("height", b.choose([32, 64]), 8)
    w = b.const("width", b.consts[h][0], 8)
    k = b.const("kernel_size", 3, 3)
    b.init_args += [cin, cout, k]
    b.layer("conv", f"nn.Conv3d({cin}, {cout}, {k}, padding={k} // 2)")
    b.forward_args, b.kind, b.dims = ["x"], "img3d", [n, cout, d, h, w]
    b.inputs.append(b.input_expr(n, cin, d, h, w))
    b.emit("x = self.conv(x)")
    b.add_op("Conv3d", "A 3D convolution (same padding)")


def _main_conv_transpose2d(b: _Builder) -> None:
    n = b.const("batch_size", b.choose([16, 32]), 2)
    cin = b.const("in_channels", b.choose([64, 32]), 4)
    cout = b.const("out_channels", b.choose([64, 32]), 8)
    h = b.const("height", b.choose([64, 32]), 8)
    w = b.const("width", b.consts[h][0], 8)
    k = b.const("kernel_size", 3, 3)
    b.init_args += [cin, cout, k]
    # stride 2, padding 1, output_padding 1: out = (in - 1) * 2 - 2 + 3 + 1 = 2 * in
    b.layer("conv_transpose", f"nn.ConvTranspose2d({cin}, {cout}, {k}, stride=2, padding=1, output_padding=1)")
    b.forward_args, b.kind, b.dims = ["x"], "img2d", [n, cout, f"{h} * 2", f"{w} * 2"]
    b.inputs.append(b.input_expr(n, cin, h, w))
    b.emit("x = self.conv_transpose(x)")
    b.add_op("ConvTranspose2d", "A 2D transposed convolution (stride 2)")


def _main_conv_transpose3d(b: _Builder) -> None:
    n = b.const("batch_size", b.choose([16, 8]), 2)
    cin = b.const("in_channels", b.choose([32, 16]), 3)
    cout = b.const("out_channels", b.choose([16, 32]), 8)
    d = b.const("depth", 8, 2)
    h = b.const("height", b.choose([16, 32]), 4)
    w = b.const("width", b.consts[h][0], 4)
    k = b.const("kernel_size", 3, 3)
    b.init_args += [cin, cout, k]
    b.layer("conv_transpose", f"nn.ConvTranspose3d({cin}, {cout}, {k}, stride=2, padding=1, output_padding=1)")
    b.forward_args, b.kind, b.dims = ["x"], "img3d", [n, cout, f"{d} * 2", f"{h} * 2", f"{w} * 2"]
    b.inputs.append(b.input_expr(n, cin, d, h, w))
    b.emit("x = self.conv_transpose(x)")
    b.add_op("ConvTranspose3d", "A 3D transposed convolution (stride 2)")


def _linear(b: _Builder, *, bias: bool, op: str, phrase: str) -> None:
    n = b.const("batch_size", b.choose([1024, 512]), 16)
    fin = b.const("in_features", b.choose([4096, 2048]), 32)
    fout = b.const("out_features", b.choose([4096, 2048]), 64)
    b.init_args += [fin, fout]
    b.layer("linear", f"nn.Linear({fin}, {fout})" if bias else f"nn.Linear({fin}, {fout}, bias=False)")
    b.forward_args, b.kind, b.dims = ["x"], "mat", [n, fout]
    b.inputs.append(b.input_expr(n, fin))
    b.emit("x = self.linear(x)")
    b.add_op(op, phrase)


def _main_matmul(b: _Builder) -> None:
    _linear(b, bias=False, op="Matmul", phrase="A matrix multiplication with a learned weight (x @ W^T)")


def _main_gemm(b: _Builder) -> None:
    _linear(b, bias=True, op="Gemm", phrase="A GEMM (x @ W^T + b)")


def _main_bmm(b: _Builder) -> None:
    nb = b.const("batch_size", b.choose([64, 32]), 4)
    m = b.const("m", b.choose([512, 256]), 16)
    k = b.const("k", b.choose([512, 1024]), 32)
    n = b.const("n", b.choose([512, 256]), 16)
    b.forward_args, b.kind, b.dims = ["a", "b"], "bmm", [nb, m, n]
    b.inputs += [b.input_expr(nb, m, k), b.input_expr(nb, k, n)]
    b.emit("x = torch.bmm(a, b)")
    b.add_op("BMM", "A batched matrix multiplication")


MAIN_BUILDERS: dict[str, Callable[[_Builder], None]] = {
    "Conv2d": _main_conv2d,
    "Matmul": _main_matmul,
    "Gemm": _main_gemm,
    "BMM": _main_bmm,
    "Conv3d": _main_conv3d,
    "ConvTranspose2d": _main_conv_transpose2d,
    "ConvTranspose3d": _main_conv_transpose3d,
}


# ---------------------------------------------------------------------------------------------------
# Other ops: each checks that it applies (raising NotApplicable) and then writes its code.


def _need(cond: bool, why: str) -> None:
    if not cond:
        raise NotApplicable(why)


def _feature_size(b: _Builder) -> int:
    return b.min_size([b.dims[b.feature_dim]])


def _activation(code: str, phrase: str) -> Callable[[_Builder], str]:
    def apply(b: _Builder) -> str:
        b.emit(f"x = {code}")
        return phrase

    return apply


def _leaky_relu(b: _Builder) -> str:
    slope = b.module_value("negative_slope", repr(b.choose([0.1, 0.2, 0.05])))
    b.init_lines.append(f"self.{slope} = {slope}")
    b.emit(f"x = F.leaky_relu(x, negative_slope=self.{slope})")
    return "LeakyReLU"


def _hardtanh(b: _Builder) -> str:
    lo, hi = b.choose([(-1.0, 1.0), (-0.5, 0.5), (-2.0, 2.0)])
    lo_n = b.module_value("hardtanh_min", repr(lo))
    hi_n = b.module_value("hardtanh_max", repr(hi))
    b.init_lines += [f"self.{lo_n} = {lo_n}", f"self.{hi_n} = {hi_n}"]
    b.emit(f"x = F.hardtanh(x, min_val=self.{lo_n}, max_val=self.{hi_n})")
    return "Hardtanh"


def _softmax(b: _Builder) -> str:
    _need(_feature_size(b) >= 2, "softmax over a dimension of size 1 is constant")
    # a softmax over a long row has tiny entries that zeros would match under an absolute tolerance
    _need(b.sizes([b.dims[b.feature_dim]])[0][0] <= 512, "softmax over more than 512 values is tiny")
    b.emit(f"x = torch.softmax(x, dim={b.dim_arg()})")
    return "softmax over " + ("the last dim" if b.kind == "bmm" else "dim 1")


def _scalar_op(name: str, menu: Sequence[float], code: str, phrase: str) -> Callable[[_Builder], str]:
    def apply(b: _Builder) -> str:
        v = b.module_value(name, repr(b.choose(menu)))
        b.init_lines.append(f"self.{v} = {v}")
        b.emit(code.format(v=f"self.{v}"))
        return phrase

    return apply


def _clamp(b: _Builder) -> str:
    lo, hi = b.choose([(-1.0, 1.0), (-0.5, 0.5), (-0.25, 2.0)])
    lo_n = b.module_value("clamp_min", repr(lo))
    hi_n = b.module_value("clamp_max", repr(hi))
    b.init_lines += [f"self.{lo_n} = {lo_n}", f"self.{hi_n} = {hi_n}"]
    b.emit(f"x = torch.clamp(x, min=self.{lo_n}, max=self.{hi_n})")
    return "clamp"


def _multiply(b: _Builder) -> str:
    shape = b.module_value("multiplier_shape", b.param_shape())
    attr = b.unique("multiplier")
    b.init_lines.append(f"self.{attr} = nn.Parameter(torch.randn({shape}))")
    b.emit(f"x = x * self.{attr}")
    return "multiply by a learned per-feature tensor"


def _bias_add(b: _Builder) -> str:
    shape = b.module_value("bias_shape", b.param_shape())
    attr = b.unique("bias")
    b.init_lines.append(f"self.{attr} = nn.Parameter(torch.randn({shape}))")
    b.emit(f"x = x + self.{attr}")
    return "add a learned bias"


def _residual_add(b: _Builder) -> str:
    _need(b.residual_dims == b.dims, "the tensor changed shape since the main op")
    _need(b.ops[-1] != b.ops[0], "a residual add right after the main op only doubles it")
    b.residual_used = True
    b.emit("x = x + residual")
    return "add the main op's output back (residual)"


def _batch_norm(b: _Builder) -> str:
    _need(b.kind != "bmm", "no channel dim in a bmm output")
    # statistics per channel over the batch and the spatial dims
    _need(b.min_size([b.dims[0]] + b.spatial) >= 2, "batch norm over a single value")
    cls = {"img2d": "nn.BatchNorm2d", "img3d": "nn.BatchNorm3d", "mat": "nn.BatchNorm1d"}[b.kind]
    attr = b.layer("batch_norm", f"{cls}({b.dims[1]})")
    # statistics and affine parameters as a trained network has them: references are evaluated in
    # eval mode, where a fresh BatchNorm (mean 0, var 1, weight 1, bias 0) would be the identity
    b.init_lines += [
        f"nn.init.uniform_(self.{attr}.running_mean, -0.5, 0.5)",
        f"nn.init.uniform_(self.{attr}.running_var, 0.5, 2.0)",
        f"nn.init.uniform_(self.{attr}.weight, 0.5, 1.5)",
        f"nn.init.uniform_(self.{attr}.bias, -0.5, 0.5)",
    ]
    b.emit(f"x = self.{attr}(x)")
    return "batch norm (running statistics)"


def _layer_norm(b: _Builder) -> str:
    normed = b.dims[-1:] if b.kind == "bmm" else b.dims[1:]
    _need(b.min_size(normed) >= 4, "layer norm over fewer than 4 values")
    shape = b.module_value("norm_shape", "(" + ", ".join(normed) + ("," if len(normed) == 1 else "") + ")")
    attr = b.layer("layer_norm", f"nn.LayerNorm({shape})")
    b.emit(f"x = self.{attr}(x)")
    return "layer norm over " + ("the last dim" if b.kind == "bmm" else "all but the batch dim")


def _instance_norm(b: _Builder) -> str:
    _need(b.kind in ("img2d", "img3d"), "instance norm needs spatial dims")
    _need(b.min_size(b.spatial) >= 4, "instance norm over fewer than 4 values")
    cls = "nn.InstanceNorm2d" if b.kind == "img2d" else "nn.InstanceNorm3d"
    attr = b.layer("instance_norm", f"{cls}({b.dims[1]})")
    b.emit(f"x = self.{attr}(x)")
    return "instance norm"


def _group_norm(b: _Builder) -> str:
    _need(b.kind != "bmm", "no channel dim in a bmm output")
    channels = b.sizes([b.dims[1]])[0]
    groups = [g for g in (8, 4, 2) if all(c % g == 0 and c // g * b.min_size(b.spatial) >= 4 and c > g for c in channels)]
    _need(bool(groups), "no group count divides the channels on both backends")
    g = b.module_value("num_groups", str(groups[0]))
    attr = b.layer("group_norm", f"nn.GroupNorm({g}, {b.dims[1]})")
    b.emit(f"x = self.{attr}(x)")
    return "group norm"


def _pool(kind: str) -> Callable[[_Builder], str]:
    def apply(b: _Builder) -> str:
        pooled = b.spatial if b.spatial else b.dims[-1:]
        _need(b.min_size(pooled) >= 2 and all(c >= 2 for gc in b.sizes(pooled) for c in gc), "nothing to pool")
        if b.kind == "img2d":
            b.emit(f"x = F.{kind}_pool2d(x, kernel_size=2)")
        elif b.kind == "img3d":
            b.emit(f"x = F.{kind}_pool3d(x, kernel_size=2)")
        elif b.kind == "bmm":
            b.emit(f"x = F.{kind}_pool1d(x, kernel_size=2)")
        else:  # [N, F] -> [N, 1, F] -> pool over F -> [N, F // 2]
            b.emit(f"x = F.{kind}_pool1d(x.unsqueeze(1), kernel_size=2).squeeze(1)")
        n_pooled = len(pooled)
        b.dims = b.dims[: len(b.dims) - n_pooled] + [f"{d} // 2" for d in pooled]
        return f"{kind} pooling (kernel 2)"

    return apply


def _global_avg_pool(b: _Builder) -> str:
    _need(b.kind in ("img2d", "img3d"), "global pooling needs spatial dims")
    _need(b.min_size(b.spatial) >= 2, "already pooled")
    # the spatial mean of a linear map (conv, affine norm) of zero-mean inputs or of a symmetric
    # activation barely depends on the input; after a one-sided activation it scales with it
    _need(b.ops[-1] in ("ReLU", "LeakyReLU", "GELU", "Swish", "Mish", "HardSwish"), "global mean of a near-zero-mean tensor")
    b.emit(f"x = torch.mean(x, dim={tuple(range(2, len(b.dims)))}, keepdim=True)")
    b.dims = b.dims[:2] + ["1"] * len(b.spatial)
    return "global average pooling"


def _reduction(code: str, phrase: str) -> Callable[[_Builder], str]:
    def apply(b: _Builder) -> str:
        _need(_feature_size(b) >= 2, "reduction over a dimension of size 1")
        b.emit("x = " + code.format(dim=b.dim_arg()))
        b.dims = list(b.dims)
        b.dims[b.feature_dim] = "1"
        return phrase + (" over the last dim" if b.kind == "bmm" else " over dim 1")

    return apply


OTHER_BUILDERS: dict[str, Callable[[_Builder], str]] = {
    "ReLU": _activation("torch.relu(x)", "ReLU"),
    "Sigmoid": _activation("torch.sigmoid(x)", "sigmoid"),
    "Tanh": _activation("torch.tanh(x)", "tanh"),
    "LeakyReLU": _leaky_relu,
    "GELU": _activation("F.gelu(x)", "GELU"),
    "Swish": _activation("x * torch.sigmoid(x)", "Swish (x * sigmoid(x))"),
    "Softmax": _softmax,
    "Mish": _activation("F.mish(x)", "Mish"),
    "Hardtanh": _hardtanh,
    "HardSwish": _activation("F.hardswish(x)", "HardSwish"),
    "Add": _scalar_op("add_value", [0.5, 1.0, -0.25], "x = x + {v}", "add a constant"),
    "Multiply": _multiply,
    "Subtract": _scalar_op("subtract_value", [0.5, 0.2, 1.5], "x = x - {v}", "subtract a constant"),
    "Divide": _scalar_op("divisor", [2.0, 3.0, 0.5], "x = x / {v}", "divide by a constant"),
    "Clamp": _clamp,
    "Scaling": _scalar_op("scale_factor", [2.0, 0.5, 1.5], "x = x * {v}", "scale by a constant"),
    "ResidualAdd": _residual_add,
    "BatchNorm": _batch_norm,
    "LayerNorm": _layer_norm,
    "InstanceNorm": _instance_norm,
    "GroupNorm": _group_norm,
    "MaxPool": _pool("max"),
    "AvgPool": _pool("avg"),
    "GlobalAvgPool": _global_avg_pool,
    "BiasAdd": _bias_add,
    "Sum": _reduction("torch.sum(x, dim={dim}, keepdim=True)", "sum"),
    "Mean": _reduction("torch.mean(x, dim={dim}, keepdim=True)", "mean"),
    "Max": _reduction("torch.amax(x, dim={dim}, keepdim=True)", "max"),
    "Min": _reduction("torch.amin(x, dim={dim}, keepdim=True)", "min"),
    "LogSumExp": _reduction("torch.logsumexp(x, dim={dim}, keepdim=True)", "log-sum-exp"),
}
assert set(OTHER_BUILDERS) == set(OTHER_OPS)


# ---------------------------------------------------------------------------------------------------
# Writing a program: begin with a main op, append others, finish into a Task


def begin_program(main: str, rng: random.Random | None = None) -> _Builder:
    """A program holding only ``main``; its menus are drawn from ``rng``, or their defaults without one."""
    if main not in MAIN_BUILDERS:
        raise ValueError(f"unknown main op {main!r}; expected one of {MAIN_OPS}")
    b = _Builder(rng=rng)
    MAIN_BUILDERS[main](b)
    b.residual_dims = list(b.dims)
    return b


def append_op(b: _Builder, op: str) -> None:
    """Append ``op`` to the program, or raise NotApplicable leaving ``b`` unchanged (so a sampler can
    try another op); an op outside the vocabulary is a ValueError."""
    if op not in OTHER_BUILDERS:
        raise ValueError(f"unknown op {op!r}; expected one of {OTHER_OPS}")
    snapshot = (list(b.dims), list(b.init_args), list(b.init_lines), list(b.forward_lines), list(b.derived), set(b._names), b.residual_used)
    try:
        phrase = OTHER_BUILDERS[op](b)
    except NotApplicable:
        b.dims, b.init_args, b.init_lines, b.forward_lines, b.derived, b._names, b.residual_used = snapshot
        raise
    b.add_op(op, phrase)


def finish_program(b: _Builder, *, task_id: str | None = None, level: int = 2, metadata: dict | None = None) -> Task:
    """The program as a Task named after its ops ("Gemm_ReLU_BiasAdd"); the id defaults to
    "syn-<hash of the source>", ``metadata`` is added to ``{"ops": ..., "origin": "kevin-synth"}``."""
    source = b.render()
    ops = tuple(b.ops)
    meta = {"ops": ops, "origin": "kevin-synth"}
    meta.update(metadata or {})
    tid = task_id or "syn-" + hashlib.sha1(source.encode()).hexdigest()[:10]
    return Task(task_id=tid, source=source, level=level, name="_".join(ops), sizes={"cpu": b.cpu_sizes()}, metadata=meta)


def render_task(ops: Sequence[str], *, task_id: str | None = None, level: int = 2, metadata: dict | None = None) -> Task:
    """Write the program for an explicit op sequence (main op first) with every menu's default.

    Raises NotApplicable when an op cannot follow the ones before it. The built-in level-2 files
    are this function's output (``kevin.data.builtin``).

    >>> render_task(["Gemm", "ReLU", "BiasAdd"]).sizes["cpu"]["batch_size"]
    16
    """
    b = begin_program(ops[0])
    for op in ops[1:]:
        append_op(b, op)
    return finish_program(b, task_id=task_id, level=level, metadata=metadata)


__all__ = [
    "MAIN_OPS",
    "OTHER_OPS",
    "NotApplicable",
    "append_op",
    "begin_program",
    "finish_program",
    "render_task",
]
