import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """C = A @ B with A of shape (M, K) and B of shape (K, N)."""

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 2048
K = 4096
N = 2048


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
