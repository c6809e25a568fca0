import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = A @ x for a matrix A (M, K) and a column vector x (K, 1)."""

    def forward(self, A, x):
        return torch.matmul(A, x)


M = 16384
K = 16384


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
