# Honest CUDA: sum over dim 1 (keepdim) of a 3-D tensor; each thread sums a chunk of rows for one column and
# adds it into the zero-initialised output with atomicAdd.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

sum_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#define CHUNK 32

__global__ void sum_dim1_atomic_kernel(const float* __restrict__ x, float* __restrict__ out,
                                       int B, int R, int C) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int r0 = blockIdx.y * CHUNK;
    const int b = blockIdx.z;
    if (col >= C) return;
    const float* base = x + (int64_t)b * R * C;
    float acc = 0.0f;
    const int r1 = min(r0 + CHUNK, R);
    for (int r = r0; r < r1; ++r) {
        acc += base[(int64_t)r * C + col];
    }
    atomicAdd(out + (int64_t)b * C + col, acc);
}

torch::Tensor sum_dim1_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 3, "sum_dim1_forward: 3-D CUDA tensor expected");
    auto xc = x.contiguous();
    const int B = (int)xc.size(0), R = (int)xc.size(1), C = (int)xc.size(2);
    auto out = torch::zeros({B, 1, C}, xc.options());
    dim3 block(256);
    dim3 grid((C + 255) / 256, (R + CHUNK - 1) / CHUNK, B);
    sum_dim1_atomic_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), out.data_ptr<float>(), B, R, C);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

sum_cpp = "torch::Tensor sum_dim1_forward(torch::Tensor x);"

sum_ext = load_inline(
    name="honest_cuda_sum_atomic",
    cpp_sources=sum_cpp,
    cuda_sources=sum_cuda,
    functions=["sum_dim1_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum_ext.sum_dim1_forward(x)
