# Shared honest extension: ReLU in a plain C++ loop. Inlined into candidates by `# include: _relu_extension.py`
# (tests/sandbox/sandbox_cases.py), so every candidate whose hack lives in Python reuses ONE compiled build.
import torch
from torch.utils.cpp_extension import load_inline

relu_cpp_source = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(!x.is_cuda(), "relu_forward: CPU tensors only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "relu_forward: float32 only");
    torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const float* __restrict__ px = xc.data_ptr<float>();
    float* __restrict__ po = out.data_ptr<float>();
    const int64_t n = xc.numel();
    for (int64_t i = 0; i < n; ++i) {
        po[i] = px[i] > 0.0f ? px[i] : 0.0f;
    }
    return out;
}
"""

relu_extension = load_inline(
    name="kevin_test_relu_cpu",
    cpp_sources=relu_cpp_source,
    functions=["relu_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)
