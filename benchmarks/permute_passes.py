"""One pass of the sandbox's permutation kernel over a 512 MiB tensor, as each fresh input of a timed call costs.

Variants, each built by nvcc from `harness.PERMUTE_CU` (the others by editing its text):

    gather            dst[i] = src[prp(i)]: what `FreshInputs.make` runs
    scatter           dst[prp(j)] = src[j] as the sandbox runs it, a gather through prp's inverse (`source_for`)
    scatter_writes    the same scatter with scattered writes, dst[prp(j)] = src[j] (the kernel's way before)
    gather_rounds_32  the gather with 32-bit rounds (a 32-bit hash, 32-bit keys): is the rounds' arithmetic the cost?

and for scale a copy (the pass's traffic in order) and torch's gather through a stored random permutation. 3 untimed
and 20 timed passes of each, all alternated twice in one process.

    python3 benchmarks/permute_passes.py
"""
import ctypes
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
from kevin.sandbox.build import harness  # noqa: E402

BODY = "    dst[i] = src[scatter ? prp_inverse(i, n, bits, keys) : prp(i, n, bits, keys)];"
WRITES = "    const u64 j = prp(i, n, bits, keys);\n    if (scatter) dst[j] = src[i]; else dst[i] = src[j];"
MIX_64 = """__host__ __device__ __forceinline__ u64 mix(u64 z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}"""
MIX_32 = """__host__ __device__ __forceinline__ unsigned mix32(unsigned x) {
  x = (x ^ (x >> 16)) * 0x7feb352dU;
  x = (x ^ (x >> 15)) * 0x846ca68bU;
  return x ^ (x >> 16);
}
__host__ __device__ __forceinline__ u64 mix(u64 z) { return mix32((unsigned)z ^ (unsigned)(z >> 32)); }"""


def variant(edits: list[tuple[str, str]]) -> str:
    source = harness.PERMUTE_CU
    for old, new in edits:
        if old not in source:
            raise SystemExit(f"the kernel's text changed: {old[:40]!r} not found")
        source = source.replace(old, new)
    return source


def build(source: str, arch: str) -> str:
    d = tempfile.mkdtemp()
    src, lib = os.path.join(d, "permute.cu"), os.path.join(d, "permute.so")
    with open(src, "w") as f:
        f.write(source)
    subprocess.run([harness.nvcc(), "-O3", "-shared", "-Xcompiler", "-fPIC", *harness.arch_flags(arch), "-o", lib,
                    src], check=True)
    return lib


def bind(lib: str, scatter: bool):
    fn = ctypes.CDLL(lib).kevin_permute
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_int, ctypes.c_int,
                   ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_void_p]
    fn.restype = ctypes.c_int
    keys = (ctypes.c_ulonglong * 6)(*[(0x9E3779B97F4A7C15 * (k + 1)) % (1 << 64) for k in range(6)])

    def call(dst: torch.Tensor, src: torch.Tensor) -> None:
        if fn(dst.data_ptr(), src.data_ptr(), src.numel(), src.element_size(), int(scatter), keys,
              torch.cuda.current_stream().cuda_stream):
            raise RuntimeError("launch failed")
    return call


def main() -> None:
    dev = torch.device("cuda")
    arch = harness.default_arch(dev)
    sandbox = build(harness.PERMUTE_CU, arch)
    writes = build(variant([(BODY, WRITES)]), arch)
    rounds_32 = build(variant([(MIX_64, MIX_32)]), arch)
    n = 16 * 32 * 64 ** 3  # AvgPool3d's input, 512 MiB
    src, dst = torch.randn(n, device=dev), torch.empty(n, device=dev)
    perm = torch.randperm(n, device=dev)
    calls = {"gather": bind(sandbox, False), "scatter": bind(sandbox, True), "scatter_writes": bind(writes, True),
             "gather_rounds_32": bind(rounds_32, False), "copy": lambda d, s: d.copy_(s),
             "torch_gather_stored_perm": lambda d, s: torch.index_select(s, 0, perm, out=d)}
    a = torch.arange(4099, device=dev, dtype=torch.int32)  # every variant permutes; both scatters are one permutation
    outs = {}
    for label in ("gather", "scatter", "scatter_writes", "gather_rounds_32"):
        outs[label] = torch.full_like(a, -1)
        calls[label](outs[label], a)
        assert torch.equal(outs[label].sort().values, a), label
    assert torch.equal(outs["scatter"], outs["scatter_writes"]) and not torch.equal(outs["gather"], a)
    for _ in range(2):
        for label, call in calls.items():
            for _ in range(3):
                call(dst, src)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(20):
                call(dst, src)
            torch.cuda.synchronize()
            print(f"{label} {(time.perf_counter() - t) / 20 * 1e3:.2f} ms a pass", flush=True)
    print(torch.cuda.get_device_name(), torch.__version__)


if __name__ == "__main__":
    main()
