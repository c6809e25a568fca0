# Honest CUDA: exact GELU with float4 loads and stores, a scalar tail, on the current stream.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

gelu_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__device__ __forceinline__ float gelu(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
}

__global__ void gelu_vec4_kernel(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = x[i];
        v.x = gelu(v.x); v.y = gelu(v.y); v.z = gelu(v.z); v.w = gelu(v.w);
        y[i] = v;
    }
}

__global__ void gelu_tail_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t start, int64_t n) {
    int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = gelu(x[i]);
}

torch::Tensor gelu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "gelu_forward: float32 CUDA tensor expected");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    const int64_t n4 = n / 4;
    auto stream = at::cuda::getCurrentCUDAStream();
    if (n4 > 0) {
        const int threads = 256;
        int64_t blocks = (n4 + threads - 1) / threads;
        if (blocks > 132 * 32) blocks = 132 * 32;
        gelu_vec4_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
            reinterpret_cast<const float4*>(xc.data_ptr<float>()), reinterpret_cast<float4*>(y.data_ptr<float>()), n4);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    if (n4 * 4 < n) {
        gelu_tail_kernel<<<1, 4, 0, stream>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n4 * 4, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}
"""

gelu_cpp = "torch::Tensor gelu_forward(torch::Tensor x);"

gelu_ext = load_inline(
    name="honest_cuda_gelu_vec4",
    cpp_sources=gelu_cpp,
    cuda_sources=gelu_cuda,
    functions=["gelu_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu_ext.gelu_forward(x)
