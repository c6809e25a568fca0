"""`DeviceGate`: correctness runs share a device, a timing (or a golden process) has it alone."""

import contextlib
import threading
import time

import pytest

from kevin.sandbox.sandbox import DeviceGate


def _enter(ctx, log, name, entered, release):
    """A thread body: enter ``ctx``, log it, hold until ``release`` is set, log the exit."""
    with ctx():
        log.append(f"{name} in")
        entered.set()
        release.wait(10)
        log.append(f"{name} out")


def _start(ctx, log, name):
    entered, release = threading.Event(), threading.Event()
    t = threading.Thread(target=_enter, args=(ctx, log, name, entered, release), daemon=True)
    t.start()
    return t, entered, release


def _until(condition, timeout=10.0):
    """Poll until ``condition()`` is true (threads start late on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_two_correctness_runs_hold_the_device_at_the_same_time():
    gate, log = DeviceGate(), []
    a, a_in, a_go = _start(gate.shared, log, "a")
    b, b_in, b_go = _start(gate.shared, log, "b")
    assert a_in.wait(5) and b_in.wait(5)  # both inside before either leaves
    a_go.set(), b_go.set()
    a.join(5), b.join(5)
    assert sorted(log[:2]) == ["a in", "b in"]


def test_a_timing_waits_until_every_correctness_run_has_left():
    gate, log = DeviceGate(), []
    a, a_in, a_go = _start(gate.shared, log, "check")
    assert a_in.wait(5)
    t, t_in, t_go = _start(gate.exclusive, log, "timing")
    assert not t_in.wait(0.3)  # blocked while the check holds the device
    a_go.set()
    assert t_in.wait(5)
    t_go.set()
    a.join(5), t.join(5)
    assert log == ["check in", "check out", "timing in", "timing out"]


def test_waiting_timings_are_admitted_in_the_order_of_their_priority_not_of_their_wakeup():
    # three timings queue behind a correctness run, the last-arrived candidate (priority 3.0) asking first; once the
    # run leaves they hold the device one at a time, in priority order 1.0, 2.0, 3.0
    gate, log = DeviceGate(), []
    check, check_in, check_go = _start(gate.shared, log, "check")
    assert check_in.wait(5)
    timings = {}
    for name, priority in (("third", 3.0), ("first", 1.0), ("second", 2.0)):
        timings[name] = _start(lambda p=priority: gate.exclusive(timeout=10, priority=p), log, name)
        _until(lambda n=len(timings): len(gate._queue) == n)  # this one waits before the next asks
    check_go.set()
    for _ in range(3):
        _until(lambda: sum(entered.is_set() and not release.is_set() for _, entered, release in timings.values()))
        inside = [name for name, (_, entered, release) in timings.items() if entered.is_set() and not release.is_set()]
        timings[inside[0]][2].set()  # it leaves; the next in order may enter
        timings[inside[0]][0].join(5)
    check.join(5)
    assert [line for line in log if line.endswith(" in")] == ["check in", "first in", "second in", "third in"]


def test_a_correctness_run_arriving_soon_after_a_timing_began_to_wait_goes_first():
    # within the patience, b joins a's correctness runs ahead of the waiting timing; the timing then has the
    # device alone, after both have left
    gate, log = DeviceGate(patience_s=30.0), []
    a, a_in, a_go = _start(gate.shared, log, "a")
    assert a_in.wait(5)
    t, t_in, t_go = _start(gate.exclusive, log, "timing")
    _until(lambda: gate._waiting)  # the timing is now waiting for a
    b, b_in, b_go = _start(gate.shared, log, "b")
    assert b_in.wait(5) and not t_in.is_set()
    a_go.set()
    a.join(5)
    assert not t_in.wait(0.3)  # b still holds the device
    b_go.set()
    assert t_in.wait(5)
    t_go.set()
    for th in (a, t, b):
        th.join(5)
    assert log == ["a in", "b in", "a out", "b out", "timing in", "timing out"]


def _timing_past_its_patience(gate, log, hold, name):
    """``hold`` (a gate method) entered as ``name``, then a timing waiting behind it for longer than the gate's 0.3 s
    patience: the holder's and the timing's (thread, entered, release)."""
    held = _start(hold, log, name)
    assert held[1].wait(5)
    timing = _start(gate.exclusive, log, "timing")
    _until(lambda: gate._waiting)
    time.sleep(0.5)  # past the patience
    return held, timing


def _release_in_turn(*threads):
    """Let each (thread, entered, release) go in the order given, each once it is in; then join them."""
    for th, entered, release in threads:
        assert entered.wait(5)
        release.set()
    for th, _, _ in threads:
        th.join(5)


def test_a_timing_waiting_longer_than_the_patience_keeps_new_correctness_runs_out():
    # patience 0.3 s: b arrives 0.5 s into the timing's wait, so it waits for the timing
    gate, log = DeviceGate(patience_s=0.3), []
    a, timing = _timing_past_its_patience(gate, log, gate.shared, "a")
    b = _start(gate.shared, log, "b")
    assert not b[1].wait(0.3)
    _release_in_turn(a, timing, b)
    assert log == ["a in", "a out", "timing in", "timing out", "b in", "b out"]


def test_while_the_device_is_in_use_a_timing_waiting_past_the_patience_keeps_no_correctness_run_out():
    # a policy decodes (in_use) and a timing waits for it past the patience; b goes in beside the decoding, since the
    # timing could not start before the decoding ends anyway
    gate, log = DeviceGate(patience_s=0.3), []
    policy, timing = _timing_past_its_patience(gate, log, gate.in_use, "policy")
    b = _start(gate.shared, log, "b")
    assert b[1].wait(5) and not timing[1].is_set()
    _release_in_turn(b)
    assert not timing[1].wait(0.3)  # the decoding still holds the device
    _release_in_turn(policy, timing)
    assert log == ["policy in", "b in", "b out", "policy out", "timing in", "timing out"]


def test_once_the_device_is_no_longer_in_use_a_timing_past_the_patience_goes_before_new_correctness_runs():
    gate, log = DeviceGate(patience_s=0.3), []
    policy, timing = _timing_past_its_patience(gate, log, gate.in_use, "policy")
    _release_in_turn(policy)
    assert timing[1].wait(5)
    b = _start(gate.shared, log, "b")
    assert not b[1].wait(0.3)  # the timing holds the device alone
    _release_in_turn(timing, b)
    assert log == ["policy in", "policy out", "timing in", "timing out", "b in", "b out"]


def test_a_second_policy_hold_waits_for_a_timing_past_the_patience_so_overlapping_holds_cannot_starve_it():
    gate, log = DeviceGate(patience_s=0.3), []
    first, timing = _timing_past_its_patience(gate, log, gate.in_use, "policy 1")
    second = _start(gate.in_use, log, "policy 2")
    assert not second[1].wait(0.3)  # not admitted beside policy 1: the timing goes once policy 1 lets go
    _release_in_turn(first)
    assert timing[1].wait(5) and not second[1].is_set()
    _release_in_turn(timing, second)
    assert log == ["policy 1 in", "policy 1 out", "timing in", "timing out", "policy 2 in", "policy 2 out"]


def test_a_policy_goes_before_a_timing_that_has_waited_less_than_the_policys_patience():
    # the timing has waited 0.5 s: past the 0.3 s of correctness runs, within the policy's 30 s, so the decoding
    # goes in beside a's correctness run and the timing waits for both
    gate, log = DeviceGate(patience_s=0.3, policy_patience_s=30.0), []
    a, timing = _timing_past_its_patience(gate, log, gate.shared, "a")
    policy = _start(gate.in_use, log, "policy")
    assert policy[1].wait(5)
    _release_in_turn(a)
    assert not timing[1].wait(0.3)  # the decoding still holds the device
    _release_in_turn(policy, timing)
    assert log == ["a in", "policy in", "a out", "policy out", "timing in", "timing out"]


def test_a_policy_waits_for_a_timing_past_the_policys_own_patience_while_correctness_runs_still_go_first():
    # the reverse setting: correctness runs may pass a timing for 30 s, the policy for 0.3 s; 0.5 s into the
    # timing's wait, b joins a while the policy waits for the timing
    gate, log = DeviceGate(patience_s=30.0, policy_patience_s=0.3), []
    a, timing = _timing_past_its_patience(gate, log, gate.shared, "a")
    policy = _start(gate.in_use, log, "policy")
    b = _start(gate.shared, log, "b")
    assert b[1].wait(5) and not policy[1].wait(0.3)
    _release_in_turn(a)
    _release_in_turn(b, timing, policy)
    assert log == ["a in", "b in", "a out", "b out", "timing in", "timing out", "policy in", "policy out"]


def test_a_decoding_steps_aside_for_a_timing_that_waited_long_and_comes_back_once_it_is_done():
    # the policy holds the device (in_use) and a timing waits 0.5 s, past the gate's 0.2 s: at its next step the
    # policy finishes its own device work (before), leaves, the timing runs, and the policy is back in use after it
    gate, log, synced = DeviceGate(patience_s=0.3, policy_patience_s=30.0, step_aside_after_s=0.2), [], []
    with gate.in_use():
        log.append("policy in")
        timing = _start(gate.exclusive, log, "timing")
        _until(lambda: gate._waiting)
        time.sleep(0.5)
        threading.Thread(target=lambda: (timing[1].wait(5), time.sleep(0.1), timing[2].set()), daemon=True).start()
        away = gate.step_aside(before=lambda: synced.append(len(log)))
        log.append("policy back")
        assert gate._in_use == 1 and away >= 0.1
    timing[0].join(5)
    assert log == ["policy in", "timing in", "timing out", "policy back"] and synced == [1]


def test_a_decoding_keeps_the_device_while_the_waiting_timing_is_younger_than_the_gates_time():
    gate, log = DeviceGate(patience_s=0.3, policy_patience_s=30.0, step_aside_after_s=5.0), []
    with gate.in_use():
        timing = _start(gate.exclusive, log, "timing")
        _until(lambda: gate._waiting)
        threading.Timer(2.0, timing[2].set).start()  # (were the policy to step aside, the timing ends after 2 s)
        assert gate.step_aside(before=lambda: log.append("synced")) == 0.0
        assert not timing[1].wait(0.3) and gate._in_use == 1
    _release_in_turn(timing)
    assert log == ["timing in", "timing out"]


def test_a_decoding_that_stepped_aside_comes_back_when_the_timing_gives_up():
    # a compile that has not named its process yet keeps the timing out (it cannot be stopped) until the timing's
    # 0.5 s timeout: the policy, away for it, comes back then
    gate, log = DeviceGate(patience_s=30.0, policy_patience_s=30.0, step_aside_after_s=0.0), []
    with gate.pausable(), gate.in_use():
        gave_up = []

        def timing():
            try:
                with gate.exclusive(timeout=0.5):
                    log.append("timing in")
            except Exception as exc:
                gave_up.append(type(exc).__name__)

        threading.Thread(target=timing, daemon=True).start()
        _until(lambda: gate._waiting)
        away = gate.step_aside()
        assert gate._in_use == 1 and gave_up == ["_Cancelled"] and 0.3 < away < 5.0
    assert "timing in" not in log


def _due_timing(gate, log):
    """A timing that has waited 0.5 s for ``gate`` (past the 0.2-0.3 s the tests below give the gate): its (thread,
    entered, release)."""
    timing = _start(gate.exclusive, log, "timing")
    _until(lambda: gate._waiting)
    time.sleep(0.5)
    return timing


def _end_once_in(held):
    """Let ``held`` (thread, entered, release) go as soon as it is in, from another thread."""
    threading.Thread(target=lambda: (held[1].wait(5), held[2].set()), daemon=True).start()


def test_a_decoding_keeps_the_device_while_a_correctness_run_keeps_the_timing_out_then_steps_aside():
    # a's correctness run holds the device when the timing is due (waited 0.5 s, past the gate's 0.2 s): the timing
    # could not start, so the policy decodes on (0.0 away); once a has left, its next check steps aside
    gate, log = DeviceGate(patience_s=0.3, policy_patience_s=30.0, step_aside_after_s=0.2), []
    a = _start(gate.shared, log, "a")
    assert a[1].wait(5)
    with gate.in_use():
        timing = _due_timing(gate, log)
        assert gate.step_aside(before=lambda: log.append("synced")) == 0.0
        _release_in_turn(a)
        _end_once_in(timing)
        assert gate.step_aside(before=lambda: log.append("synced")) > 0.0
    timing[0].join(5)
    assert log == ["a in", "a out", "synced", "timing in", "timing out"]


def test_a_decoding_keeps_the_device_while_a_timings_shared_tail_keeps_the_next_timing_out():
    # the first timing's hold is shared after its timed loop (its rechecks compared): the next timing waits for that
    # tail as for a correctness run, so the policy decodes on until the tail has ended
    gate, log = DeviceGate(patience_s=0.3, policy_patience_s=30.0, step_aside_after_s=0.2), []
    tail_in, tail_out = threading.Event(), threading.Event()

    def first():
        with gate.exclusive() as hold:
            hold.share()
            log.append("tail in")
            tail_in.set()
            tail_out.wait(10)
            log.append("tail out")

    threading.Thread(target=first, daemon=True).start()
    assert tail_in.wait(5)
    with gate.in_use():
        timing = _due_timing(gate, log)
        assert gate.step_aside() == 0.0
        tail_out.set()
        _until(lambda: gate._shared == 1)  # the policy's own hold alone
        _end_once_in(timing)
        assert gate.step_aside() > 0.0
    timing[0].join(5)
    assert log == ["tail in", "tail out", "timing in", "timing out"]


def test_a_correctness_run_arriving_while_a_decoding_waits_to_step_aside_goes_after_the_timing():
    # past the timing's patience, a correctness run is let in beside a decoding only while the decoding would not
    # step aside: once it waits to, b would keep the device from the timing longer, so b waits for the timing, also
    # while the decoding finishes its own work before leaving (before, 0.2 s)
    gate, log = DeviceGate(patience_s=0.3, policy_patience_s=30.0, step_aside_after_s=0.2), []
    a = _start(gate.shared, log, "a")
    assert a[1].wait(5)
    with gate.in_use():
        timing = _due_timing(gate, log)
        assert gate.step_aside() == 0.0
        b = _start(gate.shared, log, "b")
        assert not b[1].wait(0.3)
        _release_in_turn(a)
        _end_once_in(timing)
        gate.step_aside(before=lambda: time.sleep(0.2))
    _release_in_turn(b)
    timing[0].join(5)
    assert log == ["a in", "a out", "timing in", "timing out", "b in", "b out"]


def test_a_correctness_run_held_back_for_a_timing_that_gave_up_goes_in_at_the_decodings_next_check():
    # a holds the device; the decoding waits to step aside for a first timing (due after 1 s), which gives up at
    # 1.6 s. A second timing then waits 0.5 s: past the 0.3 s patience, not yet due. b, arriving then, is held back
    # while the decoding still waits to step aside, and goes in beside it at its next check, which finds no timing due
    gate, log = DeviceGate(patience_s=0.3, policy_patience_s=30.0, step_aside_after_s=1.0), []
    a = _start(gate.shared, log, "a")
    assert a[1].wait(5)
    with gate.in_use():
        first = threading.Thread(target=lambda: _cancelled(gate.exclusive, 1.6), daemon=True)
        first.start()
        _until(lambda: gate._waiting)
        time.sleep(1.1)
        assert gate.step_aside() == 0.0
        first.join(5)
        second = _start(gate.exclusive, log, "timing")
        _until(lambda: gate._waiting)
        time.sleep(0.5)
        b = _start(gate.shared, log, "b")
        assert not b[1].wait(0.3)
        assert gate.step_aside() == 0.0
        assert b[1].wait(5)
        _release_in_turn(a)
        _release_in_turn(b)
    _release_in_turn(second)
    assert log == ["a in", "b in", "a out", "b out", "timing in", "timing out"]


def test_a_decoding_that_waited_to_step_aside_and_left_holds_back_no_run_beside_the_next_decoding():
    # policy 1 waits to step aside (a holds the device, the timing is due) and ends its call; policy 2, let in
    # beside it, never steps aside, so the timing cannot start before it ends: c goes in beside policy 2 at once
    gate, log = DeviceGate(patience_s=0.3, policy_patience_s=30.0, step_aside_after_s=0.2), []
    a = _start(gate.shared, log, "a")
    assert a[1].wait(5)
    timing = _start(gate.exclusive, log, "timing")
    _until(lambda: gate._waiting)
    time.sleep(0.5)
    with gate.in_use():
        assert gate.step_aside() == 0.0
        second = _start(gate.in_use, log, "policy 2")
        assert second[1].wait(5)
    c = _start(gate.shared, log, "c")
    assert c[1].wait(5)
    for held in (a, c, second, timing):  # one at a time: each logs its exit before the next is let go
        _release_in_turn(held)
    assert log == ["a in", "policy 2 in", "c in", "a out", "c out", "policy 2 out", "timing in", "timing out"]


def _cancelled(ctx, timeout):
    """Enter ``ctx(timeout=...)``, expecting it to give up (`_Cancelled`)."""
    with contextlib.suppress(Exception), ctx(timeout=timeout):
        raise AssertionError("admitted")


def test_a_hold_of_several_devices_does_not_step_aside():
    from kevin.sandbox.sandbox import DevicesInUse

    gates, synced = [DeviceGate(step_aside_after_s=0.0) for _ in range(2)], []
    with gates[0].in_use(), gates[1].in_use():
        timing = _start(gates[0].exclusive, [], "timing")
        _until(lambda: gates[0]._waiting)
        threading.Timer(2.0, timing[2].set).start()  # (were the policy to step aside, the timing ends after 2 s)
        assert DevicesInUse(gates).step_aside(before=lambda: synced.append(1)) == 0.0
        assert not timing[1].is_set() and synced == []
    _release_in_turn(timing)


def test_a_sandboxs_devices_in_use_count_the_seconds_stepped_aside():
    from kevin.sandbox.sandbox import DevicesInUse

    gate, log = DeviceGate(patience_s=0.3, policy_patience_s=30.0, step_aside_after_s=0.0), []
    held = DevicesInUse([gate])
    with gate.in_use():
        timing = _start(gate.exclusive, log, "timing")
        _until(lambda: gate._waiting)
        threading.Thread(target=lambda: (timing[1].wait(5), time.sleep(0.2), timing[2].set()), daemon=True).start()
        away = held.step_aside()
    timing[0].join(5)
    assert held.aside_s == away >= 0.2


def test_on_cuda_a_policy_may_pass_a_waiting_timing_longer_than_a_correctness_run_may():
    from kevin.sandbox.sandbox import POLICY_PATIENCE_S, device_gate

    cuda, cpu = device_gate("cuda", "test-gate-device"), device_gate("cpu", "cpu")
    assert (cuda.patience_s, cuda.policy_patience_s) == (1.0, POLICY_PATIENCE_S) and POLICY_PATIENCE_S > 1.0
    assert (cpu.patience_s, cpu.policy_patience_s) == (0.0, 0.0)  # on the CPU a timing waits for no decoding


def test_on_cuda_a_decoding_steps_aside_for_timings_and_on_the_cpu_it_never_does():
    from kevin.sandbox.sandbox import STEP_ASIDE_AFTER_S, device_gate

    cuda, cpu = device_gate("cuda", "test-gate-device"), device_gate("cpu", "cpu")
    assert cuda.step_aside_after_s == STEP_ASIDE_AFTER_S < cuda.policy_patience_s
    assert cpu.step_aside_after_s is None


def test_a_sandboxs_device_in_use_is_the_gates_policy_hold(tmp_path):
    from kevin.sandbox import Sandbox, SandboxConfig
    from kevin.sandbox.sandbox import device_gate

    sandbox = Sandbox("cpu", SandboxConfig(workers=1, cache_dir=str(tmp_path)))  # (starts no process)
    gate = device_gate("cpu", "cpu")
    with sandbox.device_in_use() as held:
        assert gate._in_use == 1  # correctness runs go on beside it past a waiting timing's patience
        assert held.gates == [gate]
    assert gate._in_use == 0


def test_two_sandboxes_on_the_cpu_share_one_gate(tmp_path):
    from kevin.sandbox import Sandbox, SandboxConfig

    a = Sandbox("cpu", SandboxConfig(cache_dir=str(tmp_path / "a")))
    b = Sandbox("cpu", SandboxConfig(cache_dir=str(tmp_path / "b"), parallel_checks=False))
    assert a._devices.gates["cpu"] is b._devices.gates["cpu"]  # one timing at a time on these cores


def test_a_hung_correctness_run_is_killed_before_the_device_is_handed_on(tmp_path):
    from types import SimpleNamespace

    from kevin.sandbox import _judge
    from kevin.sandbox.config import SandboxConfig

    gate, kills = DeviceGate(), []

    class HungWorker:  # a candidate whose correctness run never answers
        messages: list = []

        def send(self, command):
            pass

        def wait_for(self, events, deadline):
            time.sleep(max(0.0, deadline - time.monotonic()))
            return None

        def timed_out(self, deadline):
            return True

        def kill(self):
            kills.append(gate._shared)  # how many hold the device at the kill

    run = object.__new__(_judge.CandidateRun)
    run.config, run.details, run.worker, run.scratch = SandboxConfig(run_timeout_s=0.2), {}, HungWorker(), str(tmp_path)
    run.backend = "cpu"
    run.deadline = float("inf")
    inputs = tmp_path / "golden.safetensors"
    inputs.write_bytes(b"")
    golden = SimpleNamespace(inputs_path=str(inputs), outputs={},
                             meta={"sets": [], "rechecks": [], "init_inputs": [], "init_seed": 0})
    result = run.judge(golden, baseline_ms=None, checks=gate.shared, timing=gate.exclusive)
    assert result.status == "timeout"
    assert kills == [1]  # killed while it still held the device, so no timing could start beside it


def test_on_the_cpu_backend_a_waiting_timing_admits_no_new_check():
    # there a timing waits only for correctness runs and comparisons (compiles are paused): no patience
    from kevin.sandbox.sandbox import device_gate

    assert device_gate("cpu", "cpu").patience_s == 0.0
    assert device_gate("cuda", "7").patience_s > 0.0


def test_a_third_correctness_run_waits_when_two_may_share_the_gpu():
    # max_shared = 2: a and b are in, c waits until one of them leaves
    gate, log = DeviceGate(max_shared=2), []
    a, a_in, a_go = _start(gate.shared, log, "a")
    b, b_in, b_go = _start(gate.shared, log, "b")
    assert a_in.wait(5) and b_in.wait(5)
    c, c_in, c_go = _start(gate.shared, log, "c")
    assert not c_in.wait(0.3)
    a_go.set()
    assert c_in.wait(5)
    b_go.set(), c_go.set()
    a.join(5), b.join(5), c.join(5)
    assert log.index("a out") < log.index("c in")


# ------------------------------------------------------------------ pausable holders (CPU compiles)
def _busy_group():
    """A process busy on a core in a process group of its own, as a candidate's compile is."""
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)


def _cpu_seconds(pid):
    """User + system CPU seconds of ``pid`` (/proc/<pid>/stat, clock ticks)."""
    import os

    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_timing_does_not_wait_for_a_compile_but_stops_it_until_it_is_done():
    gate = DeviceGate()
    proc = _busy_group()
    try:
        with gate.pausable(timeout=5) as hold:
            hold.register(proc.pid)  # as the sandbox does once the candidate's process exists
            with gate.exclusive(timeout=5):  # admitted while the compile is still in
                time.sleep(0.2)  # SIGSTOP has taken effect
                before = _cpu_seconds(proc.pid)
                time.sleep(0.5)
                during = _cpu_seconds(proc.pid) - before
            time.sleep(0.5)
            after = _cpu_seconds(proc.pid) - before
    finally:
        proc.kill()
        proc.wait(5)
        paused = hold.paused_s()
    assert during < 0.05  # stopped: no CPU time while the device is held alone
    assert after > 0.2  # continued once the timing left
    assert 0.7 <= paused < 2.0  # the 0.2 + 0.5 s under exclusive(), which the compile's time limit leaves out


def _shared_timing(gate, log, shared, release):
    """A thread body: a timing that holds the device alone, logs, shares its hold once ``shared`` is set (as the judge
    does on the worker's "released"), logs again and holds until ``release`` is set."""
    with gate.exclusive(timeout=10) as hold:
        log.append("timing in")
        shared.wait(10)
        log.append("timing shared")  # before share(): a thread it wakes may log at once
        hold.share()
        release.wait(10)
        log.append("timing out")


def test_a_timing_hold_shared_after_its_loop_admits_a_correctness_run():
    gate, log = DeviceGate(), []
    shared, release = threading.Event(), threading.Event()
    t = threading.Thread(target=_shared_timing, args=(gate, log, shared, release), daemon=True)
    t.start()
    _until(lambda: log == ["timing in"])
    check, check_in, check_go = _start(gate.shared, log, "check")
    assert not check_in.wait(0.3)  # kept out while the timed loop runs
    shared.set()
    assert check_in.wait(5)  # let in beside the rechecks' comparison
    check_go.set(), release.set()
    t.join(5), check.join(5)
    assert log.index("check in") > log.index("timing shared")


def test_a_timing_hold_shared_after_its_loop_still_keeps_the_next_timing_out():
    gate, log = DeviceGate(), []
    shared, release = threading.Event(), threading.Event()
    t = threading.Thread(target=_shared_timing, args=(gate, log, shared, release), daemon=True)
    t.start()
    _until(lambda: log == ["timing in"])
    shared.set()
    _until(lambda: "timing shared" in log)
    nxt, nxt_in, nxt_go = _start(lambda: gate.exclusive(timeout=10), log, "next timing")
    assert not nxt_in.wait(0.3)  # the shared rest of the first hold still has the device
    release.set()
    assert nxt_in.wait(5)
    nxt_go.set()
    t.join(5), nxt.join(5)
    assert log == ["timing in", "timing shared", "timing out", "next timing in", "next timing out"]


def test_sharing_a_timing_hold_twice_counts_it_once():
    gate = DeviceGate()
    with gate.exclusive(timeout=5) as hold:
        hold.share()
        hold.share()
        assert (gate._exclusive, gate._shared) == (False, 1)
    assert (gate._exclusive, gate._shared) == (False, 0)


def test_a_timing_hold_shared_after_it_ended_leaves_the_next_timings_hold_alone():
    gate = DeviceGate()
    with gate.exclusive(timeout=5) as first:
        pass
    with gate.exclusive(timeout=5):
        first.share()  # a stale hold: the device is the second timing's
        assert (gate._exclusive, gate._shared) == (True, 0)


def test_a_shared_timing_hold_left_by_an_error_gives_back_only_its_share():
    gate = DeviceGate()
    with pytest.raises(RuntimeError):
        with gate.exclusive(timeout=5) as hold:
            hold.share()
            raise RuntimeError("the judge failed while comparing the rechecks")
    assert (gate._exclusive, gate._shared) == (False, 0)
    with gate.exclusive(timeout=1):  # the next timing is not kept out
        pass


def test_sharing_a_timing_hold_continues_the_compiles_it_stopped():
    gate = DeviceGate()
    proc = _busy_group()
    try:
        with gate.pausable(timeout=5) as compile_hold:
            compile_hold.register(proc.pid)
            with gate.exclusive(timeout=5) as hold:
                time.sleep(0.2)  # SIGSTOP has taken effect
                hold.share()
                before = _cpu_seconds(proc.pid)
                time.sleep(0.5)
                during_shared = _cpu_seconds(proc.pid) - before
    finally:
        proc.kill()
        proc.wait(5)
    assert during_shared > 0.2  # running again while the hold is only shared
    assert gate._shared == 0 and not gate._exclusive  # the shared rest of the hold was given back on leaving


@contextlib.contextmanager
def _ninja_compile(tmp_path):
    """A compile's worker as the sandbox starts one (its own session) running ninja, whose one build command, a busy
    "compiler", ninja starts in a process group of its own (so that a Ctrl-C misses it). Yields (worker pid, the
    compiler's pid); kills both after."""
    import os
    import shutil
    import subprocess
    import sys

    (tmp_path / "build.ninja").write_text(f"rule busy\n  command = {sys.executable} -c 'while True: pass'\n"
                                          "build a: busy\n")
    ninja = shutil.which("ninja", path=os.path.dirname(sys.executable)) or shutil.which("ninja")
    worker = subprocess.Popen([ninja, "-C", str(tmp_path)], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    below = []
    try:
        _until(lambda: any(_cpu_seconds(pid) > 0.3 for pid in _descendants(worker.pid)))  # (its start is done)
        below = _descendants(worker.pid)
        yield worker.pid, next(pid for pid in below if _cpu_seconds(pid) > 0.3)  # the busy one, not sh
    finally:
        for pid in below:
            if _state(pid) not in ("Z", None):
                os.kill(pid, 9)
        worker.kill()
        worker.wait(5)


def test_a_timing_stops_the_compilers_that_ninja_runs_in_process_groups_of_their_own(tmp_path):
    # a SIGSTOP to the worker's group alone left the compilers running through every timing
    import os

    gate = DeviceGate()
    with _ninja_compile(tmp_path) as (worker, compiler):
        assert os.getpgid(compiler) != worker  # its own group, out of reach of a signal to the worker's
        with gate.pausable(timeout=5) as hold:
            hold.register(worker)
            with gate.exclusive(timeout=5):
                _until(lambda: _state(compiler) == "T")
                before = _cpu_seconds(compiler)
                time.sleep(0.5)
                during = _cpu_seconds(compiler) - before
            _until(lambda: _cpu_seconds(compiler) > before + 0.1)  # continued after
    assert during < 0.05  # the compiler had no CPU while the device was held alone


def test_a_killed_compile_takes_the_compilers_ninja_started_with_it(tmp_path):
    # `Worker.kill` (a compile's timeout or a batch's deadline) ends the worker's group and every group below it: a
    # kill of the worker's group alone left ninja's compilers running on as orphans
    from kevin.sandbox._process import kill_tree

    with _ninja_compile(tmp_path) as (worker, compiler):
        kill_tree(worker)
        _until(lambda: _state(compiler) in ("Z", None))  # killed (a zombie until ninja's sh reaps it)


def _descendants(pid):
    """The pids of ``pid``'s children and their children (/proc)."""
    import os

    parent = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent[int(entry)] = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            pass
    out, todo = [], [pid]
    while todo:
        here = todo.pop()
        kids = [p for p, pp in parent.items() if pp == here]
        out += kids
        todo += kids
    return out


def test_a_timing_waits_for_a_compile_that_has_not_registered_its_process_yet():
    # between admission and the worker's spawn there is nothing to stop: the timing must not start then
    gate, log = DeviceGate(), []
    with gate.pausable(timeout=5) as hold:
        t, t_in, t_go = _start(gate.exclusive, log, "timing")
        assert not t_in.wait(0.3)
        proc = _busy_group()
        try:
            hold.register(proc.pid)
            assert t_in.wait(5)  # registered: the timing stops it and goes ahead
            t_go.set()
            t.join(5)
        finally:
            proc.kill()
            proc.wait(5)


def test_an_earlier_caller_waiting_for_compiles_to_leave_does_not_hold_back_a_timing_that_stops_them():
    # "alone" (priority 1) waits until the registered compile leaves; the timing (priority 2) may stop the compile,
    # so it goes first, and "alone" follows once the compile has left
    gate, log = DeviceGate(), []
    with gate.pausable(timeout=5) as hold:
        proc = _busy_group()
        try:
            hold.register(proc.pid)
            a, a_in, a_go = _start(lambda: gate.alone(timeout=10, priority=1.0), log, "alone")
            _until(lambda: len(gate._queue) == 1)
            t, t_in, t_go = _start(lambda: gate.exclusive(timeout=10, priority=2.0), log, "timing")
            assert t_in.wait(5) and not a_in.is_set()
            t_go.set()
            t.join(5)
            assert not a_in.wait(0.3)  # the compile still holds its admission
        finally:
            proc.kill()
            proc.wait(5)
    assert a_in.wait(5)
    a_go.set()
    a.join(5)
    assert log == ["timing in", "timing out", "alone in", "alone out"]


def test_a_new_compile_waits_while_a_timing_holds_the_device():
    gate, log = DeviceGate(), []
    t, t_in, t_go = _start(gate.exclusive, log, "timing")
    assert t_in.wait(5)
    c, c_in, c_go = _start(gate.pausable, log, "compile")
    assert not c_in.wait(0.3)
    t_go.set()
    assert c_in.wait(5)
    c_go.set()
    t.join(5), c.join(5)
    assert log == ["timing in", "timing out", "compile in", "compile out"]


def test_a_correctness_run_held_alone_waits_for_compiles_instead_of_stopping_them():
    # its ModelNew.__init__ may build an extension and wait on a lock that a stopped compile would hold forever
    gate, log = DeviceGate(), []
    c, c_in, c_go = _start(gate.pausable, log, "compile")
    assert c_in.wait(5)
    a, a_in, a_go = _start(gate.alone, log, "alone")
    assert not a_in.wait(0.3)
    c_go.set()
    assert a_in.wait(5)
    a_go.set()
    c.join(5), a.join(5)
    assert log == ["compile in", "compile out", "alone in", "alone out"]


def test_a_forked_worker_is_signalled_only_once_it_leads_its_own_group():
    # a process whose pid is known before it leads its group (here it calls setsid late): a signal to the group
    # would miss it until then
    import os
    import subprocess
    import sys

    from kevin.sandbox.sandbox import wait_for_group

    proc = subprocess.Popen([sys.executable, "-c", "import os, time; time.sleep(0.3); os.setsid(); time.sleep(30)"])
    try:
        assert os.getpgid(proc.pid) != proc.pid
        wait_for_group(proc.pid)
        assert os.getpgid(proc.pid) == proc.pid
    finally:
        proc.kill()
        proc.wait(5)


def test_a_new_compile_waits_behind_a_correctness_run_waiting_alone():
    # otherwise a stream of compiles could keep a run held alone (parallel checks off, an out-of-memory re-judge) out
    gate, log = DeviceGate(), []
    c, c_in, c_go = _start(gate.pausable, log, "compile 1")
    assert c_in.wait(5)
    a, a_in, a_go = _start(gate.alone, log, "alone")
    _until(lambda: gate._unpaused_waiting == 1)
    d, d_in, d_go = _start(gate.pausable, log, "compile 2")
    assert not d_in.wait(0.3)
    c_go.set()
    assert a_in.wait(5) and not d_in.is_set()
    a_go.set()
    assert d_in.wait(5)
    d_go.set()
    for t in (c, a, d):
        t.join(5)
    assert log == ["compile 1 in", "compile 1 out", "alone in", "alone out", "compile 2 in", "compile 2 out"]


_HOLDER = """
import subprocess, sys, time
from kevin.sandbox.sandbox import DeviceGate
gate = DeviceGate(patience_s=0.0)
with gate.pausable() as hold:
    compile_ = subprocess.Popen(["sleep", "600"], start_new_session=True)
    hold.register(compile_.pid)
    with gate.exclusive():
        from kevin.sandbox import _stop_guard
        print(compile_.pid, _stop_guard._proc.pid, flush=True)
        if sys.argv[1] == "stay":
            time.sleep(600)
    print("continued", flush=True)
    time.sleep(600)
"""


def _state(pid):
    """The process's state letter ("T" stopped, "S" sleeping, "Z" zombie), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return None


def _kill_holder_with(mode):
    """Run a gate in a child process that stops a `sleep` 'compile' (and continues it unless ``mode`` is "stay"),
    SIGKILL that process, wait for its guard to end, and return the compile's pid."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, mode], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": root})
    pid, guard = map(int, holder.stdout.readline().split())
    if mode == "stay":
        _until(lambda: _state(pid) == "T")
    else:
        assert holder.stdout.readline().strip() == "continued"
    holder.send_signal(signal.SIGKILL)
    holder.wait(10)
    _until(lambda: _state(guard) in ("Z", None))  # the guard saw the pipe close and did its work
    return pid


def test_a_compile_left_stopped_by_a_killed_sandbox_process_is_killed():
    import os
    import signal

    pid = _kill_holder_with("stay")
    try:
        _until(lambda: _state(pid) in ("Z", None))  # without the guard it would stay "T" for good
    finally:
        if _state(pid) not in ("Z", None):
            os.kill(pid, signal.SIGKILL)


def test_a_compile_continued_before_the_sandbox_process_died_is_left_running():
    import os
    import signal

    pid = _kill_holder_with("continue")
    try:
        assert _state(pid) == "S"
    finally:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(120)  # a blocking write would hang here
def test_a_guard_that_stops_reading_is_replaced_without_blocking_the_gate():
    # a candidate of the same user could SIGSTOP the guard: its pipe fills, and a blocking write would hold the
    # device gate's lock for good. The write fails at once instead, and a new guard gets the stopped set.
    import os
    import signal

    from kevin.sandbox import _stop_guard

    _stop_guard.stopping(999_999_999)  # no such group: the guard only records it
    first = _stop_guard._proc
    try:
        os.kill(first.pid, signal.SIGSTOP)
        started = time.monotonic()
        for _ in range(20_000):  # 20,000 lines of about 16 bytes: past a 64 KiB pipe
            _stop_guard.stopping(999_999_998)
            _stop_guard.continued(999_999_998)
        assert time.monotonic() - started < 30
        assert _stop_guard._proc is not first and _stop_guard._proc.poll() is None
    finally:
        _stop_guard.continued(999_999_999)
        if first.poll() is None:
            first.kill()
