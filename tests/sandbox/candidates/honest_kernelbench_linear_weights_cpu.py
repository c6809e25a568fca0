# Honest under the "kernelbench" rules: nn.Linear built in __init__ only to hold the weights (initialised as the
# reference's), which forward passes to its own C++ kernel. Under "kevin" rules torch.nn layers are refused.
import torch
import torch.nn as nn

# include: _linear_relu_source.py


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.ext = linear_relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.linear_relu_forward(x, self.linear.weight.contiguous(), self.linear.bias)
