"""A timed call's fresh-input work on a GPU: the sandbox's permutation kernel against the stable order of random keys.

One 512 MiB tensor (AvgPool3d's input): per call, the plan's source (`FreshInputs.source_for`, a scatter) and the
call's input (`FreshInputs.make`, a gather into a new buffer), as the timed loop draws them. The kernel computes each
element's place from round keys in the same pass; the key order (the sandbox's way before the kernel) sorts n random
32-bit keys for a stored permutation, then scatters or gathers through it. 3 untimed, then 20 timed, the two
alternated twice in one process.

    python3 benchmarks/fresh_inputs_ab.py
"""
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
from kevin.sandbox.build import harness  # noqa: E402
from kevin.sandbox.worker import timing  # noqa: E402

dev = torch.device("cuda")
n = 16 * 32 * 64 ** 3  # AvgPool3d's input, 512 MiB
pool = [[torch.randn(n, device=dev)]]
harness.check_launch(harness.build_permute(tempfile.mkdtemp(), harness.default_arch()), dev)  # binds it too
fresh = timing.FreshInputs(pool, rng=random.Random(0), keep_alive_bytes=4 << 30)


def kernel(k: int) -> None:
    fresh.source_for(pool[0], k)
    fresh.make(pool[0], k)


def key_order(k: int) -> None:
    g = torch.Generator(device=dev).manual_seed(k)
    x = pool[0][0]
    for scatter in (True, False):
        keys = torch.randint(-2**31, 2**31, (n,), generator=g, device=dev, dtype=torch.int32)
        perm = torch.sort(keys, stable=True).indices
        if scatter:
            torch.empty_like(x)[perm] = x
        else:
            torch.empty(n + 64, device=dev)[64:].copy_(x[perm])


def bench(label: str, call) -> None:
    for k in range(3):
        call(k)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for k in range(20):
        call(k)
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t) / 20 * 1e3
    print(label, round(ms, 2), "ms per call (plan's source + call's make)", flush=True)


for _ in range(2):
    bench("kernel", kernel)
    bench("key_order", key_order)
print(torch.cuda.get_device_name(), torch.__version__)
