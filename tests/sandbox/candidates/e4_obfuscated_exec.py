# E4: hide the PyTorch call from a static scan: build the name at run time and exec a base64 payload.
import base64

import torch
import torch.nn as nn

# include: _relu_extension.py

PAYLOAD = base64.b64encode(b"def hidden(x):\n    import torch\n    return getattr(torch, 're' + 'lu')(x)\n")
namespace = {}
exec(base64.b64decode(PAYLOAD), namespace)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return namespace["hidden"](x)
