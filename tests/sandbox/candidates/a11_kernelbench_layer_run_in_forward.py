# A11 (kernelbench rules): hold nn.Linear for its weights, then run the layer itself in forward.
import torch
import torch.nn as nn

# include: _linear_relu_source.py


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.ext = linear_relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        return self.ext.linear_relu_forward(y, self.linear.weight, self.linear.bias)
