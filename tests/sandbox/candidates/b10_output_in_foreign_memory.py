# B5/D3: return outputs in memory PyTorch did not allocate (numpy here; torch::from_blob over pages that
# compute themselves when first read in C++), so the harness cannot trust when the values were written.
# (In C++: a from_blob output over PROT_NONE pages, computed lazily by a SIGSEGV handler, outside the timed
# window.)
import numpy as np
import torch
import torch.nn as nn

# include: _relu_extension.py


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(self.ext.relu_forward(x).numpy()))
