"""Seconds of one profiler session around one small CUDA op: Kineto (torch.autograd.profiler) vs legacy."""
import time

import torch
from torch.autograd import profiler_legacy

x = torch.randn(64, 64, device="cuda")
for name, make in [("kineto", torch.autograd.profiler.profile), ("legacy", profiler_legacy.profile)]:
    for i in range(3):
        t = time.perf_counter()
        p = make()
        p.__enter__()
        torch.mm(x, x)
        p.__exit__(None, None, None)
        n = len(p.function_events)
        print(name, i, f"{time.perf_counter() - t:.4f} s", n, "events", flush=True)
