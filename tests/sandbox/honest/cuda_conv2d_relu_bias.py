# Honest CUDA: Conv2d (same padding) + ReLU + bias in two launches: a padded direct convolution with the conv
# bias, then ReLU and the extra per-channel bias in place. Parameters initialised like the reference's.
import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

conv_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__global__ void conv2d_same_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                   const float* __restrict__ cb, float* __restrict__ y,
                                   int N, int C, int H, int W, int O, int K) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t total = (int64_t)N * O * H * W;
    if (idx >= total) return;
    const int ow = idx % W;
    const int oh = (idx / W) % H;
    const int o = (idx / ((int64_t)W * H)) % O;
    const int n = idx / ((int64_t)W * H * O);
    const int pad = K / 2;
    float acc = cb[o];
    for (int c = 0; c < C; ++c) {
        const float* xp = x + ((int64_t)n * C + c) * H * W;
        const float* wp = w + ((int64_t)o * C + c) * K * K;
        for (int kh = 0; kh < K; ++kh) {
            const int ih = oh + kh - pad;
            if (ih < 0 || ih >= H) continue;
            for (int kw = 0; kw < K; ++kw) {
                const int iw = ow + kw - pad;
                if (iw < 0 || iw >= W) continue;
                acc += xp[ih * W + iw] * wp[kh * K + kw];
            }
        }
    }
    y[idx] = acc;
}

__global__ void relu_bias_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t n, int O, int HW) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int o = (i / HW) % O;
    const float v = y[i];
    y[i] = (v > 0.0f ? v : 0.0f) + bias[o];
}

torch::Tensor conv_relu_bias_forward(torch::Tensor x, torch::Tensor w, torch::Tensor cb, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "conv_relu_bias_forward: 4-D CUDA tensor expected");
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto cbc = cb.contiguous();
    auto bc = bias.contiguous();
    const int N = xc.size(0), C = xc.size(1), H = xc.size(2), W = xc.size(3);
    const int O = wc.size(0), K = wc.size(2);
    auto y = torch::empty({N, O, H, W}, xc.options());
    const int64_t total = (int64_t)N * O * H * W;
    const unsigned blocks = (unsigned)((total + 255) / 256);
    auto stream = at::cuda::getCurrentCUDAStream();
    conv2d_same_kernel<<<blocks, 256, 0, stream>>>(xc.data_ptr<float>(), wc.data_ptr<float>(), cbc.data_ptr<float>(),
                                                   y.data_ptr<float>(), N, C, H, W, O, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    relu_bias_kernel<<<blocks, 256, 0, stream>>>(y.data_ptr<float>(), bc.data_ptr<float>(), total, O, H * W);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

conv_cpp = "torch::Tensor conv_relu_bias_forward(torch::Tensor x, torch::Tensor w, torch::Tensor cb, torch::Tensor bias);"

conv_ext = load_inline(
    name="honest_cuda_conv2d_relu_bias",
    cpp_sources=conv_cpp,
    cuda_sources=conv_cuda,
    functions=["conv_relu_bias_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, bias_shape) -> None:
        super().__init__()
        self.conv_weight = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size, kernel_size))
        self.conv_bias = nn.Parameter(torch.empty(out_channels))
        nn.init.kaiming_uniform_(self.conv_weight, a=math.sqrt(5))
        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.conv_weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        nn.init.uniform_(self.conv_bias, -bound, bound)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return conv_ext.conv_relu_bias_forward(x, self.conv_weight, self.conv_bias, self.bias)
