"""kevin.sandbox.worker.channel with kevin.sandbox._process's mark socket: a timing mark is stamped by the kernel
when the worker sends it, not when the parent gets round to reading it."""

import os
import time

from kevin.sandbox import _process
from kevin.sandbox.worker.channel import Channel, parse_argv


def test_a_mark_carries_the_time_it_was_sent_not_the_time_it_was_read():
    r, w = _process._mark_socket()
    rep_r, rep_w = os.pipe()
    try:
        t0 = time.time()
        Channel(rep_w, mark_fd=w.fileno()).mark("null", 3)
        time.sleep(0.05)  # the parent reads 50 ms later
        stamps = []
        _process._drain_marks(r, stamps)
        assert [(s.event, s.index) for s in stamps] == [("null", 3)]
        assert stamps[0].sent - t0 < 0.02, stamps  # a stamp at reading would be >= 0.05 s after t0
        assert os.read(rep_r, 100) == b'{"event": "null", "index": 3}\n'  # the report line still goes
    finally:
        for fd in (rep_r, rep_w):
            os.close(fd)
        r.close()
        w.close()


def test_an_unreadable_datagram_is_kept_as_garbage():
    r, w = _process._mark_socket()
    try:
        w.send(b"not json")
        stamps = []
        _process._drain_marks(r, stamps)
        assert [(s.event, s.index) for s in stamps] == [("garbage", -1)]
    finally:
        r.close()
        w.close()


def test_a_full_mark_socket_drops_the_datagram_and_the_report_line_still_goes():
    r, w = _process._mark_socket()
    rep_r, rep_w = os.pipe()
    try:
        channel = Channel(rep_w, mark_fd=w.fileno())
        for _ in range(100_000):  # fill the socket: the sender is non-blocking
            try:
                os.write(w.fileno(), b"x" * 64)
            except BlockingIOError:
                break
        channel.mark("end", 5)  # must return at once
        assert os.read(rep_r, 100) == b'{"event": "end", "index": 5}\n'
    finally:
        for fd in (rep_r, rep_w):
            os.close(fd)
        r.close()
        w.close()


def test_the_worker_argv_names_its_optional_fds(tmp_path):
    job = tmp_path / "job.json"
    job.write_text("{}")
    r, w = _process._mark_socket()
    try:
        _, channel = parse_argv(["m", str(job), "5", "-1", f"marks={w.fileno()}"])
        assert (channel.report_fd, channel.data_fd, channel.mark_fd) == (5, None, w.fileno())
    finally:
        r.close()
        w.close()
