"""kevin.sandbox.worker.channel: a timing mark goes as a datagram the kernel stamps at sending, then as a report
line that says whether the datagram went out in full."""

import json
import os
import time

import pytest

from kevin.sandbox import _process
from kevin.sandbox.worker.channel import Channel, parse_argv


@pytest.fixture
def wire():
    """(channel, report pipe's reading end, mark socket's reading end, its sending end)."""
    r, w = _process._mark_socket()
    rep_r, rep_w = os.pipe()
    yield Channel(rep_w, mark_fd=w.fileno()), rep_r, r, w
    for fd in (rep_r, rep_w):
        os.close(fd)
    r.close()
    w.close()


def test_a_mark_carries_the_time_it_was_sent_not_the_time_it_was_read(wire):
    channel, _, r, _ = wire
    t0 = time.time()
    channel.mark("null", 3)
    time.sleep(0.05)  # the parent reads 50 ms later
    payload, sent = _process._recv_stamped(r)
    assert payload == b"null 3"
    assert sent - t0 < 0.02  # a stamp at reading would be >= 0.05 s after t0


def test_the_report_line_says_the_datagram_went_out(wire):
    channel, rep_r, _, _ = wire
    channel.mark("calls", 1)
    assert json.loads(os.read(rep_r, 200)) == {"event": "calls", "index": 1, "stamped": True}


def test_a_full_mark_socket_returns_at_once_and_the_line_says_unstamped(wire):
    channel, rep_r, _, w = wire
    while True:  # fill the socket (the sending end is non-blocking)
        try:
            os.write(w.fileno(), b"x" * 64)
        except BlockingIOError:
            break
    t0 = time.monotonic()
    channel.mark("end", 5)
    assert time.monotonic() - t0 < 1.0
    assert json.loads(os.read(rep_r, 200))["stamped"] is False


def test_the_worker_argv_names_its_optional_fds(tmp_path, wire):
    _, _, _, w = wire
    job = tmp_path / "job.json"
    job.write_text("{}")
    _, channel = parse_argv(["m", str(job), "5", "-1", f"marks={w.fileno()}"])
    assert (channel.report_fd, channel.data_fd, channel.mark_fd) == (5, None, w.fileno())


def test_a_mark_descriptor_pointed_elsewhere_by_dup2_is_not_stamped(wire):
    # a kernel keeps a copy of the socket and points the harness's descriptor at another file: the harness's
    # write would succeed there, so the line must not claim the datagram went out
    _, _, _, w = wire
    rep2_r, rep2_w = os.pipe()
    mark_fd = os.dup(w.fileno())
    try:
        channel = Channel(rep2_w, mark_fd=mark_fd)
        other_r, other_w = os.pipe()
        os.dup2(other_w, mark_fd)
        channel.mark("null", 0)
        assert json.loads(os.read(rep2_r, 200))["stamped"] is False
        for fd in (other_r, other_w):
            os.close(fd)
    finally:
        for fd in (rep2_r, rep2_w, mark_fd):
            os.close(fd)
