"""kevin.sandbox._judge.wall_check: the parent's clocks against a candidate's reported time (hack D6).

Every case is 100 timed calls, a reported median of 0.016 ms and a loop overhead of 0.01 ms, so the bound is
3 * 0.016 + (0.5 + 0.25 * 0.01) = 0.5505 ms per call.
"""

import os
import time

import pytest

from kevin.sandbox import SandboxConfig
from kevin.sandbox._judge import wall_check
from kevin.sandbox._process import CpuClock, Message, cpu_clock


def loop(wall_s: float, ticks_s: float, live_s: float | None, *, reaped_s: float = 0.0, company: int = 0) -> dict:
    """The timing messages of a 100-call loop that took wall_s on the parent's clock and the given CPU seconds
    (``reaped_s``: CPU seconds of children waited for meanwhile; ``company``: other processes at the end)."""
    begin = Message(10.0, {"event": "timing_begin"}, CpuClock(1.0, None if live_s is None else 1.0, 0.0, 0))
    end = Message(10.0 + wall_s, {"event": "timing_end", "n_calls": 100},
                  CpuClock(1.0 + ticks_s, None if live_s is None else 1.0 + live_s, reaped_s, company))
    return {"timing_begin": begin, "timing_end": end}


def check(messages: dict, backend: str) -> dict:
    return wall_check(messages, 0.016, 0.01, SandboxConfig(), backend)


def test_a_loaded_host_that_delays_an_honest_cpu_kernel_is_not_rejected():
    # wall: 84 ms / 100 - 0.01 = 0.83 ms per call (over the bound); CPU: 2 ms / 100 - 0.01 = 0.01 ms;
    # checked: max(min(0.83, 0.01), 0.83 / 2) = 0.415 ms (under it)
    r = check(loop(0.084, ticks_s=0.0, live_s=0.002), "cpu")
    assert r["ok"], r
    assert r["implied_ms"] == pytest.approx(0.415)


def test_the_cpu_clock_can_at_most_halve_the_wall_figure():
    # wall 200 ms / 100 - 0.01 = 1.99 ms; CPU 0.01 ms; checked max(0.01, 0.995) = 0.995 ms: over the bound
    r = check(loop(0.2, ticks_s=0.0, live_s=0.002), "cpu")
    assert not r["ok"]
    assert r["implied_ms"] == pytest.approx(0.995)


def test_another_process_in_the_candidates_session_voids_its_cpu_clock():
    # a child could compute while the candidate sleeps: only the wall clock counts then (0.83 ms)
    r = check(loop(0.084, ticks_s=0.0, live_s=0.002, company=1), "cpu")
    assert not r["ok"]
    assert r["implied_cpu_ms"] is None


def test_a_child_reaped_during_the_loop_voids_the_cpu_clock():
    r = check(loop(0.084, ticks_s=0.0, live_s=0.002, reaped_s=0.08), "cpu")
    assert not r["ok"]
    assert r["implied_cpu_ms"] is None


def test_the_cpu_figure_subtracts_the_loops_cpu_overhead():
    # CPU 30 ms / 100 = 0.3 ms per call, minus a CPU overhead of 0.25 ms = 0.05 ms (the wall overhead is 0.01)
    r = wall_check(loop(0.084, ticks_s=0.0, live_s=0.03), 0.016, 0.01, SandboxConfig(), "cpu", loop_overhead_cpu_ms=0.25)
    assert r["implied_cpu_ms"] == pytest.approx(0.05)


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
    r = check(messages, "cpu")
    assert not r["ok"] and r["implied_cpu_ms"] is None


def test_missing_timing_messages_fail_the_check():
    assert not check({"timing_begin": Message(1.0, {"event": "timing_begin"})}, "cpu")["ok"]


def test_the_cpu_clock_of_a_process_grows_with_its_work():
    before = cpu_clock(os.getpid())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:  # 0.3 s of CPU on this thread
        pass
    after = cpu_clock(os.getpid())
    assert before is not None and after is not None
    assert after.ticks - before.ticks >= 0.2  # 10 ms resolution
    if before.live is not None:
        assert after.live - before.live >= 0.29


def test_the_cpu_clock_counts_a_child_process_as_company():
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        clock = cpu_clock(os.getpid())
        assert clock is not None and clock.company >= 1
    finally:
        child.kill()
        child.wait()
