"""A fork server for sandbox workers: torch imported once, one fresh fork per candidate or golden run.

Starting Python and importing torch costs seconds per process (more with a CUDA build of torch); a fork costs
milliseconds. The zygote is started by the parent in a group of its own with a scrubbed environment, imports torch
and the workers, and never initialises CUDA, never sees a task, an input or a seed. For every request it forks a
child that leads a process group of its own, closes the zygote's socket, takes the request's environment, scratch
directory, log files and private pipes (passed as file descriptors over the socket), and runs the worker module
(`kevin.sandbox.worker.candidate` or `kevin.sandbox.worker.golden`) exactly as a freshly spawned process would. The
child inherits nothing of other candidates: each fork starts from the zygote's clean state.

Every child stays in the training process's session: with Linux's scheduler autogroups on, a session of its own
would share the cores as one group, weighed as much as the whole training process whatever its niceness, while in
one session the workers' nice value (`kevin.sandbox._process.CUDA_NICENESS`) leaves a policy decoding beside them
the core it needs. A child cannot leave the session (``setsid`` fails for a group leader; the static rules forbid
process and group calls).

Protocol (AF_UNIX SOCK_SEQPACKET): the parent sends ``{"module", "job", "cwd", "env", "stdout", "stderr", "extra"}``
with the report pipe's write end, the command pipe's read end and one fd per name in ``extra`` (``"data"``,
``"marks"``); the zygote answers ``{"pid": ...}``, and later ``{"exit": pid, "code": ...}`` (``code`` as
``Popen.returncode``: negative for a signal) when it reaps it. The zygote puts the child in its own group before
answering (the child does too, whichever runs first), so a signal to the group reaches it from the start.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import tempfile


MODULES = {"candidate": "kevin.sandbox.worker.candidate", "golden": "kevin.sandbox.worker.golden"}
"""The worker modules a request may name."""


def _child(req: dict, fds: list[int], sock: socket.socket) -> None:
    try:
        os.setpgid(0, 0)
        sock.close()
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        tempfile.tempdir = None
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for target, path in ((1, req["stdout"]), (2, req["stderr"])):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(fd, target)
            os.close(fd)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        # should the zygote die while this group is stopped (a timing's pause), the kernel hangs up the orphaned group
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        report_fd, command_fd, *extra = fds
        module = MODULES[req["module"]]
        sys.argv = [module, req["job"], str(report_fd), str(command_fd),
                    *(f"{name}={fd}" for name, fd in zip(req.get("extra", ()), extra) if name in ("data", "marks"))]
        import importlib

        from kevin.sandbox.worker import channel as _worker

        _worker.run_main(importlib.import_module(module).main)
    finally:
        os._exit(70)


def serve(sock: socket.socket) -> None:
    """Fork a candidate per request; report exits; return when the parent closes the socket."""
    children: set[int] = set()
    while True:
        readable, _, _ = select.select([sock], [], [], 0.05)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            children.discard(pid)
            sock.send(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status)}).encode())
        if not readable:
            continue
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 4)
        if not msg:
            return
        req = json.loads(msg)
        pid = os.fork()
        if pid == 0:
            _child(req, list(fds), sock)
        with contextlib.suppress(OSError):  # as the child does: its group exists before its pid goes out
            os.setpgid(pid, pid)
        for fd in fds:
            os.close(fd)
        children.add(pid)
        sock.send(json.dumps({"pid": pid}).encode())


def preload() -> list[str]:
    """Import what every candidate needs without touching the CUDA driver; returns the blocked driver queries.

    ``torch.cuda.is_available()`` and ``device_count()`` call ``cudaGetDeviceCount``, which runs ``cuInit``
    and makes torch mark every later fork as unable to use CUDA ("Cannot re-initialize CUDA in forked
    subprocess"); some of torch's own modules ask at import. The zygote sees no GPU
    (``CUDA_VISIBLE_DEVICES=""``), so the answer is 0 anyway: the query is answered without the driver, and
    its call stack is returned for diagnosis.
    """
    import traceback

    import torch

    blocked: list[str] = []
    real = getattr(torch._C, "_cuda_getDeviceCount", None)

    def no_driver_here() -> int:
        blocked.append("".join(traceback.format_stack(limit=12)[:-1]))
        return 0

    if real is not None:
        torch._C._cuda_getDeviceCount = no_driver_here
    try:
        import safetensors.torch  # noqa: F401 - preloaded for the children
        import torch.utils._python_dispatch  # noqa: F401
        import torch.utils.cpp_extension  # noqa: F401

        from kevin.sandbox.worker import candidate as _candidate, guards as _guards, inventory as _inventory, timing  # noqa: F401
        from kevin.sandbox.worker import golden as _golden  # noqa: F401
        from kevin.sandbox.build import extension as _extension  # noqa: F401

        _candidate.warm_up_dispatch_mode()  # imports torch._dynamo once here instead of in every child
    finally:
        if real is not None:
            torch._C._cuda_getDeviceCount = real
    return blocked


def forks_cleanly() -> bool:
    """Whether a child forked now could still initialise CUDA for itself (a probe fork)."""
    pid = os.fork()
    if pid == 0:
        import torch

        os._exit(1 if torch.cuda.is_initialized() or torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    preload()
    if not forks_cleanly():
        sys.exit(1)  # children could not use their GPU; the parent falls back to fresh interpreters
    sock.send(b'{"ready": true}')
    serve(sock)


if __name__ == "__main__":
    main()
