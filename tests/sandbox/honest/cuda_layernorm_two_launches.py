# Honest CUDA: LayerNorm in two launches: per-row mean and 1/std (block reduction), then an element-wise pass.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

layernorm_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__inline__ __device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

__inline__ __device__ float block_sum(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    const int nwarps = blockDim.x >> 5;
    v = (threadIdx.x < nwarps) ? shared[threadIdx.x] : 0.0f;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) shared[0] = v;
    __syncthreads();
    v = shared[0];
    __syncthreads();
    return v;
}

__global__ void row_stats_kernel(const float* __restrict__ x, float* __restrict__ stats, int cols, float eps) {
    __shared__ float shared[32];
    const float* in = x + (int64_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += in[c];
    const float mean = block_sum(s, shared) / cols;
    float v = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float d = in[c] - mean;
        v += d * d;
    }
    const float var = block_sum(v, shared) / cols;
    if (threadIdx.x == 0) {
        stats[2 * blockIdx.x] = mean;
        stats[2 * blockIdx.x + 1] = rsqrtf(var + eps);
    }
}

__global__ void normalize_kernel(const float* __restrict__ x, const float* __restrict__ stats,
                                 const float* __restrict__ w, const float* __restrict__ b,
                                 float* __restrict__ y, int64_t n, int cols) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int64_t row = i / cols;
    const int c = (int)(i % cols);
    y[i] = (x[i] - stats[2 * row]) * stats[2 * row + 1] * w[c] + b[c];
}

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    TORCH_CHECK(x.is_cuda(), "layernorm_forward: CUDA tensor expected");
    auto xc = x.contiguous();
    const int cols = (int)xc.size(-1);
    const int64_t rows = xc.numel() / cols;
    auto stats = torch::empty({rows, 2}, xc.options());
    auto y = torch::empty_like(xc);
    auto stream = at::cuda::getCurrentCUDAStream();
    row_stats_kernel<<<(unsigned)rows, 256, 0, stream>>>(xc.data_ptr<float>(), stats.data_ptr<float>(), cols, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const int64_t n = xc.numel();
    normalize_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(
        xc.data_ptr<float>(), stats.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), n, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

layernorm_cpp = "torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps);"

layernorm_ext = load_inline(
    name="honest_cuda_layernorm_two_launches",
    cpp_sources=layernorm_cpp,
    cuda_sources=layernorm_cuda,
    functions=["layernorm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm_ext.layernorm_forward(x, self.weight, self.bias, self.eps)
