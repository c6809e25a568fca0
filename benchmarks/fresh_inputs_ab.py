"""A timed call's fresh-input work on a GPU with the key-order permutation against ``torch.randperm`` (int32).

One 512 MiB tensor (AvgPool3d's input): per call, the plan's source (`FreshInputs.source_for`) and the call's input
(`FreshInputs.make`), as the timed loop draws them; 3 untimed, then 20 timed, the two variants alternated twice in
one process. The randperm variant skips the ``.long()`` copy its source path also paid.

    python3 benchmarks/fresh_inputs_ab.py
"""
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
from kevin.sandbox.worker import timing  # noqa: E402

dev = torch.device("cuda")
n = 16 * 32 * 64 ** 3  # AvgPool3d's input, 512 MiB
pool = [[torch.randn(n, device=dev)]]


def bench(label: str) -> None:
    f = timing.FreshInputs(pool, rng=random.Random(0), keep_alive_bytes=4 << 30)
    for k in range(3):
        f.source_for(pool[0], k)
        f.make(pool[0], k)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for k in range(20):
        f.source_for(pool[0], k)
        f.make(pool[0], k)
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t) / 20 * 1e3
    print(label, round(ms, 2), "ms per call (plan's source + call's make)", flush=True)


def randperm_int32(n: int, g: torch.Generator) -> torch.Tensor:
    return torch.randperm(n, device=g.device, generator=g, dtype=torch.int32)


key_order = timing._key_order
for _ in range(2):
    timing._key_order = key_order
    bench("key_order")
    timing._key_order = randperm_int32
    bench("randperm_int32")
print(torch.cuda.get_device_name(), torch.__version__)
