"""The candidate worker's own file writes: a failure of the harness is told apart from the kernel's."""

import errno
import subprocess
import sys

import pytest
import torch

from kevin.sandbox.worker.candidate import harness_write
from kevin.sandbox.worker.channel import HarnessError, reported_phase

OUTPUTS = {"set0.out0": torch.zeros(4)}  # 4 float32 = 16 bytes


def _full_disk(tensors, path):
    raise OSError(errno.ENOSPC, "No space left on device")


def _safetensors_full_disk(tensors, path):  # safetensors raises its own Exception subclass, naming the I/O error
    raise RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)")


def _bad_value(tensors, path):
    raise TypeError("cannot serialize a dtype")


@pytest.mark.parametrize("save", [_full_disk, _safetensors_full_disk])
def test_a_full_disk_while_the_harness_writes_outputs_of_the_references_size_is_the_harnesss(save, tmp_path):
    with pytest.raises(HarnessError) as info:
        harness_write(save, OUTPUTS, str(tmp_path / "outputs.safetensors"), reference_bytes=16)
    assert reported_phase(info.value) == "harness"


def test_outputs_larger_than_the_references_that_fill_the_disk_are_the_kernels_failure(tmp_path):
    with pytest.raises(OSError) as info:  # 16 bytes written where the reference's outputs are 8
        harness_write(_full_disk, OUTPUTS, str(tmp_path / "outputs.safetensors"), reference_bytes=8)
    assert reported_phase(info.value) == "unknown"


def test_any_other_failure_of_the_write_is_not_the_harnesss(tmp_path):
    with pytest.raises(TypeError) as info:
        harness_write(_bad_value, OUTPUTS, str(tmp_path / "outputs.safetensors"), reference_bytes=16)
    assert reported_phase(info.value) == "unknown"


def test_a_candidate_exception_forging_the_harness_phase_is_reported_as_unknown():
    class DiskFull(OSError):  # what a candidate's forward could raise: a read-only property survives tagging
        phase = property(lambda self: "harness")

    assert reported_phase(DiskFull(errno.ENOSPC, "No space left on device")) == "unknown"
    assert reported_phase(HarnessError("OSError: no space")) == "harness"


FORWARDS = """
import sys
from kevin.sandbox.build import extension
from kevin.sandbox.worker import candidate

class Stop(Exception):
    pass

def install(*args, **kwargs):
    print("niceness", kwargs.get("niceness"))
    raise Stop

class Channel:
    send = receive = mark = staticmethod(lambda *args, **kwargs: None)

extension.install = install
try:
    candidate.main({"backend": "cpu", "ext_root": sys.argv[1], "candidate": "absent.py", "compile_niceness": 19},
                   Channel())
except Stop:
    pass
"""


def test_the_worker_builds_at_the_compile_niceness_its_job_names(tmp_path):
    # in a process of its own: the worker's main sets global torch state before it installs the builder
    out = subprocess.run([sys.executable, "-c", FORWARDS, str(tmp_path / "ext")], capture_output=True, text=True,
                         timeout=120)
    assert "niceness 19" in out.stdout, out.stderr[-2000:]
