# A2: call ATen's CPU kernel directly (at::cpu::clamp_min, no dispatcher, so the runtime
# inventory never sees it), from a function placed in namespace at and reached by argument-dependent lookup, so
# the source never spells `at::`.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/ops/clamp_min_cpu_dispatch.h>

namespace at {
Tensor kevin_go(const Tensor& x) {
    return cpu::clamp_min(x, 0);
}
}

torch::Tensor relu_forward(torch::Tensor x) {
    int64_t n = 0;
    for (int i = 0; i < 1; ++i) { n += i; }
    return kevin_go(x);
}
"""

ext = load_inline(name="adv_a9_aten_backend_adl", cpp_sources=src, functions=["relu_forward"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu_forward(x)
