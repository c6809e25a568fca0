"""kevin.sandbox._judge.wall_check: the parent's clocks against a candidate's reported time (hack D6).

Every case is 10 timed calls in the loop's 5 segments of 2 calls, each led by 2 null calls, and a reported
median of 0.016 ms. The bound is 3 * 0.016 + 0.5 + 3 * noise, noise being the standard deviation of the null
blocks' per-call ms over the segments (0 when every segment is alike: a bound of 0.548 ms).
"""

import os
import time

import pytest

from kevin.sandbox.build.harness import Built

from kevin.sandbox import SandboxConfig
from kevin.sandbox._judge import wall_check
from kevin.sandbox._process import CpuClock, MarkStamp, Message, cpu_clock

N = 10  # timed calls: segments of 2


def loop(segments: list[tuple[float, float, float, float]], *, company: int = 0, threads: tuple[int, int] = (4, 4),
         reaped_s: float = 0.0, clocks: bool = True) -> list[Message]:
    """The marks of a loop whose segment s took (null wall ms, null CPU ms, calls wall ms, calls CPU ms) in all
    (2 null calls, 2 timed calls); ``reaped_s`` of children's CPU appear before the last mark."""
    t, cpu = 10.0, 1.0
    out = [Message(t, {"event": "timing_begin"}, CpuClock(cpu, cpu, 0.0, company, threads[0]) if clocks else None)]

    def mark(event: str, index: int, reaped: float = 0.0) -> Message:
        n_threads = threads[1] if event == "end" else threads[0]
        return Message(t, {"event": event, "index": index},
                       CpuClock(cpu, cpu, reaped, -1, n_threads) if clocks else None)

    for s, (null_wall, null_cpu, calls_wall, calls_cpu) in enumerate(segments):
        out.append(mark("null", s))
        t, cpu = t + null_wall / 1e3, cpu + null_cpu / 1e3
        out.append(mark("calls", s))
        t, cpu = t + calls_wall / 1e3, cpu + calls_cpu / 1e3
    out.append(mark("end", len(segments), reaped_s))
    out.append(Message(t, {"event": "timing_end", "n_calls": N + 5},
                       CpuClock(cpu, cpu, reaped_s, company, threads[1]) if clocks else None))
    return out


def check(messages: list[Message]) -> dict:
    return wall_check(messages, 0.016, N, SandboxConfig(max_wall_ratio=3.0))


# per segment: null calls 5 ms each (10 ms wall for 2) but 2 ms of CPU each; the timed calls 6 ms each on the wall,
# 2.1 ms each of CPU: the host was loaded, the kernel did 0.1 ms of work beyond the harness
LOADED = (10.0, 4.0, 12.0, 4.2)


def test_a_loaded_host_that_delays_an_honest_kernel_is_not_rejected():
    # wall: 6 - 5 = 1 ms per call; CPU: 2.1 - 2 = 0.1; checked max(min(1, 0.1), 1 / 2) = 0.5 ms; bound 0.548 ms
    r = check(loop([LOADED] * 5))
    assert r["ok"], r
    assert r["implied_ms"] == pytest.approx(0.5)


def test_the_harness_cost_is_measured_in_the_same_segment_not_elsewhere():
    # the null calls grew with the load (20 ms each) and so did the timed calls (20.1 ms): 0.1 ms beyond the harness
    r = check(loop([(40.0, 40.0, 40.2, 40.2)] * 5))
    assert r["ok"], r
    assert r["implied_ms"] == pytest.approx(0.1)


def test_a_forged_timer_shows_in_every_segment_and_is_rejected():
    # the calls cost 22 ms each against 2 ms of harness, on both clocks: 20 ms per call for a reported 0.016
    r = check(loop([(4.0, 4.0, 44.0, 44.0)] * 5))
    assert not r["ok"]
    assert "20 ms per call" in r["reason"]


def test_a_load_spike_in_some_segments_is_forgiven_by_the_others():
    # segments 0-3 spiked: 20 ms per call on the wall, none on the CPU: max(min(20, 0.1), 10) = 10 ms (over)
    spike = (4.0, 4.0, 44.0, 4.2)
    r = check(loop([spike] * 4 + [LOADED]))
    assert r["ok"], r
    assert [g["implied_ms"] for g in r["segments"]] == [10.0] * 4 + [0.5]


def test_a_wandering_harness_cost_widens_the_bound_by_three_times_its_spread():
    # null calls of 2, 2, 2, 2 and 7 ms per call: mean 3, sample std sqrt((4 * 1 + 16) / 4) = sqrt(5) = 2.236 ms
    # bound 0.548 + 3 * 2.236 = 7.256 ms; the timed calls cost 6 ms beyond the harness in every segment: within it
    segments = [(4.0, 4.0, 16.0, 16.0)] * 4 + [(14.0, 14.0, 26.0, 26.0)]
    r = check(loop(segments))
    assert r["segments"][0]["limit_ms"] == pytest.approx(0.548 + 3 * 5 ** 0.5, abs=1e-3)
    assert r["ok"] and r["implied_ms"] == pytest.approx(6.0)


def test_the_cpu_clock_can_at_most_halve_the_wall_figure():
    # wall 40 ms per call beyond the harness, CPU 0.1 ms: checked 20 ms, over the bound 0.548 ms
    r = check(loop([(4.0, 4.0, 84.0, 4.2)] * 5))
    assert not r["ok"]
    assert r["implied_ms"] == pytest.approx(20.0)


def test_another_process_in_the_candidates_session_voids_its_cpu_clock():
    # a child could compute while the candidate sleeps: the wall figure alone counts (20 ms per call)
    r = check(loop([(4.0, 4.0, 44.0, 4.2)] * 5, company=1))
    assert not r["ok"]
    assert all(g["implied_cpu_ms"] is None for g in r["segments"])


def test_a_child_reaped_during_the_loop_voids_the_cpu_clock_of_that_segment():
    r = check(loop([(4.0, 4.0, 44.0, 4.2)] * 5, reaped_s=0.5))
    assert r["segments"][-1]["implied_cpu_ms"] is None
    assert r["segments"][0]["implied_cpu_ms"] == pytest.approx(0.1)


def test_without_a_cpu_clock_the_wall_clock_decides():
    r = check(loop([LOADED] * 5, clocks=False))
    assert r["implied_ms"] == pytest.approx(1.0)  # 6 - 5 ms


def test_missing_or_reordered_marks_fail_the_check():
    messages = loop([LOADED] * 5)
    assert not check([m for m in messages if m.data.get("index") != 2])["ok"]
    assert not check(messages[:2] + messages[3:4] + messages[2:3] + messages[4:])["ok"]


def test_the_segment_sizes_come_from_the_sample_count_not_the_worker():
    # the same marks read as 50 calls (10 per segment): per-call times fall fivefold, the check follows
    r = wall_check(loop([(4.0, 4.0, 44.0, 44.0)] * 5), 0.016, 50, SandboxConfig(max_wall_ratio=3.0))
    assert r["segments"][0]["implied_wall_ms"] == pytest.approx(44.0 / 10 - 2.0)


def test_by_default_a_kernel_that_hides_almost_half_its_work_is_rejected():
    # 3.6 ms of work per call beyond the harness, 2 ms of it reported (1.6 ms hidden after the timer stopped):
    # the default bound is 1.5 * 2 + 0.5 = 3.5 ms
    r = wall_check(loop([(4.0, 4.0, 11.2, 11.2)] * 5), 2.0, N, SandboxConfig())
    assert not r["ok"] and r["implied_ms"] == pytest.approx(3.6)


def test_a_native_thread_started_while_timed_is_rejected():
    r = check(loop([LOADED] * 5, threads=(4, 5)))
    assert not r["ok"]
    assert "1 native thread" in r["reason"]


def test_the_cpu_clock_of_a_process_grows_with_its_work():
    before = cpu_clock(os.getpid())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:  # 0.3 s of CPU on this thread
        pass
    after = cpu_clock(os.getpid(), company=False)
    assert before is not None and after is not None
    assert after.ticks - before.ticks >= 0.2  # 10 ms resolution
    assert after.company == -1 and after.threads >= 1
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


def test_the_cpu_clock_of_another_process_resolves_milliseconds_the_tick_count_rounds_away():
    # The tick count moves in 10 ms steps: over a segment of 20 calls that is 0.5 ms a call either way, and as the
    # larger figure it once charged an honest kernel 1.2 ms a call on a loaded host. The process clock has ns steps.
    import subprocess
    import sys

    burn = ("import sys, time\nsys.stdin.readline()\nt0 = time.process_time()\n"
            "while time.process_time() - t0 < 0.003: pass\n"  # 3 ms of CPU
            "print(time.process_time() - t0, flush=True)\nsys.stdin.readline()\n")
    child = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)  # its start-up done
        before = cpu_clock(child.pid, company=False)
        child.stdin.write("go\n")
        child.stdin.flush()
        own = float(child.stdout.readline())  # the child's own count of the work, read after it
        after = cpu_clock(child.pid, company=False)
    finally:
        child.stdin.write("done\n")
        child.stdin.flush()
        child.wait()
    assert before.process is not None and after.process is not None
    # the printing and the reads around the work cost a little more than the work: within 2 ms of it
    assert own <= after.process - before.process <= own + 0.002


def test_a_harness_write_failure_is_reported_as_the_sandboxs_not_the_kernels():
    # the worker reports {"event": "error", "phase": "harness"} when its own outputs file could not be written
    from types import SimpleNamespace

    from kevin.sandbox._judge import CandidateRun
    from kevin.sandbox._process import Message

    run = CandidateRun.__new__(CandidateRun)
    tb = "Traceback ...\nSafetensorError: Error while serializing: I/O error: No space left on device (os error 28)"
    run.worker = SimpleNamespace(messages=[Message(0.0, {"event": "model_ready"})])
    run.details, run.src = {}, ""
    result = run._crash(Message(1.0, {"event": "error", "phase": "harness", "message": tb}), 0.0, 60.0)
    assert result.status == "runtime_error"
    assert "the sandbox failed internally" in result.feedback and "not your kernel's fault" in result.feedback
    assert "No space left on device" in result.feedback
    assert result.details["internal_error"] == tb


def late_null_marks(lag_ms: float) -> tuple[list[Message], list[MarkStamp]]:
    """An honest loop without CPU clocks: per segment, 2 null calls of 1.3 ms (2.6 ms) and 2 timed calls of
    1.316 ms (2.632 ms). Every "null" mark is read ``lag_ms`` late (this process slow to read); the stamps carry the
    true send times, on another clock (realtime: only their differences count)."""
    t, true, lag = 10.0, [], {"null": lag_ms / 1e3}
    for s in range(5):
        true += [("null", s, t)]
        t += 2.6e-3
        true += [("calls", s, t)]
        t += 2.632e-3
    true += [("end", 5, t)]
    messages = [Message(t + lag.get(e, 0.0), {"event": e, "index": i}) for e, i, t in true]
    return messages, [MarkStamp(e, i, 1.7e9 + t) for e, i, t in true]


def test_a_null_mark_read_late_is_timed_by_its_send_stamp():
    # sent: 2.632 / 2 - 2.6 / 2 = 0.016 ms per call, within the bound of 0.548 ms
    messages, stamps = late_null_marks(2.3)
    r = wall_check(messages, 0.016, N, SandboxConfig(max_wall_ratio=3.0), stamps)
    assert r["ok"] and r["clock"] == "sent", r
    assert r["implied_ms"] == pytest.approx(0.016, abs=1e-4)


def test_a_forged_mark_datagram_leaves_the_arrival_times_in_force():
    # an extra datagram: the stamps are ignored; by arrival, the last segment's null block looks 0.3 ms long, so
    # 2.632 / 2 - 0.3 / 2 = 1.166 ms per call there (more elsewhere): over the bound, the honest loop is rejected
    messages, stamps = late_null_marks(2.3)
    forged = [MarkStamp("null", 0, stamps[0].sent - 0.05)] + stamps
    r = wall_check(messages, 0.016, N, SandboxConfig(max_wall_ratio=3.0), forged)
    assert r["clock"] == "arrival" and not r["ok"], r
    assert r["implied_ms"] == pytest.approx(1.166, abs=1e-3)


def test_stamps_that_run_backwards_leave_the_arrival_times_in_force():
    # one mark stamped 5 ms before the one ahead of it (its block is 2.6 ms): the span is unchanged, the order not
    messages, stamps = late_null_marks(0.0)
    stepped = stamps[:3] + [stamps[3]._replace(sent=stamps[3].sent - 5e-3)] + stamps[4:]
    assert wall_check(messages, 0.016, N, SandboxConfig(max_wall_ratio=3.0), stepped)["clock"] == "arrival"


def test_stamps_whose_span_differs_from_the_arrival_times_leave_the_arrival_times_in_force():
    # a forward step of the realtime clock (1 s) inside a null block: the stamps span 1 s more than the arrivals
    messages, stamps = late_null_marks(0.0)
    stepped = stamps[:1] + [s._replace(sent=s.sent + 1.0) for s in stamps[1:]]
    assert wall_check(messages, 0.016, N, SandboxConfig(max_wall_ratio=3.0), stepped)["clock"] == "arrival"


# ------------------------------------------------------------------ the compile limit leaves paused seconds out
class _SlowImport:
    """A worker whose import reports after ``ready_at`` (monotonic): `wait_for` records each deadline it was given."""

    def __init__(self, ready_at):
        self.ready_at, self.deadlines = ready_at, []

    def wait_for(self, events, deadline):
        self.deadlines.append(deadline)
        time.sleep(max(0.0, min(deadline, self.ready_at) - time.monotonic()))
        return Message(time.monotonic(), {"event": "imported"}, None) if time.monotonic() >= self.ready_at else None

    def timed_out(self, deadline):
        return time.monotonic() >= deadline


def _waiting_run(worker, limit_s):
    from types import SimpleNamespace

    return SimpleNamespace(config=SandboxConfig(compile_timeout_s=limit_s), deadline=float("inf"), worker=worker,
                           details={}, t0=time.monotonic(), _check_symbols=lambda: None,
                           _crash=lambda msg, deadline, limit: SimpleNamespace(status="timeout"),
                           _clear_build_locks=lambda: None)


def test_seconds_a_timing_kept_the_import_stopped_do_not_count_against_its_limit():
    from kevin.sandbox._judge import CandidateRun

    # the import needs 0.5 s of wall time, its limit is 0.3 s, and timings stopped it for 0.4 s of them
    worker = _SlowImport(ready_at=time.monotonic() + 0.5)
    result = CandidateRun.wait_imported(_waiting_run(worker, 0.3), paused_s=lambda: 0.4)
    assert result is None and len(worker.deadlines) == 1  # 0.3 + 0.4 = 0.7 s allowed: imported in time


def test_a_stop_that_began_after_the_wait_extends_it_again():
    from kevin.sandbox._judge import CandidateRun

    # no pause when the wait starts (deadline 0.3 s); by then a timing has stopped the import for 0.4 s
    worker, paused = _SlowImport(ready_at=time.monotonic() + 0.5), iter([0.0, 0.4, 0.4, 0.4])
    result = CandidateRun.wait_imported(_waiting_run(worker, 0.3), paused_s=lambda: next(paused))
    assert result is None and len(worker.deadlines) == 2
    assert worker.deadlines[1] - worker.deadlines[0] == pytest.approx(0.4)


def test_without_pauses_the_limit_is_the_limit():
    from kevin.sandbox._judge import CandidateRun

    worker = _SlowImport(ready_at=time.monotonic() + 0.5)
    assert CandidateRun.wait_imported(_waiting_run(worker, 0.2), paused_s=lambda: 0.0).status == "timeout"
    assert len(worker.deadlines) == 1


@pytest.mark.parametrize("backend, held", [("cpu", True), ("cuda", False)])
def test_the_built_library_check_holds_the_cpu_like_a_check_run(backend, held):
    # its nm runs on the cores a CPU timing is measured on; on CUDA it is host work beside a GPU timing
    import contextlib
    from types import SimpleNamespace

    from kevin.sandbox._judge import CandidateRun

    inside, seen = [], []

    @contextlib.contextmanager
    def hold():
        inside.append(True)
        yield
        inside.pop()

    run = SimpleNamespace(backend=backend, _check_symbols=lambda: seen.append(bool(inside)))
    assert CandidateRun.check_libraries(run, hold) is None
    assert seen == [held]


# --- the timing's marks: the hold is shared early only on marks in the harness's order (kevin.sandbox._judge)

def _marks(*events_at: tuple[str, float]) -> list[Message]:
    return [Message(t, {"event": event}) for event, t in events_at]


def test_marks_in_the_harnesss_order_after_time_was_sent_share_the_hold():
    from kevin.sandbox._judge import released_in_order

    messages = _marks(("outputs", 1.0), ("timing_begin", 2.1), ("null", 2.2), ("timing_end", 3.0), ("released", 3.1))
    assert released_in_order(messages, since=2.0)


def test_a_released_mark_forged_before_the_timing_began_does_not_share_the_hold():
    # queued after "outputs", read the moment the hold is granted (at 2.0): the timed loop has not even begun
    from kevin.sandbox._judge import released_in_order

    messages = _marks(("timing_begin", 1.5), ("timing_end", 1.5), ("released", 1.5))
    assert not released_in_order(messages, since=2.0)


def test_a_released_mark_forged_before_the_timed_loops_end_does_not_share_the_hold():
    from kevin.sandbox._judge import released_in_order

    assert not released_in_order(_marks(("timing_begin", 2.1), ("released", 2.2)), since=2.0)


def test_a_timing_mark_sent_twice_is_named_as_forged():
    # a forged early mark is followed by the harness's own: two "released"
    from kevin.sandbox._judge import duplicated_marks

    messages = _marks(("timing_begin", 2.1), ("released", 2.2), ("timing_end", 3.0), ("released", 3.1))
    assert duplicated_marks(messages) == "released"


def test_the_harnesss_own_marks_are_not_duplicated():
    from kevin.sandbox._judge import duplicated_marks

    assert duplicated_marks(_marks(("timing_begin", 2.1), ("timing_end", 3.0), ("released", 3.1))) is None


# ---- the job a candidate's worker gets

class _NoWorker:
    """Stands in for `_process.Worker`: keeps the job, starts nothing."""
    jobs: list = []

    def __init__(self, module, job, **kwargs):
        _NoWorker.jobs.append(job)

    def kill(self):
        pass


@pytest.mark.parametrize("backend, worker, compilers", [("cuda", 10, 19), ("cpu", 0, 0)])
def test_a_candidates_compilers_run_at_or_below_its_workers_priority(monkeypatch, tmp_path, backend, worker, compilers):
    # CUDA: workers at nice 10 (beside a decoding policy), their compilers at 19 (beside a timed worker); the CPU
    # backend stops compiles for its timings instead
    from kevin.sandbox import _judge, _process

    monkeypatch.setattr(_process, "Worker", _NoWorker)
    _NoWorker.jobs = []
    run = _judge.CandidateRun("x = 1", backend=backend, config=SandboxConfig(), cache_dir=str(tmp_path),
                              scratch_parent=str(tmp_path), permute=Built("permute.so", "0" * 64))
    run.close()
    assert (_NoWorker.jobs[0]["niceness"], _NoWorker.jobs[0]["compile_niceness"]) == (worker, compilers)


def test_a_cuda_candidate_without_the_sandboxs_permutation_kernel_is_refused_before_it_starts(monkeypatch, tmp_path):
    # its timing could make no fresh inputs: a harness error, not the candidate's runtime error
    from kevin.sandbox import _judge, _process

    monkeypatch.setattr(_process, "Worker", _NoWorker)
    _NoWorker.jobs = []
    with pytest.raises(ValueError, match="permutation kernel"):
        _judge.CandidateRun("x = 1", backend="cuda", config=SandboxConfig(), cache_dir=str(tmp_path),
                            scratch_parent=str(tmp_path))
    assert _NoWorker.jobs == []


def test_a_cuda_candidates_job_names_the_kernel_and_the_hash_it_must_have(monkeypatch, tmp_path):
    from kevin.sandbox import _judge, _process

    monkeypatch.setattr(_process, "Worker", _NoWorker)
    _NoWorker.jobs = []
    _judge.CandidateRun("x = 1", backend="cuda", config=SandboxConfig(), cache_dir=str(tmp_path),
                        scratch_parent=str(tmp_path), permute=Built("/x/permute.so", "ab" * 32)).close()
    assert (_NoWorker.jobs[0]["permute_lib"], _NoWorker.jobs[0]["permute_sha256"]) == ("/x/permute.so", "ab" * 32)


# --- the pinned inputs' budget (kevin.sandbox._judge.pinned_need, kevin.sandbox.sandbox._ByteBudget)

def test_pinned_inputs_are_counted_as_the_pinned_allocator_rounds_them():
    from kevin.sandbox._golden_run import Golden
    from kevin.sandbox._judge import pinned_need

    tensor = lambda n: {"kind": "tensor", "nbytes": n}  # noqa: E731
    meta = {"sets": [{"inputs": [tensor(512 << 20), {"kind": "value", "value": 3}]}],
            "rechecks": [{"inputs": [tensor(3000)]}, {"inputs": [tensor(0)]}]}
    assert pinned_need(Golden("k", meta=meta)) == (512 << 20) + 4096  # 2^29 stays; 3000 -> 4096; 0 -> nothing


def test_golden_data_without_sizes_pins_nothing():
    from kevin.sandbox._golden_run import Golden
    from kevin.sandbox._judge import pinned_need

    assert pinned_need(Golden("k", meta={"sets": [{"inputs": [{"kind": "tensor"}]}]})) is None


def test_the_pinned_budget_hands_out_only_what_is_left_and_takes_it_back():
    from kevin.sandbox.sandbox import _ByteBudget

    budget = _ByteBudget(10)
    assert budget.take(6) and not budget.take(5) and budget.take(4)  # 6 + 4 = 10; 5 more would pass it
    budget.give(6)
    assert budget.take(5) and budget.left == 1


def test_a_negative_pinned_budget_is_refused():
    with pytest.raises(ValueError, match="pinned_host_bytes"):
        SandboxConfig(pinned_host_bytes=-1)
