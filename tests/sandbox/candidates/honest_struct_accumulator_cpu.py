# Honest: row sums through a user's own accumulator struct whose methods are named sum() and max(): not tensors.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

struct RowStats {
    float total = 0.0f;
    float largest = -INFINITY;
    void add(float v) { total += v; largest = v > largest ? v : largest; }
    float sum() const { return total; }
    float max() const { return largest; }
};

torch::Tensor row_sum_forward(torch::Tensor x) {
    torch::Tensor xc = x.contiguous();
    const int64_t rows = xc.size(0), cols = xc.size(1);
    torch::Tensor out = torch::empty({rows}, xc.options());
    const float* px = xc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        RowStats stats;
        for (int64_t c = 0; c < cols; ++c) stats.add(px[r * cols + c]);
        RowStats* p = &stats;
        po[r] = p->sum() + 0.0f * stats.max();
    }
    return out;
}
"""

ext = load_inline(name="kevin_test_row_sum_struct_cpu", cpp_sources=cpp_source, functions=["row_sum_forward"],
                  extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.row_sum_forward(x)
