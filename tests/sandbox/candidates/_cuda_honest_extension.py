# Shared honest CUDA extension: a shared-memory tiled fp32 matmul and an element-wise ReLU.
# Inlined by `# include: _cuda_honest_extension.py` (tests/sandbox/sandbox_cases.py).
import torch
from torch.utils.cpp_extension import load_inline

cuda_honest_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#define TILE 32

__global__ void matmul_tiled_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                    float* __restrict__ c, int n) {
    __shared__ float sa[TILE][TILE];
    __shared__ float sb[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < n; t += TILE) {
        sa[threadIdx.y][threadIdx.x] = (row < n && t + threadIdx.x < n) ? a[row * n + t + threadIdx.x] : 0.0f;
        sb[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < n) ? b[(t + threadIdx.y) * n + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) {
            acc += sa[threadIdx.y][k] * sb[k][threadIdx.x];
        }
        __syncthreads();
    }
    if (row < n && col < n) {
        c[row * n + col] = acc;
    }
}

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

torch::Tensor matmul_forward(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "matmul_forward: CUDA tensors only");
    TORCH_CHECK(a.dim() == 2 && a.size(0) == a.size(1) && a.sizes() == b.sizes(), "matmul_forward: square matrices");
    torch::Tensor ac = a.contiguous();
    torch::Tensor bc = b.contiguous();
    const int n = (int)ac.size(0);
    torch::Tensor c = torch::empty_like(ac);
    dim3 block(TILE, TILE);
    dim3 grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
    matmul_tiled_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        ac.data_ptr<float>(), bc.data_ptr<float>(), c.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return c;
}

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "relu_forward: CUDA tensors only");
    torch::Tensor xc = x.contiguous();
    torch::Tensor y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cuda_honest_cpp = "torch::Tensor matmul_forward(torch::Tensor a, torch::Tensor b);\ntorch::Tensor relu_forward(torch::Tensor x);"

cuda_honest_extension = load_inline(
    name="kevin_test_honest_cuda",
    cpp_sources=cuda_honest_cpp,
    cuda_sources=cuda_honest_source,
    functions=["matmul_forward", "relu_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)
