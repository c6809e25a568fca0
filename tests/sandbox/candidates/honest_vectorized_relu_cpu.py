# Honest: ReLU with ATen's SIMD class (at::vec::Vectorized<float>) over at::parallel_for chunks, which end before
# the call returns. Reads the thread count (a query, not a thread). Vectorized has methods named like tensor
# compute (.exp(), .abs()) that are no PyTorch operators.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

vec_relu_cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

torch::Tensor relu_forward(torch::Tensor x) {
    using Vec = at::vec::Vectorized<float>;
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "relu_forward: float32 only");
    torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const float* px = xc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = xc.numel();
    const int64_t grain = std::max<int64_t>(4096, n / std::max(1, at::get_num_threads()));
    at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
        const Vec zero(0.0f);
        int64_t i = begin;
        for (; i + Vec::size() <= end; i += Vec::size()) {
            Vec v = Vec::loadu(px + i);
            Vec r = at::vec::maximum(v, zero);
            Vec check = r.abs();  // relu output is its own absolute value
            (void)check;
            r.store(po + i);
        }
        for (; i < end; ++i) po[i] = px[i] > 0.0f ? px[i] : 0.0f;
    });
    return out;
}
"""

vec_relu_extension = load_inline(
    name="kevin_test_vec_relu_cpu",
    cpp_sources=vec_relu_cpp_source,
    functions=["relu_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = vec_relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.relu_forward(x)
