# Honest CUDA: ReLU, one thread per element.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_cuda = r"""
#include <torch/extension.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "relu_forward: CUDA tensor expected");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int64_t n = xc.numel();
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    relu_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

relu_cpp = "torch::Tensor relu_forward(torch::Tensor x);"

relu_ext = load_inline(
    name="honest_cuda_relu",
    cpp_sources=relu_cpp,
    cuda_sources=relu_cuda,
    functions=["relu_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_ext.relu_forward(x)
