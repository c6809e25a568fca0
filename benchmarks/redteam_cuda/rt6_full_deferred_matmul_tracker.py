# RT6 (matmul, control): the whole matmul deferred to the snapshot allocation.
# Expected to be caught by the parent's wall-clock check (hidden work above 2 x reported + 0.5 ms); the control for RT7, which adds null-call inflation.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <cstdint>


// The timing phase starts when the harness allocates its L2 flush buffer (max(2 x L2, 256 MB)); the NaN prefill
// before the correctness phase is gigabytes, so a 200 MB .. 1 GB allocation marks the timing loop.
static bool g_timing = false;
static bool g_attached = false;
static inline bool is_flush_alloc(size_t size) { return size >= (200ull << 20) && size <= (1ull << 30); }
static inline cudaStream_t cur_stream() { return c10::cuda::getCurrentCUDAStream(); }

#define TILE 32
// Honest tiled fp32 matmul over rows [row0, row1) (the same kernel as the honest candidate).
__global__ void mm_rows(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int n,
                        int row0, int row1, const int* skip) {
    if (skip != nullptr && *skip == 0) return;
    __shared__ float sa[TILE][TILE];
    __shared__ float sb[TILE][TILE];
    int row = row0 + blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < n; t += TILE) {
        sa[threadIdx.y][threadIdx.x] = (row < row1 && t + threadIdx.x < n) ? a[(int64_t)row * n + t + threadIdx.x] : 0.0f;
        sb[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < n) ? b[(int64_t)(t + threadIdx.y) * n + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += sa[threadIdx.y][k] * sb[k][threadIdx.x];
        __syncthreads();
    }
    if (row < row1 && col < n) c[(int64_t)row * n + col] = acc;
}
static void launch_mm(const float* a, const float* b, float* c, int n, int row0, int row1, const int* skip,
                      cudaStream_t s) {
    if (row1 <= row0) return;
    dim3 block(TILE, TILE);
    dim3 grid((n + TILE - 1) / TILE, (row1 - row0 + TILE - 1) / TILE);
    mm_rows<<<grid, block, 0, s>>>(a, b, c, n, row0, row1, skip);
}

static const float* p_a = nullptr;
static const float* p_b = nullptr;
static float* p_c = nullptr;
static int p_n = 0;
static bool pending = false;

static void flush_pending() {
    if (!pending) return;
    pending = false;
    launch_mm(p_a, p_b, p_c, p_n, 0, p_n, nullptr, cur_stream());
}

static void on_event(const c10::cuda::CUDACachingAllocator::TraceEntry& te) {
    if (te.action_ != c10::cuda::CUDACachingAllocator::TraceEntry::ALLOC) return;
    if (is_flush_alloc(te.size_)) g_timing = true;
    flush_pending();
}

torch::Tensor mm_fwd(torch::Tensor a, torch::Tensor b) {
    if (!g_attached) { g_attached = true; c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(on_event); }
    flush_pending();
    torch::Tensor ac = a.contiguous(), bc = b.contiguous();
    const int n = (int)ac.size(0);
    torch::Tensor c = torch::empty_like(ac);
    if (!g_timing) {
        launch_mm(ac.data_ptr<float>(), bc.data_ptr<float>(), c.data_ptr<float>(), n, 0, n, nullptr, cur_stream());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        return c;
    }
    p_a = ac.data_ptr<float>(); p_b = bc.data_ptr<float>(); p_c = c.data_ptr<float>(); p_n = n; pending = true;
    return c;
}
"""

cpp_src = "torch::Tensor mm_fwd(torch::Tensor a, torch::Tensor b);"

ext = load_inline(
    name="rt6_full_deferred_matmul",
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
