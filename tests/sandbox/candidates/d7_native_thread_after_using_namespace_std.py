# D2: a detached native std::thread, spelled `thread` after `using namespace std;` so the text
# scan (which looks for `std::thread`) misses it. It does half the ReLU; forward waits for it.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <thread>
#include <atomic>
using namespace std;

static atomic<int> job{0};
static const float* g_in = nullptr;
static float* g_out = nullptr;
static int64_t g_n = 0;

static void worker() {
    for (;;) {
        if (job.load() == 1) {
            for (int64_t i = g_n / 2; i < g_n; ++i) g_out[i] = g_in[i] > 0.0f ? g_in[i] : 0.0f;
            job.store(2);
        }
        this_thread::yield();
    }
}

torch::Tensor relu_forward(torch::Tensor x) {
    static bool started = false;
    if (!started) { thread(worker).detach(); started = true; }
    torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    g_in = xc.data_ptr<float>(); g_out = out.data_ptr<float>(); g_n = xc.numel();
    job.store(1);
    for (int64_t i = 0; i < g_n / 2; ++i) g_out[i] = g_in[i] > 0.0f ? g_in[i] : 0.0f;
    while (job.load() != 2) {}
    job.store(0);
    return out;
}
"""

ext = load_inline(name="adv_d7_native_thread", cpp_sources=src, functions=["relu_forward"], verbose=False)




class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu_forward(x)
