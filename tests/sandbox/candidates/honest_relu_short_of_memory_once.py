# Honest: ReLU by the shared C++ extension, in a process that finds the device out of memory the first time it runs
# (as when other processes sharing the device hold it). The marker file is the test's: a candidate can touch it only
# because this sandbox runs without its static checks.
import os

import torch
import torch.nn as nn

# include: _relu_extension.py

MARKER = "MARKER_PATH"


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not os.path.exists(MARKER):
            open(MARKER, "w").close()
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return self.ext.relu_forward(x)
