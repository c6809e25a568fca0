# Honest CUDA: fp32 C = A @ B with 32 x 32 shared-memory tiles.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

matmul_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#define TILE 32

__global__ void matmul_tiled_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                    int M, int K, int N) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TILE) {
        As[threadIdx.y][threadIdx.x] = (row < M && t + threadIdx.x < K) ? A[(int64_t)row * K + t + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && t + threadIdx.y < K) ? B[(int64_t)(t + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[(int64_t)row * N + col] = acc;
}

torch::Tensor matmul_forward(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "matmul_forward: CUDA tensors expected");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "matmul_forward: bad shapes");
    auto Ac = A.contiguous();
    auto Bc = B.contiguous();
    const int M = (int)Ac.size(0), K = (int)Ac.size(1), N = (int)Bc.size(1);
    auto C = torch::empty({M, N}, Ac.options());
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    matmul_tiled_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        Ac.data_ptr<float>(), Bc.data_ptr<float>(), C.data_ptr<float>(), M, K, N);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
"""

matmul_cpp = "torch::Tensor matmul_forward(torch::Tensor A, torch::Tensor B);"

matmul_ext = load_inline(
    name="honest_cuda_matmul_tiled",
    cpp_sources=matmul_cpp,
    cuda_sources=matmul_cuda,
    functions=["matmul_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return matmul_ext.matmul_forward(A, B)
