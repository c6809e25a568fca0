# Honest CPU: sum over one dim with keepdim, as (outer, reduced, inner) loops; the inner index runs fastest.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

sum_cpp = r"""
#include <torch/extension.h>
#include <vector>

torch::Tensor sum_dim_forward(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "sum_dim_forward: float32 only");
    torch::Tensor xc = x.contiguous();
    const int64_t nd = xc.dim();
    if (dim < 0) dim += nd;
    TORCH_CHECK(dim >= 0 && dim < nd, "sum_dim_forward: bad dim");
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= xc.size(d);
    for (int64_t d = dim + 1; d < nd; ++d) inner *= xc.size(d);
    const int64_t red = xc.size(dim);
    std::vector<int64_t> shape(xc.sizes().begin(), xc.sizes().end());
    shape[dim] = 1;
    torch::Tensor out = torch::empty(shape, xc.options());
    const float* px = xc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    std::vector<float> acc(inner);
    for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) acc[i] = 0.0f;
        for (int64_t r = 0; r < red; ++r) {
            const float* row = px + (o * red + r) * inner;
            for (int64_t i = 0; i < inner; ++i) acc[i] += row[i];
        }
        for (int64_t i = 0; i < inner; ++i) po[o * inner + i] = acc[i];
    }
    return out;
}
"""

sum_ext = load_inline(
    name="honest_cpu_sum_dim",
    cpp_sources=sum_cpp,
    functions=["sum_dim_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum_ext.sum_dim_forward(x, self.dim)
