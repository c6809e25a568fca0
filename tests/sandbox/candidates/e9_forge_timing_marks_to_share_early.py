# E9: write forged "timing_begin", "timing_end" and "released" lines on the report pipe at import, so that the
# parent would end the timing's hold alone at once and let other work onto the device beside the timed calls (whose
# checks, calibrated on a quiet device, would loosen). The kernel itself is honest.
import os
import sys

os.writev(int(sys.argv[2]), [b'{"event": "timing_begin"}\n{"event": "timing_end", "n_calls": 15}\n'
                             b'{"event": "released"}\n'])

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

# include: _relu_extension.py


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.relu_forward(x)
