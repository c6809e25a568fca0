# Honest CUDA: fp32 C = A @ B, one thread per output element reading global memory (a first attempt).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

matmul_cuda = r"""
#include <torch/extension.h>

__global__ void matmul_naive_kernel(const float* A, const float* B, float* C, int M, int K, int N) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k) {
            sum += A[row * K + k] * B[k * N + col];
        }
        C[row * N + col] = sum;
    }
}

torch::Tensor matmul_forward(torch::Tensor A, torch::Tensor B) {
    auto Ac = A.contiguous();
    auto Bc = B.contiguous();
    int M = Ac.size(0), K = Ac.size(1), N = Bc.size(1);
    auto C = torch::empty({M, N}, Ac.options());
    dim3 block(16, 16);
    dim3 grid((N + 15) / 16, (M + 15) / 16);
    matmul_naive_kernel<<<grid, block>>>(Ac.data_ptr<float>(), Bc.data_ptr<float>(), C.data_ptr<float>(), M, K, N);
    return C;
}
"""

matmul_cpp = "torch::Tensor matmul_forward(torch::Tensor A, torch::Tensor B);"

matmul_ext = load_inline(
    name="honest_cuda_matmul_naive",
    cpp_sources=matmul_cpp,
    cuda_sources=matmul_cuda,
    functions=["matmul_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return matmul_ext.matmul_forward(A, B)
