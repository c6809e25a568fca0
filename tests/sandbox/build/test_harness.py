"""kevin.sandbox.build.harness: the sandbox's own CUDA permutation kernel, built by nvcc (what it computes is tested on
a GPU in ``tests/sandbox/test_protocol.py``)."""

from __future__ import annotations

import ctypes
import os
import shutil

import pytest

from kevin.sandbox.build import harness


def test_each_architecture_gets_its_gencode_and_ptx_only_when_asked():
    assert harness.arch_flags("8.0;9.0+PTX") == ["-gencode=arch=compute_80,code=sm_80",
                                                 "-gencode=arch=compute_90,code=sm_90",
                                                 "-gencode=arch=compute_90,code=compute_90"]


def test_an_architecture_that_is_not_one_is_refused_by_name():
    with pytest.raises(ValueError, match="'Hopper'"):
        harness.arch_flags("9.0;Hopper")


@pytest.mark.skipif(shutil.which("nvcc") is None and not os.environ.get("CUDA_HOME"), reason="needs nvcc")
def test_the_kernel_builds_once_into_the_cache_and_exports_its_entry_point(tmp_path):
    path = harness.permute_library(str(tmp_path), "9.0")
    stamp = os.stat(path).st_mtime_ns
    assert harness.permute_library(str(tmp_path), "9.0") == path and os.stat(path).st_mtime_ns == stamp  # not rebuilt
    assert hasattr(ctypes.CDLL(path), "kevin_permute")  # loads without a GPU: the runtime starts on the first launch
    assert os.listdir(os.path.dirname(os.path.dirname(path))) == [os.path.basename(os.path.dirname(path))]  # no debris
