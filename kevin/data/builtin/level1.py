"""Level 1 of the built-in suite: single operators, written for kevin (not copied from KernelBench).

Each entry is ``(name, ops, split, cpu_sizes, source)``. The source holds the GPU sizes (eager
PyTorch on an H200 above 0.1 ms); ``cpu_sizes`` override the module constants for the CPU backend.

Inputs are chosen so that trivial answers fail (sandbox-threats.md 3.B): signed, shifted or
scaled distributions for ops that are the identity on non-negative inputs, normalisation inputs that
are not already normalised, softmax rows short or peaked enough that entries are not tiny, and for
the losses (scalar outputs) a fresh random scale per call with heavy-tailed rows, so no constant or
closed-form expectation matches every call. Families that share a shape are written from one
template, so every task reads as a complete KernelBench program.
"""

from __future__ import annotations

from textwrap import dedent

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"

# (name, ops, split, cpu sizes, source)
Spec = tuple[str, tuple[str, ...], str, dict, str]


def _src(body: str) -> str:
    return HEADER + dedent(body).strip() + "\n"


# ---------------------------------------------------------------------------------------------------
# Matrix multiplication

MATMUL: list[Spec] = [
    ("Square_matmul", ("Matmul",), "train", {"N": 128}, _src('''
        class Model(nn.Module):
            """C = A @ B for square N x N matrices."""

            def forward(self, A, B):
                return torch.matmul(A, B)


        N = 4096


        def get_inputs():
            return [torch.randn(N, N), torch.randn(N, N)]


        def get_init_inputs():
            return []
    ''')),
    ("Rectangular_matmul", ("Matmul",), "train", {"M": 64, "K": 128, "N": 96}, _src('''
        class Model(nn.Module):
            """C = A @ B with A of shape (M, K) and B of shape (K, N)."""

            def forward(self, A, B):
                return torch.matmul(A, B)


        M = 2048
        K = 4096
        N = 2048


        def get_inputs():
            return [torch.randn(M, K), torch.randn(K, N)]


        def get_init_inputs():
            return []
    ''')),
    ("Tall_skinny_matmul", ("Matmul",), "train", {"M": 256, "K": 8}, _src('''
        class Model(nn.Module):
            """C = A @ B with a tall, skinny A (M, K) and a wide B (K, M): the output is M x M."""

            def forward(self, A, B):
                return torch.matmul(A, B)


        M = 16384
        K = 32


        def get_inputs():
            return [torch.randn(M, K), torch.randn(K, M)]


        def get_init_inputs():
            return []
    ''')),
    ("Matrix_vector_product", ("Matmul",), "train", {"M": 256, "K": 512}, _src('''
        class Model(nn.Module):
            """y = A @ x for a matrix A (M, K) and a column vector x (K, 1)."""

            def forward(self, A, x):
                return torch.matmul(A, x)


        M = 16384
        K = 16384


        def get_inputs():
            return [torch.randn(M, K), torch.randn(K, 1)]


        def get_init_inputs():
            return []
    ''')),
    ("Matmul_transposed_B", ("Matmul",), "train", {"M": 64, "K": 128, "N": 96}, _src('''
        class Model(nn.Module):
            """C = A @ B.T with A of shape (M, K) and B of shape (N, K)."""

            def forward(self, A, B):
                return torch.matmul(A, B.T)


        M = 2048
        K = 4096
        N = 2048


        def get_inputs():
            return [torch.randn(M, K), torch.randn(N, K)]


        def get_init_inputs():
            return []
    ''')),
    ("Matmul_3d_by_2d", ("Matmul",), "train", {"batch_size": 4, "M": 32, "K": 64, "N": 48}, _src('''
        class Model(nn.Module):
            """C[b] = A[b] @ B: a batch of matrices (batch, M, K) times one matrix (K, N)."""

            def forward(self, A, B):
                return torch.matmul(A, B)


        batch_size = 16
        M = 1024
        K = 2048
        N = 1024


        def get_inputs():
            return [torch.randn(batch_size, M, K), torch.randn(K, N)]


        def get_init_inputs():
            return []
    ''')),
    ("Batched_matmul", ("BMM",), "train", {"batch_size": 4, "M": 32, "K": 64, "N": 48}, _src('''
        class Model(nn.Module):
            """C[b] = A[b] @ B[b] for a batch of (M, K) and (K, N) matrices."""

            def forward(self, A, B):
                return torch.bmm(A, B)


        batch_size = 128
        M = 512
        K = 1024
        N = 512


        def get_inputs():
            return [torch.randn(batch_size, M, K), torch.randn(batch_size, K, N)]


        def get_init_inputs():
            return []
    ''')),
    ("Lower_triangular_matmul", ("Matmul", "Tril"), "train", {"N": 128}, _src('''
        class Model(nn.Module):
            """C = tril(A @ B) for lower-triangular A and B (the product is lower triangular too)."""

            def forward(self, A, B):
                return torch.tril(torch.matmul(A, B))


        N = 4096


        def get_inputs():
            return [torch.tril(torch.randn(N, N)), torch.tril(torch.randn(N, N))]


        def get_init_inputs():
            return []
    ''')),
    ("Diagonal_matmul", ("DiagMatmul",), "eval", {"N": 128, "M": 256}, _src('''
        class Model(nn.Module):
            """C = diag(a) @ B: row i of B scaled by a[i]."""

            def forward(self, a, B):
                return torch.diag(a) @ B


        N = 4096
        M = 8192


        def get_inputs():
            return [torch.randn(N), torch.randn(N, M)]


        def get_init_inputs():
            return []
    ''')),
    ("Matrix_scalar_multiplication", ("Scaling",), "train", {"M": 128, "N": 256}, _src('''
        class Model(nn.Module):
            """C = A * s for a matrix A and a fixed scalar s."""

            def __init__(self, scale):
                super().__init__()
                self.scale = scale

            def forward(self, A):
                return A * self.scale


        M = 16384
        N = 8192
        scale = 3.25


        def get_inputs():
            return [torch.randn(M, N)]


        def get_init_inputs():
            return [scale]
    ''')),
]

# ---------------------------------------------------------------------------------------------------
# Convolutions

CONV: list[Spec] = [
    ("Conv1d", ("Conv1d",), "train", {"batch_size": 2, "in_channels": 4, "out_channels": 8, "length": 128}, _src('''
        class Model(nn.Module):
            """A 1D convolution (no padding)."""

            def __init__(self, in_channels, out_channels, kernel_size):
                super().__init__()
                self.conv = nn.Conv1d(in_channels, out_channels, kernel_size)

            def forward(self, x):
                return self.conv(x)


        batch_size = 32
        in_channels = 64
        out_channels = 128
        kernel_size = 3
        length = 16384


        def get_inputs():
            return [torch.randn(batch_size, in_channels, length)]


        def get_init_inputs():
            return [in_channels, out_channels, kernel_size]
    ''')),
    ("Conv2d", ("Conv2d",), "train", {"batch_size": 2, "in_channels": 4, "out_channels": 8, "height": 16, "width": 16}, _src('''
        class Model(nn.Module):
            """A 2D convolution with a square kernel (no padding)."""

            def __init__(self, in_channels, out_channels, kernel_size):
                super().__init__()
                self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

            def forward(self, x):
                return self.conv(x)


        batch_size = 16
        in_channels = 64
        out_channels = 128
        kernel_size = 3
        height = 128
        width = 128


        def get_inputs():
            return [torch.randn(batch_size, in_channels, height, width)]


        def get_init_inputs():
            return [in_channels, out_channels, kernel_size]
    ''')),
    ("Depthwise_conv2d", ("DepthwiseConv2d",), "eval", {"batch_size": 2, "channels": 8, "height": 16, "width": 16}, _src('''
        class Model(nn.Module):
            """A depthwise 2D convolution: one 3x3 filter per channel (groups = channels), same padding."""

            def __init__(self, channels, kernel_size):
                super().__init__()
                self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)

            def forward(self, x):
                return self.conv(x)


        batch_size = 16
        channels = 128
        kernel_size = 3
        height = 256
        width = 256


        def get_inputs():
            return [torch.randn(batch_size, channels, height, width)]


        def get_init_inputs():
            return [channels, kernel_size]
    ''')),
    ("Conv3d", ("Conv3d",), "train", {"batch_size": 2, "in_channels": 3, "out_channels": 4, "depth": 8, "height": 8, "width": 8}, _src('''
        class Model(nn.Module):
            """A 3D convolution with a cubic kernel (no padding)."""

            def __init__(self, in_channels, out_channels, kernel_size):
                super().__init__()
                self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)

            def forward(self, x):
                return self.conv(x)


        batch_size = 16
        in_channels = 16
        out_channels = 32
        kernel_size = 3
        depth = 32
        height = 32
        width = 32


        def get_inputs():
            return [torch.randn(batch_size, in_channels, depth, height, width)]


        def get_init_inputs():
            return [in_channels, out_channels, kernel_size]
    ''')),
    ("ConvTranspose1d", ("ConvTranspose1d",), "eval", {"batch_size": 2, "in_channels": 4, "out_channels": 8, "length": 64}, _src('''
        class Model(nn.Module):
            """A 1D transposed convolution with stride 2."""

            def __init__(self, in_channels, out_channels, kernel_size, stride):
                super().__init__()
                self.conv_transpose = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)

            def forward(self, x):
                return self.conv_transpose(x)


        batch_size = 32
        in_channels = 64
        out_channels = 64
        kernel_size = 3
        stride = 2
        length = 8192


        def get_inputs():
            return [torch.randn(batch_size, in_channels, length)]


        def get_init_inputs():
            return [in_channels, out_channels, kernel_size, stride]
    ''')),
    ("ConvTranspose2d", ("ConvTranspose2d",), "train", {"batch_size": 2, "in_channels": 4, "out_channels": 8, "height": 8, "width": 8}, _src('''
        class Model(nn.Module):
            """A 2D transposed convolution that doubles height and width (stride 2, padding 1,
            output_padding 1)."""

            def __init__(self, in_channels, out_channels, kernel_size):
                super().__init__()
                self.conv_transpose = nn.ConvTranspose2d(
                    in_channels, out_channels, kernel_size, stride=2, padding=1, output_padding=1
                )

            def forward(self, x):
                return self.conv_transpose(x)


        batch_size = 16
        in_channels = 64
        out_channels = 64
        kernel_size = 3
        height = 64
        width = 64


        def get_inputs():
            return [torch.randn(batch_size, in_channels, height, width)]


        def get_init_inputs():
            return [in_channels, out_channels, kernel_size]
    ''')),
    ("ConvTranspose3d", ("ConvTranspose3d",), "train", {"batch_size": 2, "in_channels": 3, "out_channels": 4, "depth": 4, "height": 4, "width": 4}, _src('''
        class Model(nn.Module):
            """A 3D transposed convolution that doubles every spatial size (stride 2, padding 1,
            output_padding 1)."""

            def __init__(self, in_channels, out_channels, kernel_size):
                super().__init__()
                self.conv_transpose = nn.ConvTranspose3d(
                    in_channels, out_channels, kernel_size, stride=2, padding=1, output_padding=1
                )

            def forward(self, x):
                return self.conv_transpose(x)


        batch_size = 16
        in_channels = 32
        out_channels = 32
        kernel_size = 3
        depth = 16
        height = 16
        width = 16


        def get_inputs():
            return [torch.randn(batch_size, in_channels, depth, height, width)]


        def get_init_inputs():
            return [in_channels, out_channels, kernel_size]
    ''')),
]

# ---------------------------------------------------------------------------------------------------
# Element-wise activations on a (batch_size, dim) matrix of signed values


def _activation(name: str, split: str, doc: str, expr: str, *, init: dict | None = None, spread: str = "") -> Spec:
    """An activation task: ``expr`` over ``x``; ``init`` maps constructor arguments to values."""
    init = init or {}
    args = "".join(f", {k}" for k in init)
    assigns = "".join(f"\n                self.{k} = {k}" for k in init)
    constants = "".join(f"\n        {k} = {v!r}" for k, v in init.items())
    source = _src(f'''
        class Model(nn.Module):
            """{doc}"""

            def __init__(self{args}):
                super().__init__(){assigns}

            def forward(self, x):
                return {expr}


        batch_size = 8192
        dim = 16384{constants}


        def get_inputs():
            return [torch.randn(batch_size, dim){spread}]


        def get_init_inputs():
            return [{", ".join(init)}]
    ''')
    return (name, (name,), split, {"batch_size": 64, "dim": 512}, source)


ACTIVATIONS: list[Spec] = [
    _activation("ReLU", "train", "ReLU: max(x, 0).", "torch.relu(x)"),
    _activation("LeakyReLU", "train", "LeakyReLU: x if x > 0 else negative_slope * x.",
                "F.leaky_relu(x, negative_slope=self.negative_slope)", init={"negative_slope": 0.1}),
    _activation("GELU", "train", "GELU (exact, erf form).", "F.gelu(x)"),
    _activation("Sigmoid", "train", "Sigmoid: 1 / (1 + exp(-x)).", "torch.sigmoid(x)"),
    _activation("Tanh", "train", "Tanh.", "torch.tanh(x)", spread=" * 2"),
    _activation("Softplus", "eval", "Softplus: log(1 + exp(x)).", "F.softplus(x)", spread=" * 3"),
    _activation("Hardtanh", "train", "Hardtanh: x clamped to [min_val, max_val].",
                "F.hardtanh(x, min_val=self.min_val, max_val=self.max_val)", init={"min_val": -1.0, "max_val": 1.0},
                spread=" * 2"),
    _activation("SELU", "train", "SELU: scale * (max(0, x) + min(0, alpha * (exp(x) - 1))).", "torch.selu(x)"),
    _activation("Swish", "train", "Swish (SiLU): x * sigmoid(x).", "x * torch.sigmoid(x)"),
    _activation("ELU", "eval", "ELU: x if x > 0 else alpha * (exp(x) - 1).", "F.elu(x, alpha=self.alpha)",
                init={"alpha": 1.0}, spread=" * 2"),
    _activation("HardSigmoid", "train", "HardSigmoid: clamp(x / 6 + 1 / 2, 0, 1).", "F.hardsigmoid(x)", spread=" * 4"),
    _activation("Softsign", "train", "Softsign: x / (1 + |x|).", "F.softsign(x)", spread=" * 3"),
    _activation("Mish", "eval", "Mish: x * tanh(softplus(x)).", "F.mish(x)", spread=" * 2"),
    _activation("HardSwish", "train", "HardSwish: x * relu6(x + 3) / 6.", "F.hardswish(x)", spread=" * 3"),
]

# ---------------------------------------------------------------------------------------------------
# Normalisations: inputs are shifted and scaled, so that a normalisation is not the identity

NORMS: list[Spec] = [
    ("BatchNorm2d", ("BatchNorm",), "train", {"batch_size": 4, "channels": 8, "height": 16, "width": 16}, _src('''
        class Model(nn.Module):
            """Batch normalisation per channel with an affine transform. The sandbox runs models in
            training mode (as KernelBench does), so the batch statistics are used; the random running
            statistics matter only to a sandbox configured with ``train_mode=False``."""

            def __init__(self, channels):
                super().__init__()
                self.bn = nn.BatchNorm2d(channels)
                nn.init.uniform_(self.bn.running_mean, -1.0, 1.0)
                nn.init.uniform_(self.bn.running_var, 0.5, 2.0)
                nn.init.uniform_(self.bn.weight, 0.5, 1.5)
                nn.init.uniform_(self.bn.bias, -0.5, 0.5)

            def forward(self, x):
                return self.bn(x)


        batch_size = 16
        channels = 64
        height = 256
        width = 256


        def get_inputs():
            return [torch.randn(batch_size, channels, height, width) * 3 + 1]


        def get_init_inputs():
            return [channels]
    ''')),
    ("LayerNorm", ("LayerNorm",), "train", {"batch_size": 32, "hidden": 256}, _src('''
        class Model(nn.Module):
            """Layer normalisation over the last dim, with a learned scale and shift."""

            def __init__(self, hidden):
                super().__init__()
                self.ln = nn.LayerNorm(hidden)

            def forward(self, x):
                return self.ln(x)


        batch_size = 8192
        hidden = 8192


        def get_inputs():
            return [torch.randn(batch_size, hidden) * 3 + 1]


        def get_init_inputs():
            return [hidden]
    ''')),
    ("InstanceNorm2d", ("InstanceNorm",), "eval", {"batch_size": 4, "channels": 8, "height": 16, "width": 16}, _src('''
        class Model(nn.Module):
            """Instance normalisation: each (sample, channel) plane normalised over height and width."""

            def __init__(self, channels):
                super().__init__()
                self.inorm = nn.InstanceNorm2d(channels)

            def forward(self, x):
                return self.inorm(x)


        batch_size = 16
        channels = 64
        height = 256
        width = 256


        def get_inputs():
            return [torch.randn(batch_size, channels, height, width) * 3 + 1]


        def get_init_inputs():
            return [channels]
    ''')),
    ("GroupNorm", ("GroupNorm",), "train", {"batch_size": 4, "channels": 16, "height": 16, "width": 16}, _src('''
        class Model(nn.Module):
            """Group normalisation: channels split into num_groups groups, each normalised over its
            channels, height and width."""

            def __init__(self, num_groups, channels):
                super().__init__()
                self.gn = nn.GroupNorm(num_groups, channels)

            def forward(self, x):
                return self.gn(x)


        batch_size = 16
        channels = 64
        num_groups = 8
        height = 256
        width = 256


        def get_inputs():
            return [torch.randn(batch_size, channels, height, width) * 3 + 1]


        def get_init_inputs():
            return [num_groups, channels]
    ''')),
    ("RMSNorm", ("RMSNorm",), "train", {"batch_size": 4, "features": 16, "height": 16, "width": 16}, _src('''
        class Model(nn.Module):
            """RMS normalisation over the feature dim (dim 1): x / sqrt(mean(x^2, dim=1) + eps)."""

            def __init__(self, features, eps):
                super().__init__()
                self.eps = eps

            def forward(self, x):
                rms = torch.sqrt(torch.mean(x * x, dim=1, keepdim=True) + self.eps)
                return x / rms


        batch_size = 16
        features = 64
        height = 256
        width = 256
        eps = 1e-5


        def get_inputs():
            return [torch.randn(batch_size, features, height, width) * 3 + 1]


        def get_init_inputs():
            return [features, eps]
    ''')),
]

# ---------------------------------------------------------------------------------------------------
# Pooling (kernel 3, stride 2, padding 1)


def _pool(kind: str, nd: int, split: str) -> Spec:
    spatial = {1: ["length"], 2: ["height", "width"], 3: ["depth", "height", "width"]}[nd]
    gpu = {1: ([64, 64], [16384]), 2: ([16, 64], [256, 256]), 3: ([16, 32], [64, 64, 64])}[nd]
    cpu = {1: ([2, 8], [256]), 2: ([2, 8], [32, 32]), 3: ([2, 4], [8, 8, 8])}[nd]
    what = "max" if kind == "max" else "average"
    name = f"{'MaxPool' if kind == 'max' else 'AvgPool'}{nd}d"
    consts = "\n        ".join(f"{n} = {v}" for n, v in zip(["batch_size", "channels"] + spatial, gpu[0] + gpu[1]))
    source = _src(f'''
        class Model(nn.Module):
            """{nd}D {what} pooling with kernel 3, stride 2 and padding 1."""

            def __init__(self, kernel_size, stride, padding):
                super().__init__()
                self.pool = nn.{name}(kernel_size, stride=stride, padding=padding)

            def forward(self, x):
                return self.pool(x)


        {consts}
        kernel_size = 3
        stride = 2
        padding = 1


        def get_inputs():
            return [torch.randn(batch_size, channels, {", ".join(spatial)})]


        def get_init_inputs():
            return [kernel_size, stride, padding]
    ''')
    cpu_sizes = dict(zip(["batch_size", "channels"] + spatial, cpu[0] + cpu[1]))
    return (name, (name,), split, cpu_sizes, source)


POOLING: list[Spec] = [
    _pool("max", 1, "train"),
    _pool("max", 2, "train"),
    _pool("max", 3, "eval"),
    _pool("avg", 1, "train"),
    _pool("avg", 2, "train"),
    _pool("avg", 3, "train"),
]

# ---------------------------------------------------------------------------------------------------
# Reductions over dim 1 of (batch, dim1, dim2); a per-column offset makes every output position differ


def _reduction(name: str, split: str, doc: str, expr: str) -> Spec:
    source = _src(f'''
        class Model(nn.Module):
            """{doc}"""

            def __init__(self, dim):
                super().__init__()
                self.dim = dim

            def forward(self, x):
                return {expr}


        batch_size = 128
        dim1 = 1024
        dim2 = 1024
        reduce_dim = 1


        def get_inputs():
            # signed values plus an offset per (batch, column): the reduced values vary everywhere
            return [torch.randn(batch_size, dim1, dim2) * 2 + torch.randn(batch_size, 1, dim2) * 3]


        def get_init_inputs():
            return [reduce_dim]
    ''')
    return (name, (name,), split, {"batch_size": 8, "dim1": 32, "dim2": 32}, source)


REDUCTIONS: list[Spec] = [
    _reduction("Sum", "train", "Sum over one dim (keepdim).", "torch.sum(x, dim=self.dim, keepdim=True)"),
    _reduction("Mean", "train", "Mean over one dim.", "torch.mean(x, dim=self.dim)"),
    _reduction("Max", "train", "Max over one dim (values only).", "torch.max(x, dim=self.dim).values"),
    _reduction("Min", "eval", "Min over one dim (values only).", "torch.min(x, dim=self.dim).values"),
    _reduction("Argmax", "train", "Index of the max over one dim (int64).", "torch.argmax(x, dim=self.dim)"),
    _reduction("Argmin", "eval", "Index of the min over one dim (int64).", "torch.argmin(x, dim=self.dim)"),
    ("Prod", ("Prod",), "train", {"batch_size": 8, "dim2": 32}, _src('''
        class Model(nn.Module):
            """Product over one dim."""

            def __init__(self, dim):
                super().__init__()
                self.dim = dim

            def forward(self, x):
                return torch.prod(x, dim=self.dim)


        batch_size = 256
        reduce_size = 32
        dim2 = 16384
        reduce_dim = 1


        def get_inputs():
            # factors near +-1 with random signs: the products neither overflow nor vanish
            magnitude = 1 + 0.3 * torch.randn(batch_size, reduce_size, dim2)
            sign = torch.sign(torch.randn(batch_size, reduce_size, dim2))
            return [magnitude * sign]


        def get_init_inputs():
            return [reduce_dim]
    ''')),
]

# ---------------------------------------------------------------------------------------------------
# Softmax

SOFTMAX: list[Spec] = [
    ("Softmax", ("Softmax",), "train", {"batch_size": 64, "dim": 256}, _src('''
        class Model(nn.Module):
            """Softmax over the last dim."""

            def forward(self, x):
                return torch.softmax(x, dim=-1)


        batch_size = 32768
        dim = 2048


        def get_inputs():
            # logits with a spread of 3 keep the largest probabilities far from zero
            return [torch.randn(batch_size, dim) * 3]


        def get_init_inputs():
            return []
    ''')),
    ("LogSoftmax", ("LogSoftmax",), "eval", {"batch_size": 64, "dim": 256}, _src('''
        class Model(nn.Module):
            """Log-softmax over the last dim."""

            def forward(self, x):
                return torch.log_softmax(x, dim=-1)


        batch_size = 32768
        dim = 2048


        def get_inputs():
            return [torch.randn(batch_size, dim) * 3]


        def get_init_inputs():
            return []
    ''')),
]

# ---------------------------------------------------------------------------------------------------
# Losses: scalar outputs, so each call draws a fresh scale and heavy-tailed rows (a log-normal scale
# per row); no constant and no closed-form expectation of the distribution matches every call.

_LOSS_INPUTS = '''
        def heavy_tailed(*shape):
            """Normal values times a log-normal scale per row: heavy tails, different in every row."""
            return torch.randn(*shape) * torch.exp(torch.randn(shape[0], 1))


        def get_inputs():
            scale = torch.rand(()) * 3 + 0.5  # a fresh scale per call
            predictions = heavy_tailed(batch_size, dim) * scale
            targets = heavy_tailed(batch_size, dim) * scale
            return [predictions, targets]
'''


def _pairwise_loss(name: str, split: str, doc: str, expr: str) -> Spec:
    source = _src(f'''
        class Model(nn.Module):
            """{doc}"""

            def forward(self, predictions, targets):
                return {expr}


        batch_size = 16384
        dim = 4096


        {_LOSS_INPUTS.strip()}


        def get_init_inputs():
            return []
    ''')
    return (name, (name,), split, {"batch_size": 64, "dim": 256}, source)


LOSSES: list[Spec] = [
    _pairwise_loss("MSELoss", "train", "Mean squared error.", "torch.mean((predictions - targets) ** 2)"),
    _pairwise_loss("HuberLoss", "train", "Huber loss (delta 1), averaged.", "F.huber_loss(predictions, targets, delta=1.0)"),
    _pairwise_loss("L1Loss", "train", "Mean absolute error.", "torch.mean(torch.abs(predictions - targets))"),
    ("CrossEntropyLoss", ("CrossEntropyLoss",), "train", {"batch_size": 64, "num_classes": 100}, _src('''
        class Model(nn.Module):
            """Cross-entropy of logits against integer class targets, averaged over the batch."""

            def forward(self, logits, targets):
                return F.cross_entropy(logits, targets)


        batch_size = 65536
        num_classes = 1024


        def get_inputs():
            scale = torch.rand(()) * 3 + 0.5  # a fresh logit scale per call
            logits = torch.randn(batch_size, num_classes) * torch.exp(torch.randn(batch_size, 1)) * scale
            targets = torch.randint(0, num_classes, (batch_size,))
            return [logits, targets]


        def get_init_inputs():
            return []
    ''')),
    ("KLDivLoss", ("KLDivLoss",), "eval", {"batch_size": 64, "dim": 128}, _src('''
        class Model(nn.Module):
            """KL(targets || predictions) for rows of probabilities, averaged over the batch."""

            def forward(self, predictions, targets):
                return F.kl_div(torch.log(predictions), targets, reduction="batchmean")


        batch_size = 16384
        dim = 4096


        def get_inputs():
            # two sharpness levels drawn per call: the divergence differs from call to call
            sharpness = torch.rand(2) * 2 + 0.5
            predictions = torch.softmax(torch.randn(batch_size, dim) * sharpness[0], dim=-1)
            targets = torch.softmax(torch.randn(batch_size, dim) * sharpness[1], dim=-1)
            return [predictions, targets]


        def get_init_inputs():
            return []
    ''')),
    ("HingeLoss", ("HingeLoss",), "train", {"batch_size": 64, "dim": 256}, _src('''
        class Model(nn.Module):
            """Hinge loss mean(max(0, 1 - predictions * targets)) with targets in {-1, +1}."""

            def forward(self, predictions, targets):
                return torch.mean(torch.clamp(1 - predictions * targets, min=0))


        batch_size = 16384
        dim = 4096


        def get_inputs():
            scale = torch.rand(()) * 3 + 0.5  # a fresh scale per call
            predictions = torch.randn(batch_size, dim) * torch.exp(torch.randn(batch_size, 1)) * scale
            targets = torch.sign(torch.randn(batch_size, dim))
            return [predictions, targets]


        def get_init_inputs():
            return []
    ''')),
    ("CosineSimilarityLoss", ("CosineSimilarityLoss",), "eval", {"batch_size": 64, "dim": 256}, _src('''
        class Model(nn.Module):
            """mean(1 - cosine_similarity(predictions, targets)) over the rows."""

            def forward(self, predictions, targets):
                return torch.mean(1 - F.cosine_similarity(predictions, targets, dim=1))


        batch_size = 16384
        dim = 4096


        def get_inputs():
            # targets mix the predictions (weight drawn per call in [-1, 1]) with noise
            mix = torch.rand(()) * 2 - 1
            predictions = torch.randn(batch_size, dim)
            targets = mix * predictions + 0.5 * torch.randn(batch_size, dim)
            return [predictions, targets]


        def get_init_inputs():
            return []
    ''')),
]

# ---------------------------------------------------------------------------------------------------
# Cumulative ops along the last dim


def _cumulative(name: str, split: str, doc: str, body: str, inputs: str, *, extra_args: str = "", extra_inputs: str = "") -> Spec:
    source = _src(f'''
        class Model(nn.Module):
            """{doc}"""

            def __init__(self, dim):
                super().__init__()
                self.dim = dim

            def forward(self, x{extra_args}):
                return {body}


        batch_size = 16384
        length = 4096
        scan_dim = 1


        def get_inputs():
            return [{inputs}{extra_inputs}]


        def get_init_inputs():
            return [scan_dim]
    ''')
    return (name, (name,), split, {"batch_size": 32, "length": 256}, source)


CUMULATIVE: list[Spec] = [
    _cumulative("Cumsum", "train", "Inclusive prefix sum along a dim.", "torch.cumsum(x, dim=self.dim)",
                "torch.randn(batch_size, length)"),
    _cumulative("Cumprod", "train", "Inclusive prefix product along a dim (factors near 1, so it stays finite).",
                "torch.cumprod(x, dim=self.dim)", "1 + 0.03 * torch.randn(batch_size, length)"),
    _cumulative("ReverseCumsum", "eval", "Reverse prefix sum: out[i] = sum of x[j] for j >= i.",
                "torch.cumsum(x.flip(self.dim), dim=self.dim).flip(self.dim)", "torch.randn(batch_size, length)"),
    _cumulative("ExclusiveCumsum", "train", "Exclusive prefix sum: out[i] = sum of x[j] for j < i (out[0] = 0).",
                "torch.cumsum(x, dim=self.dim) - x", "torch.randn(batch_size, length)"),
    _cumulative("MaskedCumsum", "train", "Prefix sum of the entries where mask is True (the rest count as 0).",
                "torch.cumsum(x * mask, dim=self.dim)", "torch.randn(batch_size, length)",
                extra_args=", mask", extra_inputs=", torch.rand(batch_size, length) > 0.5"),
]

LEVEL1: list[Spec] = MATMUL + CONV + ACTIVATIONS + NORMS + POOLING + REDUCTIONS + SOFTMAX + LOSSES + CUMULATIVE
