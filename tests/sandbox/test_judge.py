"""kevin.sandbox._judge.wall_check: the parent's clocks against a candidate's reported time (hack D6).

Every case is 100 timed calls, a reported median of 0.016 ms and a loop overhead of 0.01 ms, so the bound is
3 * 0.016 + (0.5 + 0.25 * 0.01) = 0.5505 ms per call.
"""

import os
import time

import pytest

from kevin.sandbox import SandboxConfig
from kevin.sandbox._judge import wall_check
from kevin.sandbox._process import Message, cpu_clock


def loop(wall_s: float, ticks_s: float, live_s: float | None) -> dict:
    """The timing messages of a 100-call loop that took wall_s on the parent's clock and the given CPU seconds."""
    begin = Message(10.0, {"event": "timing_begin"}, (1.0, None if live_s is None else 1.0))
    end = Message(10.0 + wall_s, {"event": "timing_end", "n_calls": 100},
                  (1.0 + ticks_s, None if live_s is None else 1.0 + live_s))
    return {"timing_begin": begin, "timing_end": end}


def check(messages: dict, backend: str) -> dict:
    return wall_check(messages, 0.016, 0.01, SandboxConfig(), backend)


def test_a_loaded_host_that_delays_an_honest_cpu_kernel_is_not_rejected():
    # wall: 84 ms / 100 - 0.01 = 0.83 ms per call (over the bound); CPU: 2 ms / 100 - 0.01 = 0.01 ms (under it)
    r = check(loop(0.084, ticks_s=0.0, live_s=0.002), "cpu")
    assert r["ok"], r
    assert r["implied_ms"] == pytest.approx(0.01)


def test_work_outside_the_timed_calls_is_rejected_when_it_costs_cpu_time():
    # the process computed all along: 84 ms of CPU too, so 0.83 ms per call on both clocks
    r = check(loop(0.084, ticks_s=0.08, live_s=0.084), "cpu")
    assert not r["ok"]
    assert "0.83 ms per call" in r["reason"]


def test_cpu_time_of_a_thread_that_exited_still_counts_through_the_tick_count():
    # the live threads ran 2 ms, but the process's tick count (dead threads included) grew by 80 ms: 0.79 ms
    r = check(loop(0.084, ticks_s=0.08, live_s=0.002), "cpu")
    assert not r["ok"]
    assert r["implied_cpu_ms"] == pytest.approx(0.79)


def test_on_cuda_the_wall_clock_alone_decides():
    # work may run on the GPU, where the host's CPU clock does not see it: 0.83 ms per call on the wall clock
    r = check(loop(0.084, ticks_s=0.0, live_s=0.002), "cuda")
    assert not r["ok"]
    assert r["implied_cpu_ms"] is None


def test_without_a_cpu_clock_the_wall_clock_decides():
    messages = loop(0.084, ticks_s=0.0, live_s=0.002)
    messages = {k: Message(m.t, m.data) for k, m in messages.items()}
    assert not check(messages, "cpu")["ok"]


def test_missing_timing_messages_fail_the_check():
    assert not check({"timing_begin": Message(1.0, {"event": "timing_begin"})}, "cpu")["ok"]


def test_the_cpu_clock_of_a_process_grows_with_its_work():
    before = cpu_clock(os.getpid())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:  # 0.3 s of CPU on this thread
        pass
    after = cpu_clock(os.getpid())
    assert before is not None and after is not None
    assert after[0] - before[0] >= 0.2  # ticks, 10 ms resolution
    if before[1] is not None:
        assert after[1] - before[1] >= 0.29
