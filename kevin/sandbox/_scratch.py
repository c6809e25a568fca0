"""A Sandbox's private scratch directory, and the sweep of those left behind by processes that died.

A Sandbox keeps golden inputs (gigabytes per task at KernelBench sizes) and its candidates' files in one
directory under the temporary directory, deleted when the Sandbox is collected or the interpreter exits. A
process ended by SIGTERM or SIGKILL (a job's time limit, the OOM killer) does neither, and its tens of gigabytes
stay: the next run on the machine fills the disk. So each directory holds an ``owner`` file that its Sandbox keeps
locked (``flock``) for its lifetime; the kernel releases the lock when the process dies, however it dies, and a
new Sandbox deletes the directories whose lock it can take. A lock, unlike a pid, also holds for a process in
another PID namespace sharing the directory (a container) and cannot be mistaken after a pid is reused.
Standard library only; Linux and macOS (``fcntl``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import time

PREFIX = "kevin-sandbox-"
OWNER = "owner"
UNMARKED_AFTER_S = 24 * 3600.0
"""a directory without an owner file (being created, or left by an older version) is swept once this old"""


def make_root(parent: str | None = None) -> tuple[str, int]:
    """A new private (0700) scratch directory under ``parent`` (the temporary directory) and the descriptor of its
    locked owner file: keep it open for as long as the directory is in use (closing it releases the lock)."""
    root = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
    try:
        os.chmod(root, 0o700)
        fd = os.open(os.path.join(root, OWNER), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with contextlib.suppress(OSError):  # a filesystem without locks: the probe cannot lock it either, so kept
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{os.getpid()}\n".encode())  # for a person reading /tmp; the lock is what counts
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root, fd


def owner_ended(path: str) -> bool | None:
    """Whether the Sandbox of directory ``path`` has ended (its owner file's lock is free); None when the
    directory has no owner file that is a regular file."""
    try:
        fd = os.open(os.path.join(path, OWNER), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held: its Sandbox is alive
        return True
    finally:
        os.close(fd)  # releases the probe's own lock


def sweep(parent: str | None = None, now: float | None = None) -> list[str]:
    """Delete the scratch directories under ``parent`` whose Sandbox has ended; returns their paths.

    Only this user's directories are considered. One without an owner file is left alone until it is
    `UNMARKED_AFTER_S` old (it may be being created). Never raises: a cleanup must not stop a Sandbox starting.
    """
    parent = parent or tempfile.gettempdir()
    now = time.time() if now is None else now
    removed = []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
    except OSError:
        return removed
    for name in names:
        path = os.path.join(parent, name)
        try:
            info = os.lstat(path)
            if info.st_uid != os.getuid() or not stat.S_ISDIR(info.st_mode):
                continue
            ended = owner_ended(path)
            if ended is None:
                ended = now - info.st_mtime > UNMARKED_AFTER_S
            if ended:
                shutil.rmtree(path)
                removed.append(path)
        except OSError:
            continue
    return removed
