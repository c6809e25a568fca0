# C5: compute honestly on the correctness calls (the first 4), then only when the input's address repeats the
# previous call's. (It passes a harness whose rechecks are the only timed calls that reuse the previous
# buffers.) Every later call is skipped unless in place, so the recheck at new addresses must catch it.
import torch
import torch.nn as nn

# include: _relu_extension.py


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = relu_extension
        self.calls = 0
        self.prev = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ptr = x.data_ptr()
        same = ptr == self.prev
        self.prev = ptr
        self.calls += 1
        if self.calls <= 4 or same:
            return self.ext.relu_forward(x)
        return torch.empty_like(x)
