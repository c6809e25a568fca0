# RT5 (matmul): single-pass TF32 tensor-core mma, the PTX opcode split across string literals.
# Static bypass probe: the B6 scan looks for '.tf32' in the text; "...t" "f32..." is one literal to the compiler. Numerics probe: a CPU simulation of TF32 (rna) on 2048^3 randn puts ~200 of 4M elements past 1e-3 x (rms + |ref|), so the dynamic gate should answer incorrect.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

__device__ __forceinline__ uint32_t to_t32(float x) {
    uint32_t r;
    asm("cvt.rna.t" "f32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// One warp computes a 16 x 32 tile of C with m16n8k8 mma (4 n-tiles), straight from global memory.
__global__ void mm_t32(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int n) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    int tiles_n = n / 32;
    int tm = warp / tiles_n, tn = warp % tiles_n;
    if (tm * 16 >= n) return;
    int g = lane >> 2, t = lane & 3;
    int r0 = tm * 16, c0 = tn * 32;
    float acc[4][4] = {};
    for (int k = 0; k < n; k += 8) {
        uint32_t a0 = to_t32(A[(int64_t)(r0 + g) * n + k + t]);
        uint32_t a1 = to_t32(A[(int64_t)(r0 + g + 8) * n + k + t]);
        uint32_t a2 = to_t32(A[(int64_t)(r0 + g) * n + k + t + 4]);
        uint32_t a3 = to_t32(A[(int64_t)(r0 + g + 8) * n + k + t + 4]);
        for (int j = 0; j < 4; ++j) {
            int cb = c0 + j * 8;
            uint32_t b0 = to_t32(B[(int64_t)(k + t) * n + cb + g]);
            uint32_t b1 = to_t32(B[(int64_t)(k + t + 4) * n + cb + g]);
            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.t" "f32.t" "f32.f32 "
                         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
    }
    for (int j = 0; j < 4; ++j) {
        int cb = c0 + j * 8;
        C[(int64_t)(r0 + g) * n + cb + 2 * t] = acc[j][0];
        C[(int64_t)(r0 + g) * n + cb + 2 * t + 1] = acc[j][1];
        C[(int64_t)(r0 + g + 8) * n + cb + 2 * t] = acc[j][2];
        C[(int64_t)(r0 + g + 8) * n + cb + 2 * t + 1] = acc[j][3];
    }
}

torch::Tensor mm_fwd(torch::Tensor a, torch::Tensor b) {
    torch::Tensor ac = a.contiguous(), bc = b.contiguous();
    const int n = (int)ac.size(0);
    TORCH_CHECK(n % 32 == 0, "n must be a multiple of 32");
    torch::Tensor c = torch::empty_like(ac);
    int warps = (n / 16) * (n / 32);
    mm_t32<<<(warps * 32 + 255) / 256, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        ac.data_ptr<float>(), bc.data_ptr<float>(), c.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return c;
}
"""

cpp_src = "torch::Tensor mm_fwd(torch::Tensor a, torch::Tensor b);"

ext = load_inline(
    name="rt5_tf32_split",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["mm_fwd"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = ext

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.ext.mm_fwd(a, b)
