# Honest CUDA: direct 2D convolution (stride 1, no padding), one thread per output element; weight and bias
# initialised exactly like nn.Conv2d.
import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

conv_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__global__ void conv2d_direct_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                     const float* __restrict__ b, float* __restrict__ y,
                                     int N, int C, int H, int W, int O, int KH, int KW, int OH, int OW) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t total = (int64_t)N * O * OH * OW;
    if (idx >= total) return;
    const int ow = idx % OW;
    const int oh = (idx / OW) % OH;
    const int o = (idx / ((int64_t)OW * OH)) % O;
    const int n = idx / ((int64_t)OW * OH * O);
    float acc = b[o];
    for (int c = 0; c < C; ++c) {
        const float* xp = x + (((int64_t)n * C + c) * H + oh) * W + ow;
        const float* wp = w + ((int64_t)o * C + c) * KH * KW;
        for (int kh = 0; kh < KH; ++kh) {
            for (int kw = 0; kw < KW; ++kw) {
                acc += xp[kh * W + kw] * wp[kh * KW + kw];
            }
        }
    }
    y[idx] = acc;
}

torch::Tensor conv2d_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4 && w.dim() == 4, "conv2d_forward: 4-D CUDA tensors expected");
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto bc = b.contiguous();
    const int N = xc.size(0), C = xc.size(1), H = xc.size(2), W = xc.size(3);
    const int O = wc.size(0), KH = wc.size(2), KW = wc.size(3);
    const int OH = H - KH + 1, OW = W - KW + 1;
    auto y = torch::empty({N, O, OH, OW}, xc.options());
    const int64_t total = (int64_t)N * O * OH * OW;
    const int threads = 256;
    conv2d_direct_kernel<<<(unsigned)((total + threads - 1) / threads), threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(),
        N, C, H, W, O, KH, KW, OH, OW);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

conv_cpp = "torch::Tensor conv2d_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b);"

conv_ext = load_inline(
    name="honest_cuda_conv2d_direct",
    cpp_sources=conv_cpp,
    cuda_sources=conv_cuda,
    functions=["conv2d_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.empty(out_channels))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return conv_ext.conv2d_forward(x, self.weight, self.bias)
