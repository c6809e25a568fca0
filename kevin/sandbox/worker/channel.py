"""Worker-side plumbing shared by the golden, compile and candidate processes. Standard library only.

A worker is started as ``python -m kevin.sandbox._<kind> JOB_JSON REPORT_FD COMMAND_FD [data=FD] [marks=FD]``.
It reports to the parent as JSON lines on the inherited pipe ``REPORT_FD`` (never on stdout, which is only logged)
and reads one-word commands from ``COMMAND_FD``. The parent timestamps every line when it arrives; a candidate's
timing marks also go, just before, as datagrams on ``marks``, which the kernel stamps when they are sent.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
import traceback
from typing import Any


class Channel:
    """The private report pipe (worker -> parent) and command pipe (parent -> worker)."""

    def __init__(self, report_fd: int, command_fd: int | None = None, data_fd: int | None = None,
                 mark_fd: int | None = None):
        self.report_fd = report_fd
        self.data_fd = data_fd
        self.mark_fd = mark_fd
        self._mark_id: tuple[int, int] | None = None
        if mark_fd is not None:
            os.set_blocking(mark_fd, False)  # a full socket drops the datagram, never stalls the timing loop
            st = os.fstat(mark_fd)
            self._mark_id = (st.st_dev, st.st_ino)  # a descriptor pointed elsewhere (dup2) is not the socket
        self.command = os.fdopen(command_fd, "rb", buffering=0) if command_fd is not None and command_fd >= 0 else None

    def send(self, event: str, **fields: Any) -> None:
        line = (json.dumps({"event": event, **fields}, default=str) + "\n").encode()
        view = memoryview(line)
        while view:
            n = os.write(self.report_fd, view)
            view = view[n:]

    def mark(self, event: str, index: int) -> None:
        """A timing mark: a datagram the kernel stamps, then the report line, which says whether the datagram went
        out in full (``stamped``; a full socket drops it rather than stall the timing loop)."""
        from kevin.sandbox.worker.loop import mark_bytes

        stamped = False
        payload = mark_bytes(event, index)
        if self.mark_fd is not None and payload is not None:
            try:
                st = os.fstat(self.mark_fd)
                if (st.st_dev, st.st_ino) == self._mark_id:
                    stamped = os.write(self.mark_fd, payload) == len(payload)
            except OSError:
                pass
        self.send(event, index=index, stamped=stamped)

    def send_bytes(self, event: str, payload: bytes, **fields: Any) -> None:
        """A header line ``{event, nbytes, ...}`` on the report pipe, then ``payload`` on the data pipe."""
        if self.data_fd is None:
            raise RuntimeError("this worker has no data pipe")
        self.send(event, nbytes=len(payload), **fields)
        view = memoryview(payload)
        while view:
            n = os.write(self.data_fd, view[: 1 << 24])
            view = view[n:]

    def receive(self) -> str:
        """Block until the parent sends a command line; '' when the parent closed the pipe."""
        if self.command is None:
            return ""
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = self.command.read(1)
            if not chunk:
                break
            buf += chunk
        return buf.decode().strip()


def apply_limits(memory_bytes: int | None) -> None:
    """No core dumps; cap the address space (CPU backend only: CUDA reserves huge virtual ranges)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_bytes:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def parse_argv(argv: list[str]) -> tuple[dict[str, Any], Channel]:
    job_path, report_fd, command_fd = argv[1], int(argv[2]), int(argv[3])
    extra = {k: int(v) for k, _, v in (a.partition("=") for a in argv[4:])}
    with open(job_path) as f:
        job = json.load(f)
    return job, Channel(report_fd, command_fd, extra.get("data"), extra.get("marks"))


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _own_frame(frame: traceback.FrameSummary) -> bool:
    """A frame of this package or of Python's import machinery: noise in the candidate's feedback."""
    name = frame.filename or ""
    return name.startswith(_PACKAGE) or name.startswith("<frozen importlib")


def error_text(exc: BaseException, limit: int = 4000) -> str:
    """The exception with its traceback, the last ``limit`` characters (the useful end), without the sandbox's own
    frames and with paths scrubbed (`feedback.scrub_paths`): the text becomes the model's feedback."""
    try:
        top = traceback.TracebackException.from_exception(exc)
        seen: set[int] = set()
        todo = [top]
        while todo:
            te = todo.pop()
            if id(te) in seen:
                continue
            seen.add(id(te))
            te.stack = traceback.StackSummary.from_list([f for f in te.stack if not _own_frame(f)])
            todo.extend(x for x in (te.__cause__, te.__context__) if x is not None)
            todo.extend(getattr(te, "exceptions", None) or [])
        text = "".join(top.format())
    except Exception:  # noqa: BLE001 - an exception that cannot be formatted so: the plain traceback
        try:
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        except Exception:  # noqa: BLE001 - e.g. a __str__ that raises
            text = f"{type(exc).__name__} (its message could not be formatted)"
    try:
        from kevin.sandbox.feedback import scrub_paths

        text = scrub_paths(text)
    except Exception:  # noqa: BLE001 - the parent scrubs again
        pass
    return text[-limit:]


def _out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is torch's device out-of-memory error (the sandbox judges such a candidate again alone)."""
    torch = sys.modules.get("torch")
    kind = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    return isinstance(kind, type) and isinstance(exc, kind)


class HarnessError(Exception):
    """The harness's own failure, not the candidate's: it could not write its own file for the parent (a full disk)
    or load its own kernel. Only an exception of exactly this type is reported with phase "harness": a candidate's
    exception can carry any ``phase`` attribute (a class property survives the harness's tagging)."""

    phase = "harness"


def reported_phase(exc: BaseException) -> str:
    """Where ``exc`` happened, as its ``phase`` tag says; "harness" only from a `HarnessError` itself."""
    phase = str(getattr(exc, "phase", "unknown"))
    return "unknown" if phase == "harness" and type(exc) is not HarnessError else phase


def lower_priority(niceness: int) -> None:
    """Raise this process's nice value to ``niceness`` (inherited by the compilers it starts); never lowers it.

    With the workers in the training process's session (one scheduler autogroup, or none), this is what leaves a
    policy decoding beside the sandbox the cores it wants. An unprivileged process cannot lower its nice
    value again, so a candidate keeps the niceness the reference was timed at.
    """
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["0"]:  # nice is per thread
        with contextlib.suppress(ProcessLookupError):
            if niceness > os.getpriority(os.PRIO_PROCESS, int(tid)):
                os.setpriority(os.PRIO_PROCESS, int(tid), niceness)


def run_main(main: Any) -> None:
    """Run ``main(job, channel)``; report an uncaught exception as an ``error`` event; exit 0."""
    job, channel = parse_argv(sys.argv)
    try:
        lower_priority(int(job.get("niceness", 0)))
        main(job, channel)
    except BaseException as exc:  # noqa: BLE001 - everything the candidate raises becomes a report
        try:
            channel.send("error", phase=reported_phase(exc), message=error_text(exc, 20000),
                         out_of_memory=_out_of_memory(exc))
        except OSError:
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
