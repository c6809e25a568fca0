"""kevin.sandbox._process.MarkStamps: the parent takes a mark's send stamp only from exactly the harness's datagram
for that mark, one datagram per mark line; forged, surplus, replaced or truncated datagrams spoil the stamps (the
wall check then times the marks by arrival)."""

import json
import os

import pytest

from kevin.sandbox import _process
from kevin.sandbox.worker.channel import Channel
from kevin.sandbox.worker.loop import segment_sizes

MARKS = [(e, s) for s in range(len(segment_sizes(10))) for e in ("null", "calls")] + [("end", 5)]  # 11 marks


@pytest.fixture
def wire():
    """(parent's MarkStamps, the harness's channel, report pipe's reading end, the socket's sending end)."""
    r, w = _process._mark_socket()
    rep_r, rep_w = os.pipe()
    yield _process.MarkStamps(r), Channel(rep_w, mark_fd=w.fileno()), rep_r, w
    for fd in (rep_r, rep_w):
        os.close(fd)
    r.close()
    w.close()


def harness_mark(channel: Channel, rep_r: int, stamps: _process.MarkStamps, event: str, index: int) -> None:
    """The harness sends a mark; the parent reads its line and takes its stamp."""
    channel.mark(event, index)
    line = b""
    while not line.endswith(b"\n"):
        line += os.read(rep_r, 1)
    stamps.take(json.loads(line))


def test_an_honest_loop_gets_a_stamp_for_every_mark_in_order(wire):
    stamps, channel, rep_r, _ = wire
    for event, index in MARKS:
        harness_mark(channel, rep_r, stamps, event, index)
    assert not stamps.spoiled
    assert [(s.event, s.index) for s in stamps.stamps] == MARKS


def test_a_flood_of_the_mark_socket_is_not_drained_and_spoils_the_stamps(wire):
    stamps, channel, rep_r, w = wire
    for _ in range(100):  # room is left for the harness's own datagram: its line says it went out
        os.write(w.fileno(), b"x")
    harness_mark(channel, rep_r, stamps, "null", 0)
    assert stamps.spoiled and stamps.stamps == []
    assert _process._recv_stamped(stamps.sock) != _process.EMPTY  # one datagram read, the flood left where it is


def test_a_forged_mark_sent_ahead_of_the_harnesss_spoils_the_stamps_at_the_next_mark(wire):
    stamps, channel, rep_r, w = wire
    os.write(w.fileno(), b"null 0")  # the exact bytes, early: taken for "null 0" ...
    harness_mark(channel, rep_r, stamps, "null", 0)
    assert not stamps.spoiled
    # ... but then the harness's own "null 0" stands where "calls 0" should
    harness_mark(channel, rep_r, stamps, "calls", 0)
    assert stamps.spoiled


def test_forged_marks_for_the_whole_loop_sent_at_once_leave_a_surplus_at_the_end(wire):
    stamps, channel, rep_r, w = wire
    for event, index in MARKS:  # every mark forged in one instant, ahead of the harness's own
        os.write(w.fileno(), f"{event} {index}".encode())
    for event, index in MARKS:
        harness_mark(channel, rep_r, stamps, event, index)
    assert stamps.spoiled


def test_a_mark_the_harness_could_not_send_spoils_the_stamps(wire):
    stamps, channel, rep_r, w = wire
    while True:  # fill the socket: the harness's datagram is dropped, a forged one would take its place
        try:
            os.write(w.fileno(), b"null 0")
        except BlockingIOError:
            break
    harness_mark(channel, rep_r, stamps, "null", 0)  # its line says "stamped": false
    assert stamps.spoiled


def test_an_oversized_datagram_spoils_the_stamps(wire):
    stamps, channel, rep_r, w = wire
    os.write(w.fileno(), b"null 0" + b" " * 100)  # truncated at reading: never the harness's bytes
    harness_mark(channel, rep_r, stamps, "null", 0)
    assert stamps.spoiled


def test_a_mark_line_without_a_datagram_spoils_the_stamps(wire):
    stamps, _, _, _ = wire
    stamps.take({"event": "null", "index": 0, "stamped": True})  # a line the harness did not send
    assert stamps.spoiled


def test_a_process_out_of_descriptors_gets_no_mark_socket_rather_than_an_error(monkeypatch):
    def no_descriptors(*args):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(_process.socket, "socketpair", no_descriptors)
    assert _process._mark_socket() is None


# count_company: table = pid -> (parent, session). A shell (100) leads the session of the trainer (150, the sandbox's
# own process), whose zygote (160) forked the workers: candidate 200, sibling 300 (whose ninja 301 runs compiler 302).
ZYGOTE_SESSION = {
    100: (1, 100), 150: (100, 100), 160: (150, 100), 200: (160, 100), 300: (160, 100), 301: (300, 100),
    302: (301, 100), 900: (1, 900),  # another session
}


def test_a_forked_workers_siblings_and_their_compilers_are_not_its_company():
    # 100 leads; 150, 160 and 300-302 reach it without passing through 200: 0 counted
    assert _process.count_company(ZYGOTE_SESSION, 200, 100, 150) == 0


def test_a_helper_below_a_forked_worker_is_its_company():
    # helper 201 (its child) and 202 (the helper's child): 2 counted, the siblings still not
    table = {**ZYGOTE_SESSION, 201: (200, 100), 202: (201, 100)}
    assert _process.count_company(table, 200, 100, 150) == 2


def test_an_orphan_in_the_zygotes_session_is_company():
    # a helper whose parent exited was adopted by init: it descends from no worker, so it may be anyone's
    table = {**ZYGOTE_SESSION, 400: (1, 100)}
    assert _process.count_company(table, 200, 100, 150) == 1


def test_a_child_in_another_session_is_company():
    # a child that left the session (setsid) still has the worker as its parent
    table = {**ZYGOTE_SESSION, 203: (200, 203)}
    assert _process.count_company(table, 200, 100, 150) == 1


def test_a_forked_workers_siblings_are_not_its_company_when_the_sessions_leader_is_gone():
    # the shell exited (nohup): the trainer 150 was adopted by init, so no line reaches the leader 100; they reach
    # the sandbox's own process 150 instead: 0 counted
    table = {pid: (1 if pid == 150 else parent, session) for pid, (parent, session) in ZYGOTE_SESSION.items()
             if pid != 100}
    assert _process.count_company(table, 200, 100, 150) == 0


def test_a_worker_leading_its_own_session_counts_every_other_process_of_it():
    # fresh-interpreter worker 500: child 501, grandchild 502, orphan 503 of its session; 900 is elsewhere: 3
    table = {500: (900, 500), 501: (500, 500), 502: (501, 500), 503: (1, 500), 900: (1, 900)}
    assert _process.count_company(table, 500, 500, 900) == 3


def _stat(pid: int) -> tuple[int, int, int]:
    """(process group, session, nice) of ``pid`` from /proc (fields 5, 6 and 19)."""
    fields = _process._stat_fields(pid)
    return int(fields[2]), int(fields[3]), int(fields[16])


def _golden_job(scratch) -> dict:
    """A golden job for an identity task on the CPU at the CUDA workers' niceness; its output dir made."""
    task = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
            "def get_inputs():\n    return [torch.ones(2)]\ndef get_init_inputs():\n    return []\n")
    (scratch / "t").mkdir()
    return {"mode": "golden", "device": "cpu", "niceness": _process.CUDA_NICENESS, "seed": 0, "n_sets": 1,
            "train_mode": False, "n_rechecks": 0, "baselines": [], "timing": {},
            "tasks": [{"key": "t", "source": task, "out_dir": str(scratch / "t"), "baseline": False}]}


def test_a_worker_forked_from_the_zygote_leads_its_group_in_this_session_at_its_niceness(tmp_path):
    # the golden module on the CPU, with the CUDA workers' niceness: it asks for the device and waits, so it can be
    # looked at alive; its group is its own (a kill reaches its compilers), its session this one (where its nice
    # holds against this process: a session of its own would be an autogroup of its own)
    import time

    from kevin.sandbox.sandbox import wait_for_group

    zygote_dir, work = tmp_path / "zygote", tmp_path / "golden"
    zygote_dir.mkdir()
    work.mkdir()
    zygote = _process.Zygote(str(zygote_dir), _process.scrubbed_env(str(zygote_dir)))
    job = _golden_job(work)
    worker = _process.Worker("kevin.sandbox.worker.golden", job, scratch=str(work), zygote=zygote, data_pipe=True)
    try:
        assert isinstance(worker.proc, _process.ForkedProcess)
        assert worker.wait_for(("need_device",), time.monotonic() + 60) is not None, worker.log_tail()
        wait_for_group(worker.proc.pid)
        group, session, nice = _stat(worker.proc.pid)
        assert (group, session, nice) == (worker.proc.pid, os.getsid(0), _process.CUDA_NICENESS)
    finally:
        worker.kill()
        zygote.close()


def test_a_fresh_interpreter_worker_leads_its_group_in_this_session_at_its_niceness(tmp_path):
    # the same without the zygote (prefork=False, or a zygote that failed)
    import time

    from kevin.sandbox.sandbox import wait_for_group

    job = _golden_job(tmp_path)
    worker = _process.Worker("kevin.sandbox.worker.golden", job, scratch=str(tmp_path), data_pipe=True)
    try:
        assert worker.wait_for(("need_device",), time.monotonic() + 60) is not None, worker.log_tail()
        wait_for_group(worker.proc.pid)
        assert _stat(worker.proc.pid) == (worker.proc.pid, os.getsid(0), _process.CUDA_NICENESS)
    finally:
        worker.kill()
