# Honest CUDA: y = A @ x, one warp per row of A, partial sums combined with warp shuffles.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

matvec_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__inline__ __device__ float warp_reduce_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(0xffffffff, v, offset);
    }
    return v;
}

__global__ void matvec_warp_kernel(const float* __restrict__ A, const float* __restrict__ x,
                                   float* __restrict__ y, int M, int K) {
    const int warps_per_block = blockDim.x / 32;
    const int row = blockIdx.x * warps_per_block + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= M) return;
    const float* a = A + (int64_t)row * K;
    float acc = 0.0f;
    for (int k = lane; k < K; k += 32) {
        acc += a[k] * x[k];
    }
    acc = warp_reduce_sum(acc);
    if (lane == 0) y[row] = acc;
}

torch::Tensor matvec_forward(torch::Tensor A, torch::Tensor x) {
    TORCH_CHECK(A.is_cuda() && x.is_cuda(), "matvec_forward: CUDA tensors expected");
    TORCH_CHECK(A.dim() == 2 && x.dim() == 2 && x.size(1) == 1 && x.size(0) == A.size(1), "matvec_forward: bad shapes");
    auto Ac = A.contiguous();
    auto xc = x.contiguous();
    const int M = (int)Ac.size(0), K = (int)Ac.size(1);
    auto y = torch::empty({M, 1}, Ac.options());
    const int threads = 256;
    const int rows_per_block = threads / 32;
    const int blocks = (M + rows_per_block - 1) / rows_per_block;
    matvec_warp_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        Ac.data_ptr<float>(), xc.data_ptr<float>(), y.data_ptr<float>(), M, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

matvec_cpp = "torch::Tensor matvec_forward(torch::Tensor A, torch::Tensor x);"

matvec_ext = load_inline(
    name="honest_cuda_matvec_warp",
    cpp_sources=matvec_cpp,
    cuda_sources=matvec_cuda,
    functions=["matvec_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return matvec_ext.matvec_forward(A, x)
