# Honest CUDA: softmax over the last dim, one block per row, max and sum reduced in shared memory.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

softmax_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__global__ void softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    extern __shared__ float red[];
    const float* in = x + (int64_t)blockIdx.x * cols;
    float* out = y + (int64_t)blockIdx.x * cols;
    const int tid = threadIdx.x;

    float m = -INFINITY;
    for (int c = tid; c < cols; c += blockDim.x) m = fmaxf(m, in[c]);
    red[tid] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();

    float sum = 0.0f;
    for (int c = tid; c < cols; c += blockDim.x) {
        float e = expf(in[c] - m);
        out[c] = e;
        sum += e;
    }
    red[tid] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    const float inv = 1.0f / red[0];
    for (int c = tid; c < cols; c += blockDim.x) out[c] *= inv;
}

torch::Tensor softmax_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "softmax_forward: CUDA tensor expected");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int cols = (int)xc.size(-1);
    const int64_t rows = xc.numel() / cols;
    const int threads = 256;
    softmax_rows_kernel<<<(unsigned)rows, threads, threads * sizeof(float), at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

softmax_cpp = "torch::Tensor softmax_forward(torch::Tensor x);"

softmax_ext = load_inline(
    name="honest_cuda_softmax",
    cpp_sources=softmax_cpp,
    cuda_sources=softmax_cuda,
    functions=["softmax_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_ext.softmax_forward(x)
