# Honest CPU: ReLU, one flat loop over the contiguous input.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_cpp = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "relu_forward: float32 only");
    torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const float* __restrict__ px = xc.data_ptr<float>();
    float* __restrict__ po = out.data_ptr<float>();
    const int64_t n = xc.numel();
    for (int64_t i = 0; i < n; ++i) {
        const float v = px[i];
        po[i] = v > 0.0f ? v : 0.0f;
    }
    return out;
}
"""

relu_ext = load_inline(
    name="honest_cpu_relu",
    cpp_sources=relu_cpp,
    functions=["relu_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_ext.relu_forward(x)
