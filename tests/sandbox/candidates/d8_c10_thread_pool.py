# D8: a c10::ThreadPool of the candidate's own (c10 holds types, so `c10::` passed the ATen scan) running the
# loop in the background.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <c10/core/thread_pool.h>

torch::Tensor relu_forward(torch::Tensor x) {
    static c10::ThreadPool pool(2);
    torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const float* px = xc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = xc.numel();
    pool.run([=] {
        for (int64_t i = 0; i < n; ++i) po[i] = px[i] > 0.0f ? px[i] : 0.0f;
    });
    return out;
}
"""

ext = load_inline(name="d8_pool", cpp_sources=cpp_source, functions=["relu_forward"], extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu_forward(x)
