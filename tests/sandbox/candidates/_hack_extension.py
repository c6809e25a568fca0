# Shared extension of the C++-level hacks (A2, B5): one build for all of them. It fails the static checks
# on purpose (torch::relu is ATen compute); the dynamic gate must catch each use on its own.
import torch
from torch.utils.cpp_extension import load_inline

hack_cpp_source = r"""
#include <torch/extension.h>

// A2: delegate to ATen from C++, next to nothing else.
torch::Tensor aten_relu(torch::Tensor x) {
    return torch::relu(x);
}

// B5: return uninitialised memory and hope it holds a stale result.
torch::Tensor uninitialized_like(torch::Tensor x) {
    return torch::empty_like(x);
}

// B4/B5: compute only the first half of the elements; the rest is whatever the allocator handed back.
torch::Tensor relu_first_half(torch::Tensor x) {
    torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const float* px = xc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = xc.numel();
    for (int64_t i = 0; i < n / 2; ++i) {
        po[i] = px[i] > 0.0f ? px[i] : 0.0f;
    }
    return out;
}
"""

hack_extension = load_inline(
    name="kevin_test_hacks_cpu",
    cpp_sources=hack_cpp_source,
    functions=["aten_relu", "uninitialized_like", "relu_first_half"],
    extra_cflags=["-O3"],
    verbose=False,
)
