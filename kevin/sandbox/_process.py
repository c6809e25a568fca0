"""Parent side of a worker process: scrubbed environment, own process group, private pipes, hard kill.

Standard library only. The parent never parses the worker's stdout or stderr (they go to log files in the
worker's scratch directory and only their tails are shown as feedback); everything it decides on arrives as
JSON lines on an inherited pipe, timestamped on arrival with the parent's own monotonic clock. A candidate's
timing marks also travel as datagrams on a socket whose kernel stamps each one when it is sent (`MarkStamp`): the
parent's arrival time can lag by milliseconds (a reader thread waiting for the GIL), the kernel's cannot.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

import kevin
from kevin.sandbox.worker.loop import MARKS, mark_bytes

# Variables a compiler or CUDA needs; everything else in the parent's environment (tokens, seeds, paths
# of the harness) is dropped.
ENV_ALLOW = (
    "PATH", "LANG", "LC_ALL", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "CC", "CXX",
    "TORCH_CUDA_ARCH_LIST", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NVIDIA_DRIVER_CAPABILITIES",
)
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(kevin.__file__)))
MAX_LINE = 1 << 22
SO_TIMESTAMPNS = 35
"""Linux's SO_TIMESTAMPNS (asm-generic value; Python's socket module does not name it): the kernel's CLOCK_REALTIME
of each datagram's sending, as ancillary data of recvmsg."""


def scrubbed_env(scratch: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed variables, plus HOME/TMPDIR pointing at ``scratch`` and a path to this package."""
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    env.update(
        HOME=scratch, TMPDIR=scratch, PYTHONPATH=PACKAGE_ROOT, PYTHONNOUSERSITE="1",
        PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1",
    )
    env.update(extra or {})
    return env


CPU_CLOCKED = ("timing_begin", "null", "calls", "end", "timing_end")
"""Report lines on whose arrival the parent also reads the worker's CPU clock (`cpu_clock`)."""
COMPANY_COUNTED = ("timing_begin", "timing_end")
"""... and scans /proc for processes that may work for it (the scan takes milliseconds: not on every mark)."""


class CpuClock(NamedTuple):
    """What the kernel says process ``pid`` has run, read from /proc (see `cpu_clock`)."""

    ticks: float
    """user + system seconds of all its threads, the exited ones included (1/CLK_TCK resolution)"""
    live: float | None
    """the sum of its live threads' run time from ``schedstat`` (ns resolution); None where the kernel keeps none"""
    reaped: float
    """user + system seconds of the children it has waited for"""
    company: int
    """processes that may work for it off its clock (`count_company`); -1 = not counted"""
    threads: int | None = None
    """its native threads (entries of /proc/<pid>/task); None when they could not be counted"""
    process: float | None = None
    """the kernel's CPU clock of the whole process (``clock_gettime`` of its CPU-time clock id): every thread, the
    exited ones included, at ns resolution; None where it cannot be read"""


def _stat_fields(pid: int | str) -> list[str]:
    """The fields of /proc/<pid>/stat after ``pid (comm)`` (comm may hold spaces and parentheses): index 0 is
    field 3 (state), so field n of proc(5) is index n - 3."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_clock(pid: int, company: bool = True) -> CpuClock | None:
    """The CPU clock of process ``pid`` (a `CpuClock`), or None when /proc cannot be read; ``company=False`` skips
    the scan for other processes (``company`` is then -1: not counted)."""
    try:
        fields = _stat_fields(pid)
        hz = os.sysconf("SC_CLK_TCK")
        ticks = (int(fields[11]) + int(fields[12])) / hz  # utime, stime (fields 14, 15)
        reaped = (int(fields[13]) + int(fields[14])) / hz  # cutime, cstime (16, 17)
        session = fields[3]  # field 6
    except (OSError, ValueError, IndexError):
        return None
    try:  # the process's CPU-time clock (CPUCLOCK_SCHED of its thread group): what the ticks round to 10 ms
        process: float | None = time.clock_gettime(((~pid) << 3) | 2)
    except (OSError, OverflowError):
        process = None
    threads: int | None = None
    try:  # read right after the tick count, before the scan below (which can take a while)
        live = 0
        tids = os.listdir(f"/proc/{pid}/task")
        threads = len(tids)
        for tid in tids:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                live += int(f.read().split()[0])
        live_s: float | None = live / 1e9
    except (OSError, ValueError, IndexError):
        live_s = None
    if not company:
        return CpuClock(ticks, live_s, reaped, -1, threads, process)
    table: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                other = _stat_fields(entry)
                table[int(entry)] = (int(other[1]), int(other[3]))  # parent (field 4), session (field 6)
            except (OSError, ValueError, IndexError):
                continue  # exited meanwhile
    return CpuClock(ticks, live_s, reaped, count_company(table, pid, int(session), os.getpid()), threads, process)


def count_company(table: Mapping[int, tuple[int, int]], pid: int, session: int, sandbox: int) -> int:
    """How many processes of ``table`` (pid -> (parent, session)) may work for worker ``pid`` off its CPU clock.

    Its descendants, and the orphans of its session. A worker shares the session of the sandbox's own process
    (``sandbox``) with it, with the other workers and their compilers, and with the processes above it: their line of
    parents reaches ``sandbox``, one of its ancestors or the session's leader without passing through ``pid``. A
    process whose line passes through ``pid``, or ends at init first (its parent exited), may be its helper. A worker
    that leads its own session has every other process of it counted.
    """
    known = {session}  # the leader, the sandbox's process and its ancestors: whatever descends from them is not pid's
    at = sandbox
    for _ in range(64):
        if at <= 1 or at in known:
            break
        known.add(at)
        at = table.get(at, (0, 0))[0]
    count = 0
    for other, (parent, other_session) in table.items():
        if other == pid or other in known:
            continue
        if parent == pid:
            count += 1
        elif other_session == session and not _reaches(table, other, pid, known):
            count += 1
    return count


def _reaches(table: Mapping[int, tuple[int, int]], start: int, pid: int, known: set[int]) -> bool:
    """Whether ``start``'s line of parents reaches a process of ``known`` without passing through ``pid`` or init."""
    at = start
    for _ in range(64):  # deeper than any compiler chain
        parent = table.get(at, (0, 0))[0]
        if parent == pid:
            return False
        if parent in known:
            return True
        if parent <= 1:
            return False
        at = parent
    return False


@dataclass(frozen=True)
class Message:
    """One report line: when it arrived (parent monotonic seconds), what it said and, for `CPU_CLOCKED` lines,
    the worker's `cpu_clock` read on arrival."""

    t: float
    data: dict[str, Any]
    cpu: CpuClock | None = None

    @property
    def event(self) -> str:
        return str(self.data.get("event", ""))


class MarkStamp(NamedTuple):
    """One timing mark as the mark socket saw it: which (``event``, ``index``) and when the kernel says its
    datagram was sent (CLOCK_REALTIME seconds: compare stamps only with each other)."""

    event: str
    index: int
    sent: float


def _mark_socket() -> tuple[socket.socket, socket.socket] | None:
    """A datagram socket pair whose reading end stamps each datagram at sending; None where the kernel cannot (or
    the process is out of descriptors: the marks are then timed by arrival, as without it)."""
    try:
        r, w = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    except OSError:
        return None
    try:
        r.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        r.close()
        w.close()
        return None
    r.setblocking(False)
    return r, w


EMPTY = (b"", None)


def _recv_stamped(sock: socket.socket) -> tuple[bytes, float | None] | None:
    """One datagram of ``sock`` and its send stamp, without waiting: `EMPTY` when none is there, None when it was
    truncated or unstamped (or the socket failed)."""
    try:
        payload, ancillary, flags, _ = sock.recvmsg(64, socket.CMSG_SPACE(16))
    except (BlockingIOError, InterruptedError):
        return EMPTY
    except OSError:
        return None
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        return None
    sent = next((sec + nsec * 1e-9 for level, kind, data in ancillary
                 if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16
                 for sec, nsec in [struct.unpack("qq", data[:16])]), None)
    return None if sent is None or not payload else (payload, sent)


class MarkStamps:
    """The send stamps of one candidate's timing marks, read from the parent's end of its mark socket.

    `take` runs once per mark line, in the reader thread: it reads exactly one datagram, which must be the
    harness's bytes for that mark (`.worker.loop.mark_bytes`), and the line must say the harness's datagram went
    out in full (``stamped``); after "end" the socket must be empty. Anything else (a forged, surplus, replaced,
    truncated or missing datagram) spoils the stamps for good, and the wall check times the marks by arrival, as
    without a socket. One datagram a line: a flood of the socket cannot delay the reading of a line.
    """

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.stamps: list[MarkStamp] = []
        self.spoiled = False

    def take(self, data: Mapping[str, Any]) -> None:
        if self.spoiled:
            return
        want = mark_bytes(data.get("event"), data.get("index")) if data.get("stamped") is True else None
        got = _recv_stamped(self.sock)
        ok = want is not None and got is not None and got[0] == want
        if ok and data.get("event") == "end":
            ok = _recv_stamped(self.sock) == EMPTY
        if not ok:
            self.spoiled = True
            self.stamps.clear()
            return
        self.stamps.append(MarkStamp(str(data["event"]), int(data["index"]), got[1]))


OWN_GROUP: dict[str, Any] = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
"""``Popen`` arguments for a worker: a process group of its own (a kill reaches its compilers) in this process's
session. A session of its own would be a scheduler autogroup of its own, which Linux weighs as much as the whole
training process whatever its niceness: 16 compiling workers would outweigh a decoding policy 16 to 1."""

CUDA_NICENESS = 10
"""The nice value of a CUDA sandbox's workers (candidates and golden runs alike: their timings are compared). A
policy decoding beside them is one launch-bound thread that needs a core whenever it asks; the compilers under the
workers take the cores it leaves. The CPU backend's workers keep 0: its timings measure the cores themselves."""


CUDA_COMPILE_NICENESS = 19
"""The nice value of the compilers a CUDA sandbox's candidate worker starts for its ``load_inline`` builds (the
lowest priority): a worker whose kernel is timed, or a golden process, then keeps most of a core it shares with
them. The CPU backend stops compiles for its timings instead, and compiles at its workers' niceness."""


def niceness(backend: str) -> int:
    """The nice value a sandbox worker of ``backend`` ("cuda" or "cpu") runs at."""
    return CUDA_NICENESS if backend == "cuda" else 0


def compile_niceness(backend: str) -> int:
    """The nice value the compilers of a sandbox worker of ``backend`` run at."""
    return CUDA_COMPILE_NICENESS if backend == "cuda" else niceness(backend)


SPAWN_TIMEOUT_S = 15.0
"""How long a spawn waits for the zygote's answer before retiring it."""


class Zygote:
    """Parent side of the fork server (:mod:`._zygote`): one per Sandbox, started lazily, thread-safe."""

    def __init__(self, scratch: str, env: Mapping[str, str]):
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kevin.sandbox.worker.zygote", str(child.fileno())], cwd=scratch, env=dict(env),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(child.fileno(),), close_fds=True, **OWN_GROUP,
        )
        child.close()
        self.sock = parent
        self.sock.settimeout(120)
        if json.loads(self.sock.recv(1 << 16)).get("ready") is not True:
            raise RuntimeError("the zygote did not start")
        self.sock.settimeout(None)
        self._lock = threading.Lock()
        self._replies: queue.Queue[int] = queue.Queue()
        self._codes: dict[int, int] = {}
        self._cond = threading.Condition()
        self.alive = True
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    break
                msg = json.loads(data)
                if "pid" in msg:
                    self._replies.put(int(msg["pid"]))
                elif "exit" in msg:
                    with self._cond:
                        self._codes[int(msg["exit"])] = int(msg["code"])
                        self._cond.notify_all()
        except (OSError, ValueError):
            pass
        with self._cond:
            self.alive = False
            self._cond.notify_all()
        self._replies.put(-1)

    def spawn(self, module: str, job_path: str, cwd: str, env: Mapping[str, str], fds: tuple[int, ...],
              extra: tuple[str, ...] = ()) -> "ForkedProcess":
        """Fork a worker running ``module`` ("candidate" or "golden") with the report and command pipes ``fds[:2]``
        and one more fd per name in ``extra`` ("data", "marks")."""
        req = {"module": module, "job": job_path, "cwd": cwd, "env": dict(env), "extra": list(extra),
               "stdout": os.path.join(cwd, "stdout.log"), "stderr": os.path.join(cwd, "stderr.log")}
        with self._lock:
            if not self.alive:
                raise RuntimeError("the zygote is gone")
            socket.send_fds(self.sock, [json.dumps(req).encode()], list(fds))
            try:
                pid = self._replies.get(timeout=SPAWN_TIMEOUT_S)
            except queue.Empty:
                # a fork takes well under a second; a zygote that does not answer was stopped or wedged (a candidate,
                # its child, can signal it): retire it, so the Sandbox starts a fresh one for the next candidate
                self.alive = False
                self.close()
                raise RuntimeError("the zygote did not answer") from None
        if pid < 0:
            raise RuntimeError("the zygote is gone")
        return ForkedProcess(pid, self)

    def wait_code(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while pid not in self._codes and self.alive:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)
            return self._codes.pop(pid, None)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


class ForkedProcess:
    """The slice of ``Popen`` that `Worker` uses, for a child of the zygote (its exit code comes from it)."""

    def __init__(self, pid: int, zygote: Zygote):
        self.pid = pid
        self._zygote = zygote
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.wait(0.0) if self.returncode is None else self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        if self.returncode is None:
            code = self._zygote.wait_code(self.pid, timeout)
            if code is None:
                if not self._zygote.alive:
                    self.returncode = -signal.SIGKILL  # the zygote died: its children were killed with it
                    return self.returncode
                if timeout is not None and timeout > 0:
                    raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
                return None
            self.returncode = code
        return self.returncode


class Worker:
    """A running worker: ``python -m module job.json REPORT_FD COMMAND_FD`` in ``scratch``.

    With a `Zygote` the process is a fork of it instead of a new interpreter; either way it leads a process group of
    its own in this process's session (`OWN_GROUP`). With ``marks`` (candidates) it also gets the sending end of a
    mark socket, whose stamps `stamps` gives.
    """

    def __init__(self, module: str, job: Mapping[str, Any], *, scratch: str, env: Mapping[str, str] | None = None,
                 zygote: Zygote | None = None, data_pipe: bool = False, marks: bool = False):
        self.scratch = scratch
        job_path = os.path.join(scratch, "job.json")
        with open(job_path, "w") as f:
            json.dump(job, f)
        rep_r, rep_w = os.pipe()
        cmd_r, cmd_w = os.pipe()
        self._out = open(os.path.join(scratch, "stdout.log"), "wb")
        self._err = open(os.path.join(scratch, "stderr.log"), "wb")
        self.t_start = time.monotonic()
        self._kill_lock, self._killed = threading.Lock(), False
        env = dict(env if env is not None else scrubbed_env(scratch))
        pair = _mark_socket() if marks else None
        self.marks, mark_w = (MarkStamps(pair[0]), pair[1]) if pair is not None else (None, None)
        mark_fds = (mark_w.fileno(),) if mark_w is not None else ()
        self.proc: Any = None
        self.data = None
        data_r, data_w = os.pipe() if data_pipe else (None, None)  # worker -> parent (golden outputs: never on disk)
        if zygote is not None:
            extra = (("data",) if data_w is not None else ()) + (("marks",) if mark_fds else ())
            fds = (rep_w, cmd_r, *(() if data_w is None else (data_w,)), *mark_fds)
            try:
                self.proc = zygote.spawn(module.rsplit(".", 1)[-1], job_path, scratch, env, fds, extra)
            except (RuntimeError, OSError, queue.Empty):
                self.proc = None
                # a child forked after all (a late zygote) must not share the pipes of the new interpreter
                for fd in (rep_r, rep_w, cmd_r, cmd_w) + (() if data_r is None else (data_r, data_w)):
                    os.close(fd)
                rep_r, rep_w = os.pipe()
                cmd_r, cmd_w = os.pipe()
                data_r, data_w = os.pipe() if data_pipe else (None, None)
                if pair is not None:
                    for sock in pair:
                        sock.close()
                    pair = _mark_socket()
                    self.marks, mark_w = (MarkStamps(pair[0]), pair[1]) if pair is not None else (None, None)
                    mark_fds = (mark_w.fileno(),) if mark_w is not None else ()
        data_fds: tuple[int, ...] = ()
        if data_r is not None:
            self.data = os.fdopen(data_r, "rb")
            data_fds = (data_w,)
        try:
            if self.proc is None:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", module, job_path, str(rep_w), str(cmd_r),
                     *(f"data={fd}" for fd in data_fds), *(f"marks={fd}" for fd in mark_fds)],
                    cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._err,
                    pass_fds=(rep_w, cmd_r, *data_fds, *mark_fds), close_fds=True, **OWN_GROUP,
                )
        except BaseException:  # nothing of this worker may outlive it
            for fd in (rep_r, rep_w, cmd_r, cmd_w, *data_fds):
                os.close(fd)
            for f in (self.data, self._out, self._err, mark_w, self.marks and self.marks.sock):
                if f:
                    f.close()
            raise
        os.close(rep_w)
        os.close(cmd_r)
        if mark_w is not None:
            mark_w.close()
        for fd in data_fds:
            os.close(fd)
        self._cmd = os.fdopen(cmd_w, "wb", buffering=0)
        self._queue: queue.Queue[Message | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, args=(rep_r,), daemon=True)
        self._reader.start()
        self.messages: list[Message] = []

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as f:
            while True:
                line = f.readline(MAX_LINE)
                if not line:
                    break
                t = time.monotonic()
                try:
                    data = json.loads(line)
                    if not isinstance(data, dict):
                        raise ValueError
                except ValueError:
                    data = {"event": "garbage", "text": line[:200].decode(errors="replace")}
                event = data.get("event")
                cpu = (cpu_clock(self.proc.pid, company=event in COMPANY_COUNTED)
                       if event in CPU_CLOCKED and self.proc is not None else None)
                if event in MARKS and self.marks is not None:  # its datagram went first: it is there
                    self.marks.take(data)
                self._queue.put(Message(t, data, cpu))
        if self.marks is not None:  # closed here, not by `kill`: never under a read of this thread
            self.marks.sock.close()
        self._queue.put(None)

    @property
    def stamps(self) -> list[MarkStamp]:
        """The marks' send stamps (`MarkStamps`); empty when spoiled or without a mark socket."""
        return list(self.marks.stamps) if self.marks is not None else []

    def next(self, deadline: float) -> Message | None:
        """The next report line, or None at end of stream or when ``deadline`` (monotonic) passes."""
        try:
            msg = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None
        if msg is not None:
            self.messages.append(msg)
        return msg

    def wait_for(self, events: tuple[str, ...], deadline: float) -> Message | None:
        """Skip progress lines until one of ``events`` (or ``error``/``garbage``) arrives."""
        while True:
            msg = self.next(deadline)
            if msg is None or msg.event in events or msg.event in ("error", "garbage"):
                return msg

    def read_data(self, n: int) -> bytes:
        """Exactly ``n`` bytes from the data pipe (fewer only if the worker died)."""
        chunks, left = [], n
        while left > 0:
            chunk = self.data.read(min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def send(self, command: str) -> None:
        try:
            self._cmd.write((command + "\n").encode())
        except OSError:
            pass

    def timed_out(self, deadline: float) -> bool:
        return time.monotonic() >= deadline and self.proc.poll() is None

    def finish(self, deadline: float) -> int | None:
        """Wait for exit until ``deadline``; then kill the whole process group. Returns the exit code."""
        try:
            rc = self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            rc = None
        self.kill()
        return rc

    def kill(self) -> None:
        """SIGKILL the worker's process group and every group below it (it and everything it started, ninja's
        compilers in groups of their own included), then reap it. Safe to call from two
        threads (a batch's deadline and the candidate's own thread): the second call returns at once."""
        with self._kill_lock:
            if self._killed:
                return
            self._killed = True
        kill_tree(self.proc.pid)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for f in (self._cmd, self._out, self._err, self.data):
            if f is None:
                continue
            try:
                f.close()
            except OSError:
                pass

    def log_tail(self, n: int = 2000) -> str:
        """Last ``n`` characters of the worker's stderr then stdout (for feedback only, never parsed)."""
        parts = []
        for name in ("stderr.log", "stdout.log"):
            path = os.path.join(self.scratch, name)
            try:
                with open(path, "rb") as f:
                    f.seek(0, os.SEEK_END)
                    size = f.tell()
                    f.seek(max(0, size - n))
                    text = f.read().decode(errors="replace").strip()
            except OSError:
                text = ""
            if text:
                parts.append(text)
        return "\n".join(parts)[-n:]


def describe_exit(rc: int | None) -> str:
    """'killed by SIGSEGV', 'exit code 3', ... for a return code (None = still running when killed)."""
    if rc is None:
        return "did not exit in time"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


def kill_tree(pgid: int) -> None:
    """SIGKILL process group ``pgid`` and every group below it (`groups_under`: ninja's compilers among them)."""
    for group in groups_under({pgid})[pgid]:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def groups_under(pgids: set[int]) -> dict[int, set[int]]:
    """For each process group in ``pgids``: itself and the groups of every descendant of its processes.

    Why: ninja starts each build command in a process group of its own (so that a Ctrl-C at a terminal does not
    reach it), so a signal to the group of a compile's worker reaches ninja but not the compilers it runs. One scan
    of ``/proc`` (pid, parent, group); where there is none, each group stands alone. Never this process's own group.
    """
    found = {pgid: {pgid} for pgid in pgids}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return found
    parent, group = {}, {}
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2:].split()  # after the command name, which may hold spaces
            parent[int(entry)], group[int(entry)] = int(fields[1]), int(fields[2])
        except (OSError, ValueError, IndexError):  # gone meanwhile, or a line this parser does not read
            continue
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    own = os.getpgrp()
    for pgid, groups in found.items():
        todo = [pid for pid, g in group.items() if g == pgid]
        seen = set(todo)
        while todo:
            pid = todo.pop()
            groups.add(group[pid])
            for child in children.get(pid, ()):
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
        groups.discard(own)
        groups.difference_update(g for g in list(groups) if g <= 1)
    return found
