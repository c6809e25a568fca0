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
