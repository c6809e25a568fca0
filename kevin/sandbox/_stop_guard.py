"""What a timing leaves stopped does not outlive the process that stopped it.

A timing on the CPU backend stops every running compile's process group (SIGSTOP) and continues it after
(`DeviceGate.pausable`). If the sandbox's process died in between (killed, out of memory), nothing would ever
continue those groups: stopped compilers would hold their memory until the machine restarts. So the first stop
starts a guard process, which reads ``stop <pgid>`` and ``cont <pgid>`` lines from a pipe and, when the pipe closes
(the sandbox's process is gone), kills every group still stopped.

The guard leads a session of its own, so a signal to the sandbox's process group or terminal does not reach it,
and it is undumpable (its end of the pipe cannot be opened through ``/proc``). The writes never block, since they
run under the device gate's lock: a guard 64 KiB behind (stopped by someone) is killed and replaced, with the
whole stopped set. What it does not cover is in docs/threat-model.md ("Not defended").
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading

# the guard: standard library only, started with -I -S so that it starts in milliseconds
_GUARD = """
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: /proc/<pid>/fd is closed to the user's processes
except Exception:
    pass
signal.signal(signal.SIGHUP, signal.SIG_IGN)
stopped = set()
for line in sys.stdin.buffer:  # ends when the sandbox's process is gone
    op, _, pgid = line.decode("ascii", "replace").partition(" ")
    if op in ("stop", "cont") and pgid.strip().isdigit():
        (stopped.add if op == "stop" else stopped.discard)(int(pgid))
for pgid in stopped:
    try:
        if pgid > 1:
            os.killpg(pgid, signal.SIGKILL)
    except Exception:
        pass
"""

_lock = threading.Lock()
_proc: subprocess.Popen | None = None
_stopped: set[int] = set()  # groups stopped now, sent whole to a new guard
_warned = False


def stopping(pgid: int) -> None:
    """Record that group ``pgid`` is about to be stopped: if this process dies before `continued`, it is killed."""
    _send("stop", pgid)


def continued(pgid: int) -> None:
    """Record that group ``pgid`` runs again (or is gone): the guard forgets it."""
    _send("cont", pgid)


def _send(op: str, pgid: int) -> None:
    global _proc, _warned
    with _lock:
        (_stopped.add if op == "stop" else _stopped.discard)(pgid)
        data = f"{op} {pgid}\n".encode()
        for _ in range(2):
            try:
                if _proc is None or _proc.poll() is not None:
                    if not _stopped:
                        return  # nothing to guard
                    _proc = _start()
                    data = "".join(f"stop {g}\n" for g in _stopped).encode()  # a new guard learns the whole set
                if os.write(_proc.stdin.fileno(), data) == len(data):
                    return
            except OSError:  # gone, or full because it does not read: replace it
                pass
            _retire()
        if not _warned:
            _warned = True
            logging.getLogger(__name__).warning("no guard process: a crash now would leave group %d stopped", pgid)


def _start() -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _GUARD], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
                            start_new_session=True, env={"PATH": os.environ.get("PATH", "")})
    os.set_blocking(proc.stdin.fileno(), False)
    return proc


def _retire() -> None:
    """Kill the guard in hand (it may be stopped) and forget it; the next write starts another."""
    global _proc
    if _proc is not None:
        try:  # dead before its pipe closes, or it would kill the stopped groups
            _proc.kill()
            _proc.wait(1)
        except (OSError, subprocess.TimeoutExpired):
            pass
        try:
            _proc.stdin.close()
        except OSError:
            pass
    _proc = None
