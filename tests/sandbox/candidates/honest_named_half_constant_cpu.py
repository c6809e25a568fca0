# Honest: ReLU as (x + |x|) * half, with constants named half and kHalf: names, not the half-precision type.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <cmath>

constexpr int kHalf = 2;

torch::Tensor relu_forward(torch::Tensor x) {
    const float half = 0.5f;
    torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const float* px = xc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = xc.numel();
    const int64_t split = n / kHalf;
    for (int64_t i = 0; i < n; ++i) {
        float v = px[i];
        po[i] = (v + std::fabs(v)) * half;
    }
    (void)split;
    return out;
}
"""

ext = load_inline(name="kevin_test_half_named_cpu", cpp_sources=cpp_source, functions=["relu_forward"],
                  extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu_forward(x)
