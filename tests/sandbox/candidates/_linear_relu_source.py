# Shared honest Linear + ReLU extension, inlined by `# include: _linear_relu_source.py` (sandbox_cases.py).
from torch.utils.cpp_extension import load_inline

linear_relu_cpp_source = r"""
#include <torch/extension.h>

torch::Tensor linear_relu_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && b.dim() == 1, "linear_relu_forward: bad ranks");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "linear_relu_forward: float32 only");
    torch::Tensor xc = x.contiguous();
    torch::Tensor wc = w.contiguous();
    torch::Tensor bc = b.contiguous();
    const int64_t n = xc.size(0), k = xc.size(1), m = wc.size(0);
    TORCH_CHECK(wc.size(1) == k && bc.size(0) == m, "linear_relu_forward: shape mismatch");
    torch::Tensor out = torch::empty({n, m}, xc.options());
    const float* px = xc.data_ptr<float>();
    const float* pw = wc.data_ptr<float>();
    const float* pb = bc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < m; ++c) {
            float acc = pb[c];
            for (int64_t i = 0; i < k; ++i) {
                acc += px[r * k + i] * pw[c * k + i];
            }
            po[r * m + c] = acc > 0.0f ? acc : 0.0f;
        }
    }
    return out;
}
"""

linear_relu_extension = load_inline(
    name="kevin_test_linear_relu_cpu",
    cpp_sources=linear_relu_cpp_source,
    functions=["linear_relu_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)
