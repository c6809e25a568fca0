"""The sandbox's own CUDA kernel: the keyed permutation that gives every timed call its fresh inputs on a GPU.

A timed call's inputs are a pool set permuted by a permutation drawn from a secret seed (`..worker.timing`). Drawn
as the stable order of random keys, a permutation of a 512 MiB input costs a sort of every element, twice a call (the
plan's and the call's): tens of times a fast kernel's runtime, all of it inside the timing's hold of the device. This
kernel computes the permutation instead of storing it: element ``i`` moves to ``prp(i)``, a keyed pseudo-random
permutation of ``[0, n)``, six alternating Feistel rounds over the index's bits (each half masked in turn by a
splitmix64 hash of the other half and a round key), cycle-walked into range. One pass gathers every element, through
the permutation or (for a scatter) its inverse; no permutation ever exists in memory, where a candidate could look
for one.

Built by nvcc without torch's headers (seconds) for each Sandbox into its private directory, tried once on the GPU,
and hashed; each worker loads it through ctypes before any candidate code runs, from a copy of the bytes whose hash it
checked (`..worker.timing.load_permute`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

PERMUTE_CU = r"""
#include <cuda_runtime.h>

typedef unsigned long long u64;
struct Keys { u64 k[6]; };
struct Pair { u64 a, b; };  // 16-byte elements (complex128) at 8-byte alignment

__host__ __device__ __forceinline__ u64 mix(u64 z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__host__ __device__ __forceinline__ u64 prp(u64 i, u64 n, int bits, const Keys& keys) {
  const int b = bits - bits / 2;
  const u64 mb = (1ULL << b) - 1, ma = (1ULL << (bits / 2)) - 1;
  do {  // a permutation of [0, 2^bits), applied again until the value is below n: a permutation of [0, n)
    u64 l = i >> b, r = i & mb;
    for (int k = 0; k < 6; k += 2) {
      l ^= mix(r ^ keys.k[k]) & ma;
      r ^= mix(l ^ keys.k[k + 1]) & mb;
    }
    i = (l << b) | r;
  } while (i >= n);
  return i;
}

// prp's inverse: the rounds undone in reverse order, the walk the same (the walk of a permutation's inverse is the
// inverse of its walk)
__host__ __device__ __forceinline__ u64 prp_inverse(u64 i, u64 n, int bits, const Keys& keys) {
  const int b = bits - bits / 2;
  const u64 mb = (1ULL << b) - 1, ma = (1ULL << (bits / 2)) - 1;
  do {
    u64 l = i >> b, r = i & mb;
    for (int k = 4; k >= 0; k -= 2) {
      r ^= mix(l ^ keys.k[k + 1]) & mb;
      l ^= mix(r ^ keys.k[k]) & ma;
    }
    i = (l << b) | r;
  } while (i >= n);
  return i;
}

template <typename T>
__global__ void permute(T* __restrict__ dst, const T* __restrict__ src, u64 n, int bits, Keys keys, int scatter) {
  // a scatter (dst[prp(j)] = src[j]) as the gather through the inverse: the writes stay in order; scattered writes
  // of small elements ran at about half the rate of scattered reads (a partial sector is read before it is written)
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
    dst[i] = src[scatter ? prp_inverse(i, n, bits, keys) : prp(i, n, bits, keys)];
  }
}

template <typename T>
static int launch(void* dst, const void* src, u64 n, int bits, const Keys& keys, int scatter, cudaStream_t stream) {
  const u64 blocks = (n + 255) / 256 < (1ULL << 20) ? (n + 255) / 256 : (1ULL << 20);
  permute<T><<<(unsigned)blocks, 256, 0, stream>>>((T*)dst, (const T*)src, n, bits, keys, scatter);
  return (int)cudaGetLastError();
}

static int index_bits(u64 n) {
  int bits = 2;
  while (bits < 64 && (1ULL << bits) < n) ++bits;
  return bits;
}

// dst[i] = src[prp(i)] (gather) or dst[prp(i)] = src[i] (scatter), n elements of elem_size bytes; 0 or a cudaError_t
// (-1: an element size the kernel has no type for).
extern "C" int kevin_permute(void* dst, const void* src, u64 n, int elem_size, int scatter, const u64* k,
                             void* stream) {
  if (n == 0) return 0;
  const int bits = index_bits(n);
  Keys keys;
  for (int i = 0; i < 6; ++i) keys.k[i] = k[i];
  cudaStream_t s = (cudaStream_t)stream;
  switch (elem_size) {
    case 1: return launch<unsigned char>(dst, src, n, bits, keys, scatter, s);
    case 2: return launch<unsigned short>(dst, src, n, bits, keys, scatter, s);
    case 4: return launch<unsigned int>(dst, src, n, bits, keys, scatter, s);
    case 8: return launch<u64>(dst, src, n, bits, keys, scatter, s);
    case 16: return launch<Pair>(dst, src, n, bits, keys, scatter, s);
    default: return -1;
  }
}

// prp(i), or its inverse, on the host, by the same code as the kernel's: what the tests check the kernel against.
extern "C" u64 kevin_prp(u64 i, u64 n, const u64* k, int inverse) {
  Keys keys;
  for (int j = 0; j < 6; ++j) keys.k[j] = k[j];
  return inverse ? prp_inverse(i, n, index_bits(n), keys) : prp(i, n, index_bits(n), keys);
}
"""


class HarnessBuildError(RuntimeError):
    """The sandbox's own kernel could not be built, or does not run on the GPU: the CUDA backend cannot time."""


@dataclass(frozen=True)
class Built:
    """A built permutation library: its path and the SHA-256 of its bytes, which a worker checks before loading it."""

    path: str
    sha256: str


# torch's names for architecture lists (`torch.utils.cpp_extension`), as TORCH_CUDA_ARCH_LIST accepts them
NAMED_ARCHES = {"Volta": "7.0+PTX", "Turing": "7.5+PTX", "Ampere": "8.0;8.6+PTX", "Ada": "8.9+PTX",
                "Hopper": "9.0+PTX", "Blackwell": "10.0;10.3;12.0;12.1+PTX"}


def nvcc() -> str:
    """The nvcc that candidates' builds use: ``$CUDA_HOME/bin/nvcc`` (torch's guess of it), else the one on PATH."""
    import torch.utils.cpp_extension as ce

    home = os.environ.get("CUDA_HOME") or getattr(ce, "CUDA_HOME", None)
    path = os.path.join(home, "bin", "nvcc") if home else shutil.which("nvcc")
    if not path or not os.path.exists(path):
        raise HarnessBuildError("nvcc was not found (set CUDA_HOME): the CUDA sandbox builds its own kernel with it")
    return path


def arch_flags(arch_list: str) -> list[str]:
    """nvcc's ``-gencode`` flags for a ``TORCH_CUDA_ARCH_LIST`` value ("9.0", "8.0;9.0+PTX", "Hopper").

    >>> arch_flags("9.0+PTX")
    ['-gencode=arch=compute_90,code=sm_90', '-gencode=arch=compute_90,code=compute_90']
    """
    flags = []
    for item in re.split(r"[;\s,]+", arch_list.strip()):
        if item in NAMED_ARCHES:
            flags += [f for f in arch_flags(NAMED_ARCHES[item]) if f not in flags]
            continue
        m = re.fullmatch(r"(\d+)\.(\d+)([a-z]?)(\+PTX)?", item)
        if not m:
            if item:
                raise HarnessBuildError(f"TORCH_CUDA_ARCH_LIST: not a CUDA architecture: {item!r} (e.g. 9.0, 9.0+PTX, "
                                        f"or one of {', '.join(NAMED_ARCHES)})")
            continue
        cc = f"{m.group(1)}{m.group(2)}{m.group(3)}"
        flags.append(f"-gencode=arch=compute_{cc},code=sm_{cc}")
        if m.group(4):
            flags.append(f"-gencode=arch=compute_{cc},code=compute_{cc}")
    if not flags:
        raise HarnessBuildError("TORCH_CUDA_ARCH_LIST names no CUDA architecture")
    return flags


def default_arch(device: Any = None) -> str:
    """``$TORCH_CUDA_ARCH_LIST``, else the compute capability of ``device`` (the current GPU by default): "9.0"."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return f"{major}.{minor}"


def build_permute(build_dir: str, arch_list: str) -> Built:
    """Build the permutation library into ``build_dir`` and hash it.

    Built afresh for every Sandbox (seconds), never taken from a cache that earlier runs' candidates could have
    written to: the workers load it before any check runs. Candidates run as the same user and could still replace
    the file; what keeps that from mattering is the hash each worker checks on the bytes it then loads."""
    flags = ["-O3", "-shared", "-Xcompiler", "-fPIC", *arch_flags(arch_list)]
    os.makedirs(build_dir, exist_ok=True)
    src, lib = os.path.join(build_dir, "permute.cu"), os.path.join(build_dir, "permute.so")
    with open(src, "w") as f:
        f.write(PERMUTE_CU)
    try:
        done = subprocess.run([nvcc(), *flags, "-o", lib, src], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HarnessBuildError(f"nvcc could not build the sandbox's permutation kernel: {exc}") from exc
    if done.returncode != 0:
        raise HarnessBuildError(f"nvcc failed to build the sandbox's permutation kernel:\n{done.stderr[-4000:]}")
    with open(lib, "rb") as f:
        return Built(lib, hashlib.sha256(f.read()).hexdigest())


def check_launch(built: Built, devices: Any) -> None:
    """Bind the library in this process and permute 1,000 indices on each of ``devices`` (a device or a list): a
    kernel that built but cannot run there (an architecture the GPU lacks, a driver older than nvcc's runtime) fails
    here, once, instead of failing every timing as if the candidates' kernels had."""
    import torch

    from kevin.sandbox.worker import timing

    try:
        timing.load_permute(built.path, built.sha256)
    except (OSError, RuntimeError) as exc:
        raise HarnessBuildError(f"the sandbox's permutation kernel could not be loaded: {exc}") from exc
    for device in devices if isinstance(devices, (list, tuple)) else [devices]:
        with torch.cuda.device(device):  # the library's own runtime launches on the current device
            src = torch.arange(1000, device=device)
            out = torch.full_like(src, -1)
            try:
                timing._permute(out, src, next(timing._round_keys(0)), scatter=False)
                torch.cuda.synchronize(device)
            except RuntimeError as exc:
                raise HarnessBuildError(f"the sandbox's permutation kernel does not run on GPU {device} ({exc}); "
                                        "build it for this GPU's architecture (TORCH_CUDA_ARCH_LIST)") from exc
            if not torch.equal(out.sort().values, src):
                raise HarnessBuildError(f"the sandbox's permutation kernel gave no permutation on GPU {device}")
