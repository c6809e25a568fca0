# Honest CPU: LayerNorm in two extension calls: per-row mean and 1/std (two passes), then the normalisation.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

layernorm_cpp = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor row_stats(torch::Tensor x, double eps) {
    torch::Tensor xc = x.contiguous();
    const int64_t cols = xc.size(-1);
    const int64_t rows = xc.numel() / cols;
    torch::Tensor stats = torch::empty({rows, 2}, xc.options());
    const float* px = xc.data_ptr<float>();
    float* ps = stats.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* in = px + r * cols;
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += in[c];
        const double mean = s / cols;
        double v = 0.0;
        for (int64_t c = 0; c < cols; ++c) v += (in[c] - mean) * (in[c] - mean);
        ps[2 * r] = (float)mean;
        ps[2 * r + 1] = (float)(1.0 / std::sqrt(v / cols + eps));
    }
    return stats;
}

torch::Tensor normalize(torch::Tensor x, torch::Tensor stats, torch::Tensor w, torch::Tensor b) {
    torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const int64_t cols = xc.size(-1);
    const int64_t rows = xc.numel() / cols;
    const float* px = xc.data_ptr<float>();
    const float* ps = stats.data_ptr<float>();
    const float* pw = w.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float mean = ps[2 * r], rstd = ps[2 * r + 1];
        for (int64_t c = 0; c < cols; ++c) {
            po[r * cols + c] = (px[r * cols + c] - mean) * rstd * pw[c] + pb[c];
        }
    }
    return out;
}
"""

layernorm_ext = load_inline(
    name="honest_cpu_layernorm_two_calls",
    cpp_sources=layernorm_cpp,
    functions=["row_stats", "normalize"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stats = layernorm_ext.row_stats(x, self.eps)
        return layernorm_ext.normalize(x, stats, self.weight, self.bias)
