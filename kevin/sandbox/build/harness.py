"""The sandbox's own CUDA kernel: the keyed permutation that gives every timed call its fresh inputs on a GPU.

A timed call's inputs are a pool set permuted by a permutation drawn from a secret seed (`..worker.timing`). Drawn
as the stable order of random keys, a permutation of a 512 MiB input costs a sort of every element, twice a call (the
plan's and the call's): tens of times a fast kernel's runtime, all of it inside the timing's hold of the device. This
kernel computes the permutation instead of storing it: element ``i`` moves to ``prp(i)``, a keyed pseudo-random
permutation of ``[0, n)``, six alternating Feistel rounds over the index's bits (each half masked in turn by a
splitmix64 hash of the other half and a round key), cycle-walked into range. One pass gathers (or scatters) every
element; no permutation ever exists in memory, where a candidate could look for one.

Built once per toolchain and architecture list by nvcc, without torch's headers (seconds), into
``<cache>/harness/<key>/permute.so`` (a temporary directory renamed into place); loaded by the workers through
ctypes before any candidate code runs (`..worker.timing.load_permute`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile

PERMUTE_CU = r"""
#include <cuda_runtime.h>

typedef unsigned long long u64;
struct Keys { u64 k[6]; };
struct Pair { u64 a, b; };  // 16-byte elements (complex128) at 8-byte alignment

__device__ __forceinline__ u64 mix(u64 z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__device__ __forceinline__ u64 prp(u64 i, u64 n, int bits, const Keys& keys) {
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

template <typename T>
__global__ void permute(T* __restrict__ dst, const T* __restrict__ src, u64 n, int bits, Keys keys, int scatter) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
    const u64 j = prp(i, n, bits, keys);
    if (scatter) dst[j] = src[i]; else dst[i] = src[j];
  }
}

template <typename T>
static int launch(void* dst, const void* src, u64 n, int bits, const Keys& keys, int scatter, cudaStream_t stream) {
  const u64 blocks = (n + 255) / 256 < (1ULL << 20) ? (n + 255) / 256 : (1ULL << 20);
  permute<T><<<(unsigned)blocks, 256, 0, stream>>>((T*)dst, (const T*)src, n, bits, keys, scatter);
  return (int)cudaGetLastError();
}

// dst[i] = src[prp(i)] (gather) or dst[prp(i)] = src[i] (scatter), n elements of elem_size bytes; 0 or a cudaError_t.
extern "C" int kevin_permute(void* dst, const void* src, u64 n, int elem_size, int scatter, const u64* k,
                             void* stream) {
  if (n == 0) return 0;
  int bits = 2;
  while (bits < 64 && (1ULL << bits) < n) ++bits;
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
"""


class HarnessBuildError(RuntimeError):
    """nvcc could not build the sandbox's own kernel: the CUDA backend cannot time anything."""


def nvcc() -> str:
    """The nvcc that candidates' builds use: ``$CUDA_HOME/bin/nvcc`` (torch's guess of it), else the one on PATH."""
    import torch.utils.cpp_extension as ce

    home = os.environ.get("CUDA_HOME") or getattr(ce, "CUDA_HOME", None)
    path = os.path.join(home, "bin", "nvcc") if home else shutil.which("nvcc")
    if not path or not os.path.exists(path):
        raise HarnessBuildError("nvcc was not found (set CUDA_HOME): the CUDA sandbox builds its own kernel with it")
    return path


def arch_flags(arch_list: str) -> list[str]:
    """nvcc's ``-gencode`` flags for a ``TORCH_CUDA_ARCH_LIST`` value ("9.0", "8.0;9.0+PTX").

    >>> arch_flags("8.0;9.0+PTX")
    ['-gencode=arch=compute_80,code=sm_80', '-gencode=arch=compute_90,code=sm_90', '-gencode=arch=compute_90,code=compute_90']
    """
    flags = []
    for item in re.split(r"[;\s,]+", arch_list.strip()):
        m = re.fullmatch(r"(\d+)\.(\d+)([a-z]?)(\+PTX)?", item)
        if not m:
            if item:
                raise ValueError(f"not a CUDA architecture: {item!r} (expected e.g. 9.0 or 9.0+PTX)")
            continue
        cc = f"{m.group(1)}{m.group(2)}{m.group(3)}"
        flags.append(f"-gencode=arch=compute_{cc},code=sm_{cc}")
        if m.group(4):
            flags.append(f"-gencode=arch=compute_{cc},code=compute_{cc}")
    if not flags:
        raise ValueError("no CUDA architecture given")
    return flags


def default_arch() -> str:
    """``$TORCH_CUDA_ARCH_LIST``, else the compute capability of the current GPU ("9.0")."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}"


def permute_library(cache_dir: str, arch_list: str) -> str:
    """The path of the built permutation library for ``arch_list``, built into ``cache_dir`` if it is not there."""
    compiler = nvcc()
    flags = ["-O3", "-shared", "-Xcompiler", "-fPIC", *arch_flags(arch_list)]
    st = os.stat(os.path.realpath(compiler))
    key = hashlib.sha256("\n".join([PERMUTE_CU, compiler, str(st.st_size), str(st.st_mtime_ns), *flags])
                         .encode()).hexdigest()[:16]
    final = os.path.join(cache_dir, "harness", key)
    lib = os.path.join(final, "permute.so")
    if os.path.exists(lib):
        return lib
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{key}-", dir=os.path.dirname(final))
    try:
        src = os.path.join(tmp, "permute.cu")
        with open(src, "w") as f:
            f.write(PERMUTE_CU)
        done = subprocess.run([compiler, *flags, "-o", os.path.join(tmp, "permute.so"), src],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise HarnessBuildError(f"nvcc failed to build the sandbox's permutation kernel:\n{done.stderr[-4000:]}")
        try:
            os.rename(tmp, final)  # a directory either is complete or does not exist
        except OSError:  # another process built it first
            if not os.path.exists(lib):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return lib
