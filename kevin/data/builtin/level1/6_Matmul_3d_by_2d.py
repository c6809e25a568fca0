import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """C[b] = A[b] @ B: a batch of matrices (batch, M, K) times one matrix (K, N)."""

    def forward(self, A, B):
        return torch.matmul(A, B)


batch_size = 16
M = 1024
K = 2048
N = 1024


def get_inputs():
    return [torch.randn(batch_size, M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
