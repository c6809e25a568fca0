# Honest CPU: softmax over the last dim, three passes per row (max, sum of exponentials, scale).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

softmax_cpp = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor softmax_forward(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "softmax_forward: float32 only");
    torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const int64_t cols = xc.size(-1);
    const int64_t rows = xc.numel() / cols;
    const float* px = xc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* in = px + r * cols;
        float* o = po + r * cols;
        float m = in[0];
        for (int64_t c = 1; c < cols; ++c) m = in[c] > m ? in[c] : m;
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) {
            const float e = std::exp(in[c] - m);
            o[c] = e;
            s += e;
        }
        const float inv = 1.0f / s;
        for (int64_t c = 0; c < cols; ++c) o[c] *= inv;
    }
    return out;
}
"""

softmax_ext = load_inline(
    name="honest_cpu_softmax",
    cpp_sources=softmax_cpp,
    functions=["softmax_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_ext.softmax_forward(x)
