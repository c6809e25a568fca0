"""kevin.sandbox.build.harness: the sandbox's own CUDA permutation kernel. Its host entry point runs the same ``prp``
as the kernel, so what it computes is checked here without a GPU; the kernel's launches are tested on a GPU in
``tests/sandbox/test_protocol.py``."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil

import pytest

from kevin.sandbox.build import harness

M64 = (1 << 64) - 1


def _mix(z: int) -> int:  # splitmix64's finalizer
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _prp(i: int, n: int, keys: list[int]) -> int:
    """The permutation as the module docstring describes it: an index of ``bits`` bits (the fewest, at least 2, that
    reach n) split into a high half of bits // 2 bits and a low half of the rest; six rounds in which each half in
    turn is XORed with the hash of the other half and a round key, cut to its own width; again until below n."""
    bits = max(2, (n - 1).bit_length())
    b = bits - bits // 2
    mb, ma = (1 << b) - 1, (1 << (bits // 2)) - 1
    while True:
        high, low = i >> b, i & mb
        for k in (0, 2, 4):
            high ^= _mix(low ^ keys[k]) & ma
            low ^= _mix(high ^ keys[k + 1]) & mb
        i = (high << b) | low
        if i < n:
            return i


KEYS = [0x0123456789ABCDEF, 0xFEDCBA9876543210, 3, 5, 7, 0xDEADBEEFDEADBEEF]


def test_each_architecture_gets_its_gencode_and_ptx_only_when_asked():
    assert harness.arch_flags("8.0;9.0+PTX") == ["-gencode=arch=compute_80,code=sm_80",
                                                 "-gencode=arch=compute_90,code=sm_90",
                                                 "-gencode=arch=compute_90,code=compute_90"]


def test_torchs_architecture_names_are_read_as_torch_reads_them():
    assert harness.arch_flags("Hopper") == harness.arch_flags("9.0+PTX")


def test_an_architecture_that_is_not_one_is_refused_by_name():
    with pytest.raises(harness.HarnessBuildError, match="'Hoper'"):
        harness.arch_flags("9.0;Hoper")


needs_nvcc = pytest.mark.skipif(not shutil.which("nvcc") and not os.path.exists(
    os.path.join(os.environ.get("CUDA_HOME", "/nonexistent"), "bin", "nvcc")), reason="needs nvcc")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> harness.Built:
    return harness.build_permute(str(tmp_path_factory.mktemp("harness")), "9.0")


def _host_prp(built: harness.Built, inverse: bool = False):
    fn = ctypes.CDLL(built.path).kevin_prp  # loads without a GPU: the CUDA runtime starts on a first launch
    fn.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_int]
    fn.restype = ctypes.c_ulonglong
    keys = (ctypes.c_ulonglong * 6)(*KEYS)
    return lambda i, n: fn(i, n, keys, int(inverse))


@needs_nvcc
def test_the_built_library_is_hashed_as_it_was_built(built):
    with open(built.path, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == built.sha256


@needs_nvcc
@pytest.mark.parametrize("n", [1, 2, 3, 5, 16, 1000, 4099])
def test_the_kernels_prp_is_the_feistel_walk_described(built, n):
    prp = _host_prp(built)
    assert [prp(i, n) for i in range(n)] == [_prp(i, n, KEYS) for i in range(n)]


@needs_nvcc
def test_the_kernels_prp_is_the_feistel_walk_past_32_bit_indices(built):
    prp, n = _host_prp(built), (1 << 40) + 3  # 41 index bits: halves of 20 and 21 bits
    assert [prp(i, n) for i in range(0, n, n // 97)] == [_prp(i, n, KEYS) for i in range(0, n, n // 97)]


@needs_nvcc
@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 64, 65, 1000])
def test_the_kernels_prp_moves_every_index_once(built, n):
    prp = _host_prp(built)
    assert sorted(prp(i, n) for i in range(n)) == list(range(n))


@needs_nvcc
@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 65, 1000, (1 << 40) + 3])
def test_the_kernels_inverse_prp_undoes_prp_walk_included(built, n):
    # the scatter gathers through the inverse; 3, 5, 65 and 1000 are not powers of two, so some indices walk (about
    # half of them for 65, whose rounds permute 128 places)
    prp, inverse = _host_prp(built), _host_prp(built, inverse=True)
    sample = range(n) if n < 5000 else range(0, n, n // 97)
    assert [inverse(prp(i, n), n) for i in sample] == list(sample)


@needs_nvcc
def test_a_second_library_loaded_in_one_process_is_the_second_one(built, tmp_path, monkeypatch):
    # each in-memory copy keeps its own /proc name: a reused name would make dlopen hand back the first library
    from kevin.sandbox.worker import timing

    other = harness.build_permute(str(tmp_path), "8.0")  # other bytes
    monkeypatch.setattr(timing, "_PERMUTE", None)
    timing.load_permute(built.path, built.sha256)
    first = ctypes.cast(timing._PERMUTE, ctypes.c_void_p).value
    timing.load_permute(other.path, other.sha256)
    assert ctypes.cast(timing._PERMUTE, ctypes.c_void_p).value != first
