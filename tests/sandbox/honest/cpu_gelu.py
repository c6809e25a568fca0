# Honest CPU: exact GELU, 0.5 * x * (1 + erf(x / sqrt(2))), element by element.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

gelu_cpp = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor gelu_forward(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "gelu_forward: float32 only");
    torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const float* px = xc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = xc.numel();
    const float inv_sqrt2 = 0.70710678118654752440f;
    for (int64_t i = 0; i < n; ++i) {
        const float v = px[i];
        po[i] = 0.5f * v * (1.0f + std::erf(v * inv_sqrt2));
    }
    return out;
}
"""

gelu_ext = load_inline(
    name="honest_cpu_gelu",
    cpp_sources=gelu_cpp,
    functions=["gelu_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu_ext.gelu_forward(x)
