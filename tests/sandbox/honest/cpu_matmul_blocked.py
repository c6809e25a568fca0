# Honest CPU: C = A @ B, cache-blocked i-k-j loops over 64 x 64 tiles.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

matmul_cpp = r"""
#include <torch/extension.h>
#include <algorithm>

constexpr int64_t BS = 64;

torch::Tensor matmul_forward(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "matmul_forward: bad shapes");
    torch::Tensor ac = a.contiguous();
    torch::Tensor bc = b.contiguous();
    const int64_t n = ac.size(0), k = ac.size(1), m = bc.size(1);
    torch::Tensor c = torch::zeros({n, m}, ac.options());
    const float* pa = ac.data_ptr<float>();
    const float* pb = bc.data_ptr<float>();
    float* pc = c.data_ptr<float>();
    for (int64_t i0 = 0; i0 < n; i0 += BS) {
        for (int64_t k0 = 0; k0 < k; k0 += BS) {
            for (int64_t j0 = 0; j0 < m; j0 += BS) {
                const int64_t i1 = std::min(i0 + BS, n), k1 = std::min(k0 + BS, k), j1 = std::min(j0 + BS, m);
                for (int64_t i = i0; i < i1; ++i) {
                    for (int64_t kk = k0; kk < k1; ++kk) {
                        const float av = pa[i * k + kk];
                        const float* brow = pb + kk * m;
                        float* crow = pc + i * m;
                        for (int64_t j = j0; j < j1; ++j) crow[j] += av * brow[j];
                    }
                }
            }
        }
    }
    return c;
}
"""

matmul_ext = load_inline(
    name="honest_cpu_matmul_blocked",
    cpp_sources=matmul_cpp,
    functions=["matmul_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return matmul_ext.matmul_forward(A, B)
