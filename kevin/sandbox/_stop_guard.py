"""What a timing leaves stopped does not outlive the process that stopped it.

A timing on the CPU backend stops every running compile's process group (SIGSTOP) and continues it after
(`DeviceGate.pausable`). If the sandbox's process dies in between (killed, out of memory), nothing would ever
continue those groups: stopped compilers would hold their memory until the machine restarts. So the first stop
starts a small guard process, which reads ``stop <pgid>`` and ``cont <pgid>`` lines from a pipe and, when the pipe
closes (the sandbox's process is gone, however it died), kills every group still stopped. It ignores the signals
that a terminal or a job scheduler sends to the whole job, so that it outlives the sandbox's process to do so.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading

# the guard: standard library only, started with -I (no site, no user path) so that it starts in milliseconds
_GUARD = """
import os, signal, sys
for name in ("SIGINT", "SIGTERM", "SIGHUP"):
    signal.signal(getattr(signal, name), signal.SIG_IGN)
stopped = set()
for line in sys.stdin:  # ends when the sandbox's process is gone
    op, _, pgid = line.partition(" ")
    (stopped.add if op == "stop" else stopped.discard)(int(pgid))
for pgid in stopped:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""

_lock = threading.Lock()
_proc: subprocess.Popen | None = None
_stopped: set[int] = set()  # groups stopped now, re-sent to a guard started again


def stopping(pgid: int) -> None:
    """Record that group ``pgid`` is about to be stopped: if this process dies before `continued`, it is killed."""
    _send("stop", pgid)


def continued(pgid: int) -> None:
    """Record that group ``pgid`` runs again (or is gone): the guard forgets it."""
    _send("cont", pgid)


def _send(op: str, pgid: int) -> None:
    global _proc
    with _lock:
        (_stopped.add if op == "stop" else _stopped.discard)(pgid)
        line = f"{op} {pgid}\n"
        for _ in range(2):
            try:
                if _proc is None or _proc.poll() is not None:
                    if not _stopped:
                        return  # nothing to guard
                    _proc = _start()
                    line = "".join(f"stop {g}\n" for g in _stopped)  # a new guard learns the whole set
                _proc.stdin.write(line)
                _proc.stdin.flush()
                return
            except OSError:
                _proc = None
        logging.getLogger(__name__).warning("no guard process: a crash now would leave group %d stopped", pgid)


def _start() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-I", "-S", "-c", _GUARD], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True, close_fds=True,
                            env={"PATH": os.environ.get("PATH", "")})
