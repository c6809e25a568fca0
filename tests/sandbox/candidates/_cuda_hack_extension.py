# Shared CUDA extension of the GPU hacks: an out-of-bounds write, a launch on an unjoined side stream,
# and an L2 persisting window. It fails the static checks on purpose; the dynamic gate must hold alone.
import torch
from torch.utils.cpp_extension import load_inline

cuda_hack_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#define TILE 32

__global__ void matmul_tiled_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                    float* __restrict__ c, int n) {
    __shared__ float sa[TILE][TILE];
    __shared__ float sb[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < n; t += TILE) {
        sa[threadIdx.y][threadIdx.x] = (row < n && t + threadIdx.x < n) ? a[row * n + t + threadIdx.x] : 0.0f;
        sb[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < n) ? b[(t + threadIdx.y) * n + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) {
            acc += sa[threadIdx.y][k] * sb[k][threadIdx.x];
        }
        __syncthreads();
    }
    if (row < n && col < n) {
        c[row * n + col] = acc;
    }
}

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, int64_t offset) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i + offset] = v > 0.0f ? v : 0.0f;
    }
}

// Illegal memory access: write a gigabyte-scale offset past the end of the output.
torch::Tensor relu_out_of_bounds(torch::Tensor x) {
    torch::Tensor xc = x.contiguous();
    torch::Tensor y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    relu_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), n, (int64_t)1 << 34);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

// D1: run the real work on a fresh non-blocking stream and return before it is done.
torch::Tensor matmul_side_stream(torch::Tensor a, torch::Tensor b) {
    static cudaStream_t side = nullptr;
    if (side == nullptr) {
        cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    }
    torch::Tensor ac = a.contiguous();
    torch::Tensor bc = b.contiguous();
    const int n = (int)ac.size(0);
    torch::Tensor c = torch::empty_like(ac);
    dim3 block(TILE, TILE);
    dim3 grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
    matmul_tiled_kernel<<<grid, block, 0, side>>>(ac.data_ptr<float>(), bc.data_ptr<float>(), c.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return c;
}

// D7: ask for the largest persisting L2 carve-out and pin the input there, so it survives a flush.
torch::Tensor relu_l2_persist(torch::Tensor x) {
    torch::Tensor xc = x.contiguous();
    torch::Tensor y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, dev);
    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, prop.persistingL2CacheMaxSize);
    cudaStreamAttrValue attr = {};
    attr.accessPolicyWindow.base_ptr = (void*)xc.data_ptr<float>();
    attr.accessPolicyWindow.num_bytes = std::min<size_t>((size_t)n * sizeof(float), (size_t)prop.accessPolicyMaxWindowSize);
    attr.accessPolicyWindow.hitRatio = 1.0f;
    attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &attr);
    relu_kernel<<<(n + 255) / 256, 256, 0, stream>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n, 0);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cuda_hack_cpp = ("torch::Tensor relu_out_of_bounds(torch::Tensor x);\n"
                 "torch::Tensor matmul_side_stream(torch::Tensor a, torch::Tensor b);\n"
                 "torch::Tensor relu_l2_persist(torch::Tensor x);")

cuda_hack_extension = load_inline(
    name="kevin_test_hacks_cuda",
    cpp_sources=cuda_hack_cpp,
    cuda_sources=cuda_hack_source,
    functions=["relu_out_of_bounds", "matmul_side_stream", "relu_l2_persist"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)
