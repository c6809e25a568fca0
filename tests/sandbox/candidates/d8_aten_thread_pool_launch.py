# D8: background work in ATen's inter-op pool: at::launch returns at once and the work finishes after the call
# (here it writes the output after the harness has taken its end time).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

torch::Tensor relu_forward(torch::Tensor x) {
    torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const float* px = xc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = xc.numel();
    at::launch([=] {
        for (int64_t i = 0; i < n; ++i) po[i] = px[i] > 0.0f ? px[i] : 0.0f;
    });
    return out;
}
"""

ext = load_inline(name="d8_launch", cpp_sources=cpp_source, functions=["relu_forward"], extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu_forward(x)
