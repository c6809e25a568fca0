# E9: write a forged "imported" line on the report pipe before the extensions load, so that the parent's check of
# the built libraries runs while none is mapped; then call ATen from C++ in the timed calls only (the correctness
# calls are told apart by their NaN-filled allocations).
import os
import sys

os.writev(int(sys.argv[2]), [b'{"event": "imported"}\n'])

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

# include: _relu_extension.py
# include: _hack_extension.py


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension
        self.hack = hack_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probe = torch.empty(1).item()
        if probe != probe:
            return self.ext.relu_forward(x)
        return self.hack.aten_relu(x)
