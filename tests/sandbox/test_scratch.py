"""The Sandbox's scratch directory: locked by its owner while it lives, and swept once that process has ended."""

import fcntl
import os
import subprocess
import sys
import time

from kevin.sandbox import Sandbox, SandboxConfig, _scratch
from sandbox_cases import RELU_SOURCE, load_candidate

_HOLD = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX); "
         "print('locked', flush=True); time.sleep(60)")


def _plant(parent, name: str, owner: bool = True):
    d = parent / (_scratch.PREFIX + name)
    (d / "golden-x").mkdir(parents=True)
    (d / "golden-x" / "inputs.safetensors").write_bytes(b"x" * 100)
    if owner:
        (d / _scratch.OWNER).write_text("12345\n")
    return d


def _holder(path):
    """A live process holding the lock of ``path`` (as a Sandbox's process does)."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_directory_left_by_a_killed_sandbox_process_is_swept(tmp_path):
    d = _plant(tmp_path, "dead")
    proc = _holder(d / _scratch.OWNER)
    proc.kill()  # SIGKILL: no cleanup ran, the kernel released the lock
    proc.wait()
    assert _scratch.sweep(str(tmp_path)) == [str(d)]
    assert not d.exists()


def test_a_live_sandboxs_directory_is_kept_whatever_pid_its_owner_file_names(tmp_path):
    # the owner file's pid (12345) need not exist here: a process in another PID namespace holds the lock
    d = _plant(tmp_path, "live")
    proc = _holder(d / _scratch.OWNER)
    try:
        assert _scratch.sweep(str(tmp_path)) == []
        assert d.exists()
    finally:
        proc.kill()
        proc.wait()


def test_a_directory_without_an_owner_file_is_left_alone_until_a_day_old(tmp_path):
    d = _plant(tmp_path, "unmarked", owner=False)  # being created, or left by an older version
    assert _scratch.sweep(str(tmp_path)) == []
    assert _scratch.sweep(str(tmp_path), now=time.time() + _scratch.UNMARKED_AFTER_S + 60) == [str(d)]


def test_an_owner_that_is_not_a_regular_file_never_hangs_or_breaks_the_sweep(tmp_path):
    d = tmp_path / (_scratch.PREFIX + "fifo")
    d.mkdir()
    os.mkfifo(d / _scratch.OWNER)  # reading it would block forever
    (tmp_path / (_scratch.PREFIX + "link")).mkdir()
    os.symlink("/dev/zero", tmp_path / (_scratch.PREFIX + "link") / _scratch.OWNER)
    assert _scratch.sweep(str(tmp_path)) == []  # both treated as unmarked, and recent


def test_a_new_root_is_private_and_locked_while_its_descriptor_is_open(tmp_path):
    root, fd = _scratch.make_root(str(tmp_path))
    assert os.stat(root).st_mode & 0o777 == 0o700
    assert _scratch.owner_ended(root) is False and _scratch.sweep(str(tmp_path)) == []
    os.close(fd)
    assert _scratch.owner_ended(root) is True


def test_a_new_sandbox_sweeps_what_a_killed_one_left_and_keeps_its_candidates_inside_its_own_root(tmp_path, monkeypatch):
    import tempfile

    from kevin.sandbox import _judge

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    d = _plant(tmp_path, "dead")  # nobody holds its lock
    sandbox = Sandbox("cpu", SandboxConfig(cache_dir=str(tmp_path / "cache"), precompiled_header=False))
    assert not d.exists()
    assert os.path.dirname(sandbox._root) == str(tmp_path)
    assert _scratch.owner_ended(sandbox._root) is False  # locked while the Sandbox lives
    made = []
    monkeypatch.setattr(_judge.CandidateRun, "__init__", lambda self, src, **kw: (
        made.append(kw.get("scratch_parent")), (_ for _ in ()).throw(RuntimeError("stop here")))[1])
    sandbox._pipeline(RELU_SOURCE, load_candidate("honest_relu_cpu"))  # passes the static checks, then stops
    assert made == [sandbox._root]
