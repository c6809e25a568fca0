"""Level 2 of the built-in suite: fused programs, one main op plus 2-5 others from the paper's
Appendix A vocabulary, written by ``kevin.data.synth.render_task`` with every menu's default choice.

Each entry is ``(ops, split)``: the operator sequence (main op first) and the split. The sequences
were picked by hand to cover every main op and every vocabulary entry while keeping the output
informative (no softmax over long rows, no normalisation followed by a mean over what it normalised,
no saturating clamp before a reduction); ``tests/data/test_builtin.py`` checks that property and the
sandbox calibration of each one.
"""

from __future__ import annotations

LEVEL2: list[tuple[tuple[str, ...], str]] = [
    # Conv2d
    (("Conv2d", "ReLU", "BiasAdd"), "train"),
    (("Conv2d", "GroupNorm", "Swish", "Scaling"), "train"),
    (("Conv2d", "BatchNorm", "Tanh", "MaxPool"), "train"),
    (("Conv2d", "InstanceNorm", "Divide"), "train"),
    (("Conv2d", "Subtract", "Mish", "LeakyReLU"), "train"),
    (("Conv2d", "HardSwish", "BiasAdd", "AvgPool", "Sigmoid"), "train"),
    (("Conv2d", "Softmax", "AvgPool", "Scaling"), "eval"),
    (("Conv2d", "LayerNorm", "GELU", "ResidualAdd"), "train"),
    (("Conv2d", "Multiply", "Clamp", "Mean"), "train"),
    (("Conv2d", "AvgPool", "Sigmoid", "Sum"), "train"),
    (("Conv2d", "MaxPool", "LogSumExp", "ReLU"), "eval"),
    (("Conv2d", "Hardtanh", "Add", "GroupNorm", "Max", "Tanh"), "train"),
    # Matmul (x @ W^T, no bias)
    (("Matmul", "Scaling", "ResidualAdd", "Clamp"), "train"),
    (("Matmul", "Sigmoid", "Sum"), "train"),
    (("Matmul", "LayerNorm", "GELU"), "train"),
    (("Matmul", "BatchNorm", "Add", "ReLU"), "train"),
    (("Matmul", "Min", "Subtract", "Tanh"), "eval"),
    (("Matmul", "AvgPool", "GELU", "Scaling", "Max"), "train"),
    # Gemm (x @ W^T + b)
    (("Gemm", "ReLU", "Divide"), "train"),
    (("Gemm", "GroupNorm", "HardSwish", "BiasAdd"), "eval"),
    (("Gemm", "BatchNorm", "GELU", "Mean"), "train"),
    (("Gemm", "Sigmoid", "Scaling", "ResidualAdd"), "train"),
    (("Gemm", "LogSumExp", "LeakyReLU", "GELU"), "eval"),
    (("Gemm", "Hardtanh", "Multiply", "Max"), "train"),
    (("Gemm", "Subtract", "Mish", "MaxPool", "BiasAdd", "Min"), "train"),
    # BMM
    (("BMM", "Divide", "Softmax"), "train"),
    (("BMM", "LayerNorm", "ReLU"), "train"),
    (("BMM", "BiasAdd", "Swish", "Max"), "train"),
    (("BMM", "AvgPool", "Sigmoid"), "eval"),
    (("BMM", "Mish", "LogSumExp"), "train"),
    (("BMM", "Scaling", "Hardtanh", "Sum", "Add"), "train"),
    # Conv3d
    (("Conv3d", "GroupNorm", "Mish"), "train"),
    (("Conv3d", "Softmax", "MaxPool"), "train"),
    (("Conv3d", "BatchNorm", "Swish"), "train"),
    (("Conv3d", "LeakyReLU", "Add", "Sum"), "train"),
    (("Conv3d", "InstanceNorm", "HardSwish", "AvgPool"), "eval"),
    (("Conv3d", "Divide", "Max", "BiasAdd"), "train"),
    # ConvTranspose2d
    (("ConvTranspose2d", "BiasAdd", "Tanh"), "train"),
    (("ConvTranspose2d", "MaxPool", "Hardtanh", "Mean"), "train"),
    (("ConvTranspose2d", "Add", "Min", "GELU"), "train"),
    (("ConvTranspose2d", "InstanceNorm", "Scaling", "Sigmoid"), "train"),
    (("ConvTranspose2d", "Softmax", "Multiply"), "eval"),
    (("ConvTranspose2d", "ReLU", "ResidualAdd", "LayerNorm", "Subtract"), "train"),
    # ConvTranspose3d
    (("ConvTranspose3d", "ReLU", "GroupNorm"), "train"),
    (("ConvTranspose3d", "Sum", "LayerNorm", "AvgPool"), "train"),
    (("ConvTranspose3d", "BatchNorm", "Subtract", "Tanh"), "train"),
    (("ConvTranspose3d", "MaxPool", "Swish", "Max"), "train"),
    (("ConvTranspose3d", "Tanh", "Multiply", "Sum"), "eval"),
    (("ConvTranspose3d", "ReLU", "GlobalAvgPool", "Scaling"), "train"),
]
