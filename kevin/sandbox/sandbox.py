"""`Sandbox` and `evaluate`: the pipeline static check -> compile -> golden -> candidate run -> verdict.

Standard library only at module level (torch is imported lazily, to ask for CUDA devices).

Throughput: `Sandbox.evaluate_many` gives every job a thread. Each candidate gets its own process (a
fork of a torch-loaded zygote, or a new interpreter with ``prefork=False``), bound to one device at start; the
compile stage is that process importing the candidate module, whose ``load_inline`` builds land in a
content-addressed cache (an extension is built once, whatever Python surrounds it). At most
``config.workers`` processes are in the compile stage at once; then each waits for its device's
`DeviceGate`: candidates may run their correctness sets on a device together, but a golden process or a
candidate's timed loop has the device alone, so a timing never overlaps other work on its device (on the CPU
backend, where the device is the cores, compiles and the parent's comparisons count as such work); after the loop,
until its report, the candidate's hold keeps other timings out but lets untimed work back in. Golden data
is computed once per task and kept in memory. The baseline (the reference's runtime) is timed by the golden
process and kept in memory for the Sandbox's lifetime per (task source, device name, timing settings, torch
version); on the CPU backend it is timed once more when a correct kernel first beats it, and the faster timing
stands (`SandboxConfig.recheck_baseline_speedup`). A copy is written to ``<cache>/baselines/`` as a record, and
never read back: candidates run as the same user and can rewrite any file there, and a baseline read from disk
let one candidate set the speedup of every later one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import logging
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
import traceback
import weakref
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Callable, Iterator, Sequence

from . import _golden_run, _judge, _process, _resolve, _scratch, _stop_guard, feedback
from kevin.sandbox.build import harness as _harness, pch as _pch
from .config import SandboxConfig
from .result import EvalResult


def _static_check(src: str, backend: str, allow_libraries: bool, rules: str = "kevin") -> list[tuple[str, str]] | None:
    """The static layer's violations as (rule family, message); None when `kevin.sandbox.static` is not available."""
    try:
        from .static import check_rules
    except ImportError:
        return None
    return check_rules(src, backend=backend, allow_libraries=allow_libraries, rules=rules)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return f"cpu:{line.split(':', 1)[1].strip()}:{os.cpu_count()}"
    except OSError:
        pass
    return f"cpu:{os.cpu_count()}"


def _cleanup(root: str, zygotes: list, owner_fd: int | None = None) -> None:
    for z in zygotes:
        z.close()
    shutil.rmtree(root, ignore_errors=True)
    if owner_fd is not None:
        with contextlib.suppress(OSError):
            os.close(owner_fd)


class _GoldenCache:
    """Golden data of at most ``capacity`` tasks and ``max_bytes`` bytes, in memory and on disk (inputs can be
    gigabytes per task).

    Past either bound, or while the disk under ``min_free[0]`` has less than ``min_free[1]`` bytes free, the least
    recently used task is dropped, and its directory deleted, once no candidate is using it or waiting to
    (`pinned`); dropping only costs a recomputation (the same secret seed gives the same inputs), but a task dropped
    between its prefetch and its candidates' use was computed twice in one batch.
    """

    def __init__(self, capacity: int, max_bytes: int | None = None, min_free: tuple[str, int | None] | None = None):
        self.capacity = max(1, capacity)
        self.max_bytes = max_bytes
        self.min_free = min_free
        self._warned = False
        self.entries: OrderedDict[str, _golden_run.Golden] = OrderedDict()
        self.users: dict[str, int] = {}
        self.wanted: dict[str, int] = {}  # candidates of the task not yet judged (queued, compiling or judged now)
        self._key_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def peek(self, key: str) -> _golden_run.Golden | None:
        with self._lock:
            return self.entries.get(key)

    def acquire(self, key: str, compute: Any) -> _golden_run.Golden:
        """The entry for ``key`` (computed once if missing), marked in use until `release`."""
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                golden = self.entries.get(key)
                if golden is not None and golden.inputs_path and not golden.inputs_intact():
                    del self.entries[key]  # its inputs file was changed: computed again (its folder goes at close)
                    golden = None
                if golden is not None:
                    self.entries.move_to_end(key)
                    self.users[key] = self.users.get(key, 0) + 1
                    return golden
            with self._lock:
                self._evict()  # room on the disk before a new task's inputs are written
            golden = compute()
            with self._lock:
                self.entries[key] = golden
                self.users[key] = self.users.get(key, 0) + 1
                self._evict()
            return golden

    def release(self, key: str) -> None:
        with self._lock:
            self.users[key] = self.users.get(key, 1) - 1
            self._evict()

    @contextlib.contextmanager
    def pinned(self, key: str) -> Iterator[None]:
        """Keep ``key``'s entry (once computed) while the block runs: a candidate's whole evaluation, queue included."""
        with self._lock:
            self.wanted[key] = self.wanted.get(key, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self.wanted[key] -= 1
                if not self.wanted[key]:
                    del self.wanted[key]
                self._evict()

    def _over(self) -> bool:
        if len(self.entries) > self.capacity or _disk_short(self.min_free):
            return True
        return self.max_bytes is not None and sum(_golden_bytes(g) for g in self.entries.values()) > self.max_bytes

    def _evict(self) -> None:
        while self._over():
            victim = next((k for k in self.entries if self.users.get(k, 0) <= 0 and not self.wanted.get(k)), None)
            if victim is None:
                return
            golden = self.entries.pop(victim)
            if golden.inputs_path:
                shutil.rmtree(os.path.dirname(os.path.dirname(golden.inputs_path)), ignore_errors=True)
            if _disk_short(self.min_free) and not self._warned:
                self._warned = True  # once: every later task will be computed again for each use, which is slow
                logging.getLogger(__name__).warning(
                    "less than %d bytes free on the disk of %s: golden data is dropped as soon as it is unused "
                    "(SandboxConfig.min_free_disk_bytes)", self.min_free[1], self.min_free[0])


def _disk_short(min_free: tuple[str, int | None] | None) -> bool:
    """Whether the filesystem of ``min_free[0]`` has fewer than ``min_free[1]`` bytes free (False with no reserve, or
    when it cannot be read)."""
    if not min_free or min_free[1] is None:
        return False
    try:
        return shutil.disk_usage(min_free[0]).free < min_free[1]
    except OSError:
        return False


def _golden_bytes(golden: _golden_run.Golden) -> int:
    """The bytes ``golden`` holds: its inputs file and its output tensors."""
    size = os.path.getsize(golden.inputs_path) if golden.inputs_path and os.path.exists(golden.inputs_path) else 0
    return size + sum(t.nbytes for outputs in (golden.outputs, golden.sub_outputs) for t in outputs.values())


class DeviceGate:
    """One device's admission rule: correctness runs may share it, a timing has it alone.

    ``shared()`` is held while a candidate runs its correctness sets (untimed, so they may overlap each other);
    ``exclusive()`` while a golden process times the baseline or a candidate is timed: it waits until no shared
    holder is left. A new shared holder is admitted while no exclusive one holds the device and no exclusive
    caller has waited more than ``patience_s`` seconds: so a timing is never starved, yet a correctness run that
    arrives just after timings began to queue goes first. That order matters when many candidates finish
    compiling together: a correctness run is what lets a candidate queue for its timing (with the stricter rule,
    candidates waited seconds behind timings before their correctness runs could start, then the GPU idled
    while their outputs were compared).
    ``max_shared`` caps the shared holders at once (None: no cap): on a GPU each holds device memory.
    ``in_use()`` is held while other work of this process computes on the device (a policy decoding between
    evaluations): no timing starts meanwhile, and so correctness runs are admitted beside it whatever waits,
    since holding them back could not let a timing in sooner (unless the holder is about to step aside: below).
    It is admitted like a correctness run, but with its own ``policy_patience_s`` (None: ``patience_s``): a rollout
    fixes a call's rows before it asks for the device, so a timing let in first cannot add its kernel's group to that
    call, while every group in the call waits.
    With ``step_aside_after_s``, an ``in_use`` holder that calls `step_aside` between its decoding steps leaves the
    device to the timings that have waited that long, and comes back once they are done: a correct kernel is timed
    at the policy's next check between decoding steps, not after the whole generate call, and its group's next turn
    is due sooner. While correctness runs still hold the device the timing could not start, so the holder keeps
    decoding and steps aside at its first check after they have left; meanwhile new correctness runs are admitted
    by the patience rule, as if the holder were already away.
    Exclusive callers are admitted in the order of their ``priority`` (default: when they began to wait), not in
    the order the threads happen to wake: the Sandbox passes each candidate's arrival, so a rollout's kernels are
    timed in the order they were written and a group of them is judged as soon as its own timings are done.
    One gate per device for the whole process (`device_gate`), so two Sandboxes never time on one device at once.
    """

    def __init__(self, patience_s: float = 1.0, max_shared: int | None = None, *,
                 policy_patience_s: float | None = None, step_aside_after_s: float | None = None) -> None:
        self.patience_s = patience_s
        self.policy_patience_s = patience_s if policy_patience_s is None else policy_patience_s
        self.step_aside_after_s = step_aside_after_s
        self.max_shared = max_shared
        self._cond = threading.Condition()
        self._shared = 0  # holders of shared() and in_use()
        self._in_use = 0  # holders of in_use()
        self._aside_due = False  # the one in_use() holder is stepping aside, or will once the device has drained
        self._exclusive = False  # exclusive() is held
        self._waiting: list[float] = []  # when each caller now waiting in exclusive() began to wait
        self._queue: list[tuple[float, int, bool]] = []  # ... and its (priority, ticket, pause): smallest goes first
        self._tickets = itertools.count()
        self._pausable: dict[_PausableHold, int | None] = {}  # pausable() holders -> process group (None: not yet)
        self._stopped: dict[_PausableHold, float] = {}  # holders stopped by the exclusive() now held -> since when
        self._groups: dict[_PausableHold, set[int]] = {}  # ... and the process groups stopped for each (`_stop`)
        self._unpaused_waiting = 0  # callers waiting in exclusive(pause=False): new pausable holders wait for them

    def _admits_shared(self, in_use: bool = False) -> bool:
        """Whether a correctness run (or, ``in_use``, other work) may hold the device now. A new ``in_use`` holder
        keeps its patience rule even while another one holds the device: otherwise two overlapping holders could
        keep a timing out for good. Beside a holder that is stepping aside (`step_aside`) a correctness run keeps
        the patience rule too."""
        if self._exclusive or (self.max_shared is not None and self._shared >= self.max_shared):
            return False
        if self._in_use and not in_use and not (self._aside_due and self._in_use == 1):
            return True
        patience = self.policy_patience_s if in_use else self.patience_s
        return not self._waiting or time.monotonic() - min(self._waiting) < patience

    @contextlib.contextmanager
    def shared(self, timeout: float | None = None) -> Iterator[None]:
        """Admission for a correctness run; `_Cancelled` when ``timeout`` seconds pass first."""
        with self._cond:
            if not self._cond.wait_for(self._admits_shared, timeout=_bounded(timeout)):
                raise _Cancelled
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def in_use(self, timeout: float | None = None) -> Iterator[None]:
        """Admission for other work on the device (a policy decoding), as a correctness run is admitted but with
        ``policy_patience_s``; while it is held, no timing starts and correctness runs are admitted even past a
        waiting timing's patience (but while its holder steps aside: `step_aside`)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._admits_shared(in_use=True), timeout=_bounded(timeout)):
                raise _Cancelled
            self._shared += 1
            self._in_use += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._in_use -= 1
                self._aside_due = False  # (set by this holder, or by one before it: either way no longer its)
                self._cond.notify_all()

    def step_aside(self, before: Callable[[], Any] | None = None) -> float:
        """For an ``in_use()`` holder between two steps of its work: when a timing has waited ``step_aside_after_s``
        or longer, call ``before()`` (the holder's own device work finished: a CUDA synchronize), leave the device
        until every timing waiting now has had it (or given up), then come back as ``in_use()`` is admitted. Seconds
        away: 0.0 when nothing waited long enough, the gate has no ``step_aside_after_s``, or another ``in_use()``
        holder would keep the timing out anyway. While correctness runs (or a timing's shared tail) hold the device,
        the timing could not start: 0.0 as well, and from then until the holder steps aside, new correctness runs
        are admitted by the patience rule, as if it were away (`_aside_due`)."""
        after = self.step_aside_after_s
        # read without the lock (a timing holds it while it stops compiles; a policy asks after every decoding step):
        # a timing that began to wait meanwhile is seen at the next step
        if after is None or not (self._waiting or self._aside_due):
            return 0.0
        with self._cond:
            due = self._in_use == 1 and bool(self._waiting) and time.monotonic() - min(self._waiting) >= after
            drained = self._shared == self._in_use
            if self._aside_due and not due:
                self._cond.notify_all()  # correctness runs held back for a timing no longer due may go in again
            self._aside_due = due  # kept through before(): no run slips in while the holder finishes its work
            if not due or not drained:
                return 0.0
        try:
            if before is not None:
                before()
        except BaseException:
            with self._cond:
                self._aside_due = False
                self._cond.notify_all()
            raise
        with self._cond:
            left, away = time.monotonic(), False
            waiting = {ticket for _, ticket, _ in self._queue}
            try:  # back once none of them waits or holds the device alone (a timing's shared tail may go on)
                self._shared -= 1
                self._in_use -= 1
                self._aside_due, away = False, True
                self._cond.notify_all()
                self._cond.wait_for(lambda: not self._exclusive and not any(
                    ticket in waiting for _, ticket, _ in self._queue))
                self._cond.wait_for(lambda: self._admits_shared(in_use=True))
            finally:  # (also on an interrupt: the caller's in_use() block still ends by giving the hold back)
                if away:
                    self._shared += 1
                    self._in_use += 1
            return time.monotonic() - left

    @contextlib.contextmanager
    def pausable(self, timeout: float | None = None) -> Iterator["_PausableHold"]:
        """Admission for work that a timing pauses instead of waiting for it (a compile on the CPU backend, tens of
        seconds against a timing's fraction of one); `_Cancelled` when ``timeout`` seconds pass first.

        Yields a `_PausableHold`: its ``register(pgid)`` names the work's process group once it exists. While a
        timing holds the device (``exclusive()``) every registered group is stopped (SIGSTOP) and continued after,
        and ``paused_s()`` says for how long in all, so that the work's own time limit can leave it out.
        ``exclusive()`` waits only for holders that have not registered yet; a new holder waits while the device
        is held alone.
        """
        hold = _PausableHold(self)
        with self._cond:
            if not self._cond.wait_for(lambda: not self._exclusive and not self._unpaused_waiting,
                                       timeout=_bounded(timeout)):
                raise _Cancelled
            self._pausable[hold] = None
        try:
            yield hold
        finally:
            with self._cond:
                self._pausable.pop(hold)
                if hold in self._stopped:  # leaving while stopped (a cancel): its process is killed next
                    self._continue(hold)
                    hold.paused += time.monotonic() - self._stopped.pop(hold)
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self, timeout: float | None = None, *, pause: bool = True,
                  priority: float | None = None) -> Iterator["_ExclusiveHold"]:
        """The device alone; `_Cancelled` when ``timeout`` seconds pass first. Pausable holders' process groups are
        stopped for the duration (`pausable`); with ``pause`` False it waits for them to leave instead (`alone`).
        Yields an `_ExclusiveHold`, whose ``share()`` ends the "alone" early while still keeping timings out.
        Of the callers that could go now, the one with the smallest ``priority`` (a `time.monotonic` reading; None:
        now) goes first, ties in the order they came: one waiting for compiles to leave never holds back one that
        may stop them."""
        with self._cond:
            began = time.monotonic()
            place = (began if priority is None else priority, next(self._tickets), pause)
            self._waiting.append(began)
            self._queue.append(place)
            self._unpaused_waiting += not pause  # so that a stream of new compiles cannot keep it out
            try:
                admitted = self._cond.wait_for(
                    lambda: not self._exclusive and not self._shared and self._ready(pause) and not any(
                        other < place and self._ready(other[2]) for other in self._queue),
                    timeout=_bounded(timeout))
            finally:
                self._waiting.remove(began)
                self._queue.remove(place)
                self._unpaused_waiting -= not pause
                self._cond.notify_all()
            if not admitted:
                raise _Cancelled
            self._exclusive = True
        held = _ExclusiveHold(self)
        try:
            with self._cond:  # (inside the try: whatever was stopped before an error is continued in the finally)
                self._stop({hold: pgid for hold, pgid in self._pausable.items() if pgid is not None})  # (pause only)
            yield held
        finally:
            with self._cond:
                held.active = False
                if held.shared:
                    self._shared -= 1
                else:
                    self._continue_all()
                    self._exclusive = False
                self._cond.notify_all()

    def _continue_all(self) -> None:
        """Continue every pausable holder stopped by the exclusive hold now ending (under ``_cond``)."""
        now = time.monotonic()
        for hold in list(self._stopped):
            self._continue(hold)
            hold.paused += now - self._stopped.pop(hold)

    def _ready(self, pause: bool) -> bool:
        """Whether the compiles let an exclusive caller in: all registered (to be stopped), or, not pausing, none."""
        return None not in self._pausable.values() if pause else not self._pausable

    def _stop(self, roots: dict["_PausableHold", int]) -> None:
        """SIGSTOP each holder's process group and every group below it (`_process.groups_under`: ninja runs each
        compiler in a group of its own), twice, so that a process forked while the first pass ran is stopped too.
        Each group is told to the stop guard first: killed, should this process die before it continues them."""
        if not roots:
            return
        now = time.monotonic()
        for hold in roots:
            self._stopped[hold], self._groups[hold] = now, set()
        for _ in range(2):
            below = _process.groups_under(set(roots.values()))
            for hold, pgid in roots.items():
                for group in sorted(below[pgid] - self._groups[hold]):
                    _stop_guard.stopping(group)
                    if _signal_group(group, "SIGSTOP"):
                        self._groups[hold].add(group)
                    else:  # gone: not to be continued, nor killed should its number be reused
                        _stop_guard.continued(group)

    def _continue(self, hold: "_PausableHold") -> None:
        """SIGCONT every process group stopped for ``hold``."""
        for group in self._groups.pop(hold, ()):
            _signal_group(group, "SIGCONT")
            _stop_guard.continued(group)

    def alone(self, timeout: float | None = None, *, priority: float | None = None) -> Any:
        """`exclusive` that waits for compiles to finish instead of stopping them: for a correctness run held alone,
        whose ``ModelNew.__init__`` may build an extension and wait on a lock that a stopped compile holds."""
        return self.exclusive(timeout, pause=False, priority=priority)


class _ExclusiveHold:
    """What `DeviceGate.exclusive` yields: ``share()`` turns the hold into a shared one for the rest of its span."""

    def __init__(self, gate: DeviceGate) -> None:
        self._gate = gate
        self.shared = False
        self.active = True  # until its `exclusive` block ends

    def share(self) -> None:
        """Let correctness runs, other work (a policy decoding) and paused compiles back in, but no timing until
        this holder leaves: for what follows a timed loop (its outputs written out and compared), which must not
        overlap another timing but needs the device no more than a correctness run does. The usual admission rule
        holds meanwhile: a decoding let in before a queued timing's patience ran out keeps that timing waiting
        until the decoding ends, as at the end of any hold. A second call, or one after the hold ended, does nothing."""
        gate = self._gate
        with gate._cond:
            if self.shared or not self.active:
                return
            gate._continue_all()
            gate._exclusive, self.shared = False, True
            gate._shared += 1
            gate._cond.notify_all()


class DevicesInUse:
    """What `Sandbox.device_in_use` yields: its gates, held in use; ``aside_s`` the seconds stepped aside so far."""

    def __init__(self, gates: Sequence[DeviceGate]) -> None:
        self.gates = list(gates)
        self.aside_s = 0.0

    def step_aside(self, before: Callable[[], Any] | None = None) -> float:
        """`DeviceGate.step_aside` on a sandbox of one device; with several the hold stays whole: the policy computes
        on one of them, and stepping aside on each in turn would stall it for every device's timings."""
        away = self.gates[0].step_aside(before) if len(self.gates) == 1 else 0.0
        self.aside_s += away
        return away


class _PausableHold:
    """One `DeviceGate.pausable` admission: the process group it registered, and the seconds it was stopped."""

    def __init__(self, gate: DeviceGate) -> None:
        self._gate = gate
        self.paused = 0.0

    def register(self, pgid: int) -> None:
        """Name the process group that timings stop; call once it leads its own group (see `wait_for_group`)."""
        with self._gate._cond:
            self._gate._pausable[self] = pgid
            self._gate._cond.notify_all()

    def paused_s(self) -> float:
        """Seconds this holder's work has been stopped so far (a stop under way included)."""
        with self._gate._cond:
            since = self._gate._stopped.get(self)
            return self.paused + (time.monotonic() - since if since is not None else 0.0)


def wait_for_group(pid: int, timeout_s: float = 5.0) -> None:
    """Wait until ``pid`` leads its own process group (a worker sets its group as it starts), so that a signal to
    the group reaches it; returns early if the process is gone."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if os.getpgid(pid) == pid:
                return
        except ProcessLookupError:
            return
        time.sleep(0.001)
    logging.getLogger(__name__).warning("process %d did not lead its own process group within %.0f s", pid, timeout_s)


def _signal_group(pgid: int, name: str) -> bool:
    """Send signal ``name`` to a process group; whether it was sent (a group that is gone already is no error)."""
    try:
        os.killpg(pgid, getattr(signal, name))
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _bounded(timeout: float | None) -> float | None:
    """A wait's timeout: None (forever) for no or an infinite deadline, else at least 0."""
    return None if timeout is None or timeout == float("inf") else max(0.0, timeout)


POLICY_PATIENCE_S = 5.0
"""On CUDA, how long a waiting timing lets new generate calls of the policy go first: a few of a small model's calls,
so that a stream of them cannot keep a kernel's timing, and with it its group's next turn, waiting for long."""

STEP_ASIDE_AFTER_S = 1.0
"""On CUDA, how long a timing waits for a generate call under way before the policy steps aside for it at its next
check between decoding steps (`DeviceGate.step_aside`); the call goes on once the waiting timings are done."""

_GATES: dict[tuple[str, str], DeviceGate] = {}
_GATES_LOCK = threading.Lock()


def device_gate(backend: str, device: str) -> DeviceGate:
    """The process-wide gate of a device: ("cpu", "cpu"), or ("cuda", its CUDA_VISIBLE_DEVICES entry).

    On the CPU backend a waiting timing keeps new shared holders out at once (no patience): a timing there waits
    for correctness runs and comparisons only, and stops compiles instead (`DeviceGate.pausable`). On CUDA a
    decoding policy goes before timings that have waited less than `POLICY_PATIENCE_S`."""
    with _GATES_LOCK:
        if (backend, device) not in _GATES:
            _GATES[(backend, device)] = (DeviceGate(patience_s=1.0, policy_patience_s=POLICY_PATIENCE_S,
                                                    step_aside_after_s=STEP_ASIDE_AFTER_S)
                                         if backend == "cuda" else DeviceGate(patience_s=0.0))
        return _GATES[(backend, device)]


class _DevicePool:
    """One `DeviceGate` per device slot (GPU id, or "cpu"); `assign` spreads candidates round-robin at spawn time.

    A candidate's process is bound to its device when it starts (CUDA_VISIBLE_DEVICES cannot change once
    CUDA is up), so it waits for that device's gate, never another's.
    """

    def __init__(self, slots: Sequence[Any], backend: str, max_shared: int | None = None):
        self.slots = list(slots)
        self.gates = {s: device_gate(backend, "cpu" if s == "cpu" else _resolve.physical_gpu(s)) for s in self.slots}
        if backend == "cuda" and max_shared is not None:  # a gate is the process's: the strictest Sandbox's cap
            for gate in self.gates.values():
                gate.max_shared = min(max_shared, gate.max_shared or max_shared)
        self._next = 0
        self._lock = threading.Lock()

    def assign(self) -> Any:
        with self._lock:
            slot = self.slots[self._next % len(self.slots)]
            self._next += 1
            return slot


_CANCEL_GRACE_S = 5.0  # after the deadline, how long stopped candidates get to wind down before being reported


HARNESS_FAULTS = ("internal_error", "golden_error", "batch_deadline")
"""``details`` keys of verdicts the harness may have caused (a bug of its own, a reference that failed, the batch's
deadline): the first such verdict of a program is not reused, the next is (`_Verdicts`)."""
RUN_DETAILS = ("total_seconds", "timeline", "compile_seconds", "run_seconds", "seconds_to_outputs", "forked",
               "phase_seconds")
"""``details`` keys that describe the judging run itself, left out of a reused verdict (the twin made no such run)."""


class _Entry:
    """One (task, program)'s verdict: ``done`` is set once it is decided; ``result`` is None when it was dropped."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: EvalResult | None = None


class _ByteBudget:
    """Bytes shared by threads: `take(n)` hands out n of them only if n are left; `give(n)` returns them."""

    def __init__(self, capacity: int) -> None:
        self.left = capacity
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            if n > self.left:
                return False
            self.left -= n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.left += n


class _Verdicts:
    """The verdicts of a Sandbox's candidates by (task source, candidate source), the ``capacity`` most recent, until
    `Sandbox.forget_verdicts` (`kevin.core.rollout.rollout` calls it at its start: one rollout's policy is fixed).

    A policy samples the same kernel many times (a warm-started or converging one more than half of its kernels in a
    step): a twin waits for the first copy's verdict instead of compiling, checking and timing it again. Whatever that
    verdict is, it is the twin's too, so reuse cannot favour an outcome: a kernel that is correct one time in two
    keeps the reward of its first judging, right or wrong, rather than being judged again until it is correct. A
    program's first verdict with a `HARNESS_FAULTS` key is dropped and it is judged again once; its next verdict is
    kept whatever it is. Verdicts last one rollout, not the run: a draw kept across updates would let the policy learn
    which of its near-identical programs drew well (docs/threat-model.md, "Reused verdicts")."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._dropped: set[str] = set()  # programs whose verdict was dropped once already

    def claim(self, key: str) -> tuple[bool, _Entry]:
        """(first, entry): ``first`` when no copy is judged or being judged, and the caller judges it and calls
        `publish` with this entry; otherwise the caller waits for ``entry.done``."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                return False, entry
            entry = self._entries[key] = _Entry()
            if (excess := len(self._entries) - self.capacity) > 0:  # the oldest decided go; those in judging stay
                for old in [k for k, e in self._entries.items() if e.done.is_set()][:excess]:
                    del self._entries[old]
            return True, entry

    def publish(self, key: str, entry: _Entry, result: EvalResult) -> None:
        """Decide ``entry``: ``result`` is kept for later copies, unless it is the program's first with a
        `HARNESS_FAULTS` key; then the entry is dropped and a later copy claims the program again. Idempotent."""
        with self._lock:
            if entry.done.is_set():
                return
            if key in self._dropped or not any(k in result.details for k in HARNESS_FAULTS):
                entry.result = result
            else:
                self._dropped.add(key)
                if self._entries.get(key) is entry:
                    del self._entries[key]
            entry.done.set()

    def abandon(self, key: str, entry: _Entry) -> None:
        """Decide ``entry`` with no verdict (an interrupted judging is nobody's result): waiting twins judge the
        program themselves, and the next copy claims it again. Idempotent."""
        with self._lock:
            if entry.done.is_set():
                return
            if self._entries.get(key) is entry:
                del self._entries[key]
            entry.done.set()


class _Cancelled(Exception):
    """The batch's deadline passed while this candidate waited for a slot, a device or its golden data."""


class _JobState:
    """One candidate's progress through a batch: its phase, the seconds spent in each, its process, and the
    batch's deadline, against which every wait for a slot or a device is bounded."""

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.cancelled = threading.Event()
        self.run: Any = None
        self.on_cancel: Callable[[], None] | None = None
        self.phase = "queue"
        self._since = self.arrived = time.monotonic()  # arrived: its place in the device's timing queue
        self.seconds: dict[str, float] = {}

    def enter(self, phase: str) -> None:
        now = time.monotonic()
        self.seconds[self.phase] = self.seconds.get(self.phase, 0.0) + now - self._since
        self.phase, self._since = phase, now

    def phase_seconds(self) -> dict[str, float]:
        seconds = dict(self.seconds)
        seconds[self.phase] = seconds.get(self.phase, 0.0) + time.monotonic() - self._since
        return {k: round(v, 3) for k, v in seconds.items()}

    def check(self) -> None:
        if self.cancelled.is_set() or time.monotonic() >= self.deadline:
            raise _Cancelled

    def cancel(self) -> None:
        self.cancelled.set()
        if self.on_cancel is not None:  # a program this job was judging first: its twins judge it themselves
            self.on_cancel()
        run = self.run
        if run is not None:
            run.worker.kill()

    def timeout_result(self) -> EvalResult:
        words = _PHASE_WORDS.get(self.phase, self.phase)
        return EvalResult("timeout", f"Timeout: the evaluation's time ran out while {words} (other kernels of the "
                          "batch were still being judged, or yours was far too slow).",
                          details={"batch_deadline": True, "phase": self.phase, "phase_seconds": self.phase_seconds()})

    @contextlib.contextmanager
    def holding(self, semaphore: threading.Semaphore) -> Iterator[None]:
        """Hold ``semaphore``, waiting no later than the deadline (then `_Cancelled`)."""
        while not semaphore.acquire(timeout=0.5):
            self.check()
        try:
            self.check()
            yield
        finally:
            semaphore.release()

    def within(self, gate_context: Any, phase: str | None = None) -> Any:
        """A context factory for a `DeviceGate` method, bounded by the deadline; enters ``phase`` once admitted."""
        @contextlib.contextmanager
        def bounded() -> Iterator[None]:
            with gate_context(timeout=self.deadline - time.monotonic()) if _takes_timeout(gate_context) \
                    else gate_context() as admitted:
                self.check()
                if phase is not None:
                    self.enter(phase)
                yield admitted
        return bounded


def _takes_timeout(fn: Any) -> bool:
    """Whether ``fn`` is a `DeviceGate` method (or a partial of one), which takes the deadline as ``timeout``."""
    fn = fn.func if isinstance(fn, functools.partial) else fn
    return getattr(fn, "__self__", None).__class__ is DeviceGate


_PHASE_WORDS = {"queue": "waiting for a free compile slot", "compile": "compiling and loading your program",
                "golden": "preparing the reference's outputs", "correctness": "running your kernel on the correctness inputs",
                "timing": "timing your kernel", "twin": "waiting to be judged",
                "baseline": "timing the PyTorch reference again"}


class Sandbox:
    """A reusable evaluator bound to a device ("cpu", "cuda" = all visible GPUs, or "cuda:N").

    Holds a secret seed for the whole run (unless ``config.seed`` is set), golden data per task in memory,
    and a private temporary directory removed when the Sandbox is garbage-collected.
    """

    def __init__(self, device: str = "cuda", config: SandboxConfig | None = None):
        self.config = config or SandboxConfig()
        self.spec = _resolve.resolve_device(device)
        self.device = device
        self.backend = self.spec.backend
        self.cache_dir = self.config.resolved_cache_dir()
        os.makedirs(self.cache_dir, exist_ok=True)
        self._seed = self.config.seed if self.config.seed is not None else secrets.randbits(63)
        _scratch.sweep()  # the directories of Sandboxes whose process was killed: gigabytes of golden inputs each
        self._root, owner_fd = _scratch.make_root()  # locked while this Sandbox lives (closed by the finalizer)
        self._zygote: list[_process.Zygote] = []  # started lazily; a list so the finalizer sees it
        self._zygote_failed = False
        self._finalizer = weakref.finalize(self, _cleanup, self._root, self._zygote, owner_fd)
        self._golden = _GoldenCache(self.config.max_golden_tasks, self.config.max_golden_bytes,
                                    min_free=(self._root, self.config.min_free_disk_bytes))
        self._prefetching: set[str] = set()  # golden keys being computed ahead of their candidates' judging
        self._verdicts = _Verdicts()  # by (task source, candidate source): a twin's verdict is reused
        self._pinned = _ByteBudget(self.config.pinned_host_bytes)  # page-locked inputs of candidates awaiting timings
        self._baselines: dict[str, dict[str, float]] = {}  # baseline key -> {name: ms} (never read from disk)
        self._rechecks: dict[str, threading.Lock] = {}  # baseline key -> held while the reference is timed again
        self._rechecked: set[str] = set()  # baseline keys whose reference was timed twice (`_rechecked_baselines`)
        self._recheck_failures: dict[str, int] = {}  # baseline key -> second timings that failed
        self._lock = threading.Lock()
        self._compile_slots = threading.Semaphore(self.config.workers)
        self.arch = ""
        self._permute: _harness.Built | None = None  # CUDA: the sandbox's own kernel (`kevin.sandbox.build.harness`)
        self._device_names: dict[Any, str] = {}
        if self.backend == "cuda":
            import torch

            slots: list[Any] = list(self.spec.gpus)
            self.arch = _harness.default_arch(slots[0])  # $TORCH_CUDA_ARCH_LIST, else the first GPU's capability
            self._device_names = {g: torch.cuda.get_device_name(g) for g in slots}
            # the timings' own kernel, built and tried now: a GPU it cannot run on fails here, not in every timing
            self._permute = _harness.build_permute(os.path.join(self._root, "harness"), self.arch)
            _harness.check_launch(self._permute, slots)
        else:
            slots = ["cpu"]
            self._device_names = {"cpu": _cpu_name()}
        self._devices = _DevicePool(slots, self.backend, self.config.gpu_sharers)
        # A precompiled <torch/extension.h> for candidates' main.cpp (on the CPU a whole build's, and the light
        # prelude of a kernel compiled apart from its bindings), built once per toolchain in the background;
        # candidates that compile before it is ready build without it (`._pch`).
        pch = self.config.precompiled_header
        if pch or (pch is None and self.backend == "cuda"):
            threading.Thread(target=self._build_pch, name="kevin-pch", daemon=True).start()
        self._live = threading.Semaphore(self.capacity)  # candidate processes alive at once

    # ------------------------------------------------------------------ public API
    def evaluate(self, task: Any, candidate_src: str) -> EvalResult:
        """Evaluate one candidate for one task (see `evaluate_many`)."""
        return self.evaluate_many([(task, candidate_src)])[0]

    def evaluate_many(self, jobs: Sequence[tuple[Any, str]], *, deadline_s: float | None = None) -> list[EvalResult]:
        """Evaluate (task, candidate source) pairs; results in job order; never raises for a bad candidate.

        ``deadline_s`` (default ``config.batch_deadline_s``; None = no deadline): seconds after which every
        candidate not yet judged is stopped (its process group killed) and judged ``timeout``, so the batch
        returns within the deadline plus a few seconds whatever the candidates do. Each result's
        ``details["phase_seconds"]`` says where its time went (queue, compile, golden, correctness, timing).
        """
        sources = []
        for task, src in jobs:
            if not isinstance(src, str):
                raise ValueError(f"candidate source must be a string, not {type(src).__name__}")
            task_src = task.source_for(self.backend)
            _resolve.validate_task_source(task_src, getattr(task, "task_id", ""))
            sources.append(task_src)
        if not jobs:
            return []
        limit = self.config.batch_deadline_s if deadline_s is None else deadline_s
        if limit is not None and not limit > 0:
            raise ValueError(f"deadline_s must be > 0 seconds, not {limit!r}")
        deadline = time.monotonic() + limit if limit is not None else float("inf")
        states = [_JobState(deadline) for _ in jobs]
        pool = ThreadPoolExecutor(max_workers=min(len(jobs), 256), thread_name_prefix="kevin-eval")
        try:
            futures = [pool.submit(self._pipeline, task_src, src, state)
                       for task_src, (_, src), state in zip(sources, jobs, states)]
            wait(futures, timeout=None if limit is None else max(0.0, deadline - time.monotonic()))
            late = [k for k, f in enumerate(futures) if not f.done()]
            for k in late:  # in the background: reaping a killed process can take seconds
                threading.Thread(target=states[k].cancel, name="kevin-cancel", daemon=True).start()
            if late:  # killed processes make their threads return at once; a thread stuck elsewhere is left behind
                wait([futures[k] for k in late], timeout=_CANCEL_GRACE_S)
            return [f.result() if f.done() else states[k].timeout_result() for k, f in enumerate(futures)]
        finally:
            pool.shutdown(wait=False)

    @property
    def capacity(self) -> int:
        """How many candidates this sandbox keeps alive at once: its compile workers plus a short queue per device
        (more in flight only wait for a slot)."""
        return self.config.workers + 2 * len(self._devices.slots)

    @contextlib.contextmanager
    def device_in_use(self) -> Iterator["DevicesInUse"]:
        """Hold every device of this sandbox (`DeviceGate.in_use`): no kernel is timed meanwhile, while kernels
        still compile and run their correctness checks.

        For a caller that computes on the same device between evaluations (a policy decoding while earlier
        kernels are judged), so that its work never lands inside a kernel's timing. Gates are taken in one order.
        Yields a `DevicesInUse`, whose ``step_aside`` the caller may call between its steps."""
        gates = [self._devices.gates[slot] for slot in sorted(self._devices.gates, key=str)]
        with contextlib.ExitStack() as stack:
            for gate in gates:
                stack.enter_context(gate.in_use())
            yield DevicesInUse(gates)

    # ------------------------------------------------------------------ stages
    def _build_pch(self) -> None:
        """`._pch.ensure` for this backend; on the CPU backend the build runs on the cores that timings are measured
        on, so it is paused like a compile: no timing overlaps it (a built PCH is found in milliseconds)."""
        _pch.ensure(self.cache_dir, self.backend,
                    pausable=self._devices.gates["cpu"].pausable if self.backend == "cpu" else None)

    def _pipeline(self, task_src: str, src: str, state: "_JobState | None" = None) -> EvalResult:
        state = state or _JobState(float("inf"))
        key, owned, memo = "", None, self._verdicts  # owned: the entry of a program this job judges first
        try:
            if self.config.reuse_verdicts:  # a program judged (or in judging) for this task in this rollout
                key = _resolve.sha256(task_src, src)
                first, entry = memo.claim(key)
                if first:
                    owned = entry
                    state.on_cancel = lambda: memo.publish(key, entry, state.timeout_result())
                elif (reused := self._twin(entry, state)) is not None:  # else the first copy's verdict was dropped:
                    return self._rebased(task_src, reused)  # this copy is judged itself
            with self._golden.pinned(_resolve.sha256(task_src)):
                result = self._stages(task_src, src, state)
        except _Cancelled:
            result = state.timeout_result()
        except Exception:  # noqa: BLE001 - a harness bug must not kill the caller's training run
            result = EvalResult("runtime_error", "Runtime error: the sandbox failed internally while evaluating this "
                                "kernel.", details={"internal_error": traceback.format_exc()[-4000:]})
        except BaseException:  # an interrupt: no twin waits for this verdict forever
            if owned is not None:
                memo.abandon(key, owned)
            raise
        if state.cancelled.is_set() or (result.status == "timeout" and time.monotonic() >= state.deadline):
            result = state.timeout_result()  # the batch's deadline, not the candidate's own limit, ended it
        try:
            details = dict(result.details)
            details["phase_seconds"] = state.phase_seconds()
            internal = details.pop("internal_error", None)  # a harness bug's traceback keeps its paths, for us
            details = feedback.scrub_paths(details)
            if internal is not None:
                details["internal_error"] = internal
            result = dataclasses.replace(result, details=details, feedback=feedback.scrub_paths(result.feedback))
        except Exception:  # noqa: BLE001 - never raise out of evaluate_many
            pass
        if owned is not None:  # after the deadline's override (a judging cancelled meanwhile was decided by cancel())
            memo.publish(key, owned, result)
        return result

    def forget_verdicts(self) -> None:
        """Judge every program afresh from now on (`_Verdicts`): called at the start of each rollout."""
        self._verdicts = _Verdicts()

    @staticmethod
    def _twin(entry: _Entry, state: "_JobState") -> EvalResult | None:
        """The verdict of an identical candidate judged first (`_Verdicts`), marked ``details["reused"]`` and without
        the details of its judging run (`RUN_DETAILS`); None when it is not to be reused (the caller judges it)."""
        state.enter("twin")
        while not entry.done.wait(0.5):
            state.check()
        state.check()  # decided just as this copy's own deadline passed: a timeout, as for any other copy
        state.enter("queue")
        if entry.result is None:
            return None
        first = entry.result
        details = {k: v for k, v in first.details.items() if k not in RUN_DETAILS}
        details.update(reused=True, phase_seconds=state.phase_seconds())
        return dataclasses.replace(first, details=details, baselines_ms=dict(first.baselines_ms))

    def _stages(self, task_src: str, src: str, state: "_JobState") -> EvalResult:
        t0 = time.monotonic()
        if self.config.static_checks:
            found = _static_check(src, self.backend, self.config.allow_libraries, self.config.rules)
            if found:
                violations = [message for _, message in found]
                return EvalResult("format_error", feedback.format_error_feedback(violations),
                                  details={"violations": violations,
                                           "rules": sorted({f"format/{family}" for family, _ in found})})
        marks = {"start": t0}
        state.enter("queue")
        with state.holding(self._live):
            slot = self._devices.assign()
            self._prefetch_golden(task_src, slot)
            result, zygote, judged = self._attempt(task_src, src, state, slot, marks,
                                                   alone=not self.config.parallel_checks)
            if result.status == "runtime_error" and "out_of_memory" in result.details and self.config.parallel_checks:
                # The device's memory is shared by the processes that share it, so the allocation that failed may
                # have been another's doing: judged again, from a fresh process, with the device alone.
                first = {k: result.details[k] for k in ("out_of_memory", "traceback") if k in result.details}
                result, zygote, judged = self._attempt(task_src, src, state, slot, marks, alone=True)
                result = dataclasses.replace(result, details={**result.details, "judged_again_alone": first})
            if not judged:  # it failed to build, or its task's reference did
                return result
        details = dict(result.details)
        marks["done"] = time.monotonic()
        marks.update(result.details.get("marks", {}))
        details.pop("marks", None)
        details.update(total_seconds=round(time.monotonic() - t0, 3), device_name=self._device_names[slot],
                       forked=zygote is not None,
                       timeline={k: round(v - t0, 3) for k, v in sorted(marks.items(), key=lambda kv: kv[1])})
        return dataclasses.replace(result, details=details)

    def _attempt(self, task_src: str, src: str, state: "_JobState", slot: Any, marks: dict[str, float], *,
                 alone: bool) -> tuple[EvalResult, Any, bool]:
        """Build (or load from the cache) and judge ``src`` once on ``slot``; ``alone``: its correctness run has the
        device to itself (a timing always has). Returns the result, the zygote it was forked from (or None) and
        whether it was judged (False: it failed to build, or the task's reference failed)."""
        max_jobs = max(1, (os.cpu_count() or 1) // self.config.workers)
        # On the CPU backend the compilers run on the cores that timings are measured on: a timing (candidate or
        # baseline) stops the process of every compile for its duration (`DeviceGate.pausable`), so none overlaps it.
        compiling = self._devices.gates[slot].pausable if self.backend == "cpu" else contextlib.nullcontext
        zygote = self._get_zygote()  # before the admission: a timing waits for an admitted compile to register
        with state.holding(self._compile_slots), state.within(compiling)() as hold:
            state.enter("compile")
            marks["spawned"] = time.monotonic()
            run = _judge.CandidateRun(src, backend=self.backend, config=self.config, cache_dir=self.cache_dir,
                                      gpu=self._gpu_env(slot), arch=self.arch, max_jobs=max_jobs,
                                      zygote=zygote, deadline=state.deadline, scratch_parent=self._root,
                                      permute=self._permute)
            try:
                if run.worker.proc is not None:  # a cancel signals the worker's group: it must lead one first
                    wait_for_group(run.worker.proc.pid)  # the candidate's own group: its compilers are below it
            except BaseException:
                run.close()
                raise
            state.run = run
            try:
                if hold is not None and run.worker.proc is not None:
                    hold.register(run.worker.proc.pid)
                state.check()
                failed = run.wait_imported(paused_s=hold.paused_s if hold is not None else None, check=False)
            except BaseException:
                run.close()
                raise
        pinned = 0  # bytes of the pinned-input budget this candidate holds
        try:
            # the built libraries' check, after the compile's admission: its nm holds the device like a check run
            libraries = state.within(self._devices.gates[slot].shared)
            failed = failed or run.check_libraries(libraries)
            if failed is not None:
                return failed, zygote, False
            marks["compiled"] = time.monotonic()
            state.enter("golden")
            golden_key = _resolve.sha256(task_src)
            golden = self._golden.acquire(golden_key, lambda: self._compute_golden(task_src, slot))
            try:
                if golden.error is not None:
                    return EvalResult("runtime_error", feedback.runtime_error_feedback(
                        "the reference program itself failed in the sandbox; this task cannot be evaluated"),
                        details={"golden_error": golden.error}), zygote, False
                baselines = self._baselines_of(task_src, slot) if self.config.measure_speed else {}
                marks["golden"] = time.monotonic()
                state.check()
                gate = self._devices.gates[slot]
                first = state.arrived  # timed in the order the candidates arrived (`DeviceGate`)
                checks = functools.partial(gate.alone, priority=first) if alone else gate.shared
                need = _judge.pinned_need(golden) if self.backend == "cuda" and self.config.measure_speed else None
                pinned = need if need and self._pinned.take(need) else 0  # given back once the process is gone
                result = run.judge(golden, baseline_ms=baselines.get(self.config.baseline),
                                   reference_ms=baselines.get("eager"), compare_on=self._compare_device(slot),
                                   checks=state.within(checks, "correctness"),
                                   timing=state.within(functools.partial(gate.exclusive, priority=first), "timing"),
                                   pin_bytes=pinned)
                rechecked = self._rechecked_baselines(task_src, slot, result.speedup, state) if result.correct else None
                if rechecked and rechecked != baselines:  # judged against a first timing that a second one beat
                    return self._with_baselines(result, rechecked), zygote, True
                return dataclasses.replace(result, baselines_ms=dict(baselines)), zygote, True
            finally:
                self._golden.release(golden_key)
        finally:
            run.close()
            self._pinned.give(pinned)

    def _prefetch_golden(self, task_src: str, slot: Any) -> None:
        """On CUDA, compute a task's golden data and baseline on ``slot`` while its candidates compile.

        The GPU is idle during compilation; without this the first judging of every new task waited ~10 s for
        the golden process. Its reference runs share the device gate and its baseline timing holds it alone
        (`_compute_golden`), so it never overlaps a timing. A failure is left for the judging, which computes the
        entry again and reports it. The CPU backend does not prefetch: its baseline would be timed while
        compilers load the cores.
        """
        if self.backend != "cuda":
            return
        key = _resolve.sha256(task_src)
        with self._lock:
            if key in self._prefetching or self._golden.peek(key) is not None:
                return
            self._prefetching.add(key)

        def work() -> None:
            try:
                self._golden.acquire(key, lambda: self._compute_golden(task_src, slot))
                self._golden.release(key)
            except Exception:  # noqa: BLE001 - the judging recomputes and reports
                pass
            finally:
                with self._lock:
                    self._prefetching.discard(key)

        threading.Thread(target=work, name="kevin-golden-prefetch", daemon=True).start()

    def _get_zygote(self) -> _process.Zygote | None:
        """The fork server, started on first use (None when disabled or when it cannot start)."""
        if not self.config.prefork or self._zygote_failed:
            return None
        with self._lock:
            if self._zygote and self._zygote[0].alive:
                return self._zygote[0]
            for old in self._zygote:
                old.close()
            self._zygote.clear()
            scratch = tempfile.mkdtemp(prefix="zygote-", dir=self._root)
            extra = {"CUDA_VISIBLE_DEVICES": ""}
            if self.arch:
                extra["TORCH_CUDA_ARCH_LIST"] = self.arch
            try:
                self._zygote.append(_process.Zygote(scratch, _process.scrubbed_env(scratch, extra)))
            except Exception:  # noqa: BLE001 - fall back to one interpreter per candidate
                self._zygote_failed = True
                return None
            return self._zygote[0]

    def _compare_device(self, slot: Any) -> str:
        """Where the parent compares a candidate's outputs: its GPU on the CUDA backend (float64 comparisons of
        KernelBench-size outputs took the parent's cores 30-70 s per candidate), else the CPU."""
        return f"cuda:{slot}" if self.backend == "cuda" else "cpu"

    def _gpu_env(self, slot: Any) -> str | None:
        return _resolve.physical_gpu(slot) if self.backend == "cuda" else None

    def _baseline_key(self, task_src: str, slot: Any) -> str:
        return _resolve.sha256(task_src, self.backend, self._device_names[slot],
                               json.dumps(self.config.timing_settings(), sort_keys=True), _judge.torch_version(),
                               ",".join(self.config.baselines_for(self.backend)))

    def _baselines_of(self, task_src: str, slot: Any) -> dict[str, float]:
        """The reference's runtimes on ``slot``'s device by baseline name (`SandboxConfig.baselines_for`): this
        Sandbox's first timing of each, from the golden process (the faster of two once `_rechecked_baselines` ran).

        Never read from disk (a candidate could have rewritten the file); written there as a record.
        """
        key = self._baseline_key(task_src, slot)
        if key in self._baselines:
            return self._baselines[key]
        golden = self._golden.peek(_resolve.sha256(task_src))
        summaries = _baseline_summaries(golden.meta if golden else {})
        if self.config.baseline not in summaries:
            # Golden data came from a device of another name (or without timing): time it here now.
            summaries = self._time_reference(task_src, slot)
        values = {name: float(summary["median_ms"]) for name, summary in summaries.items()}
        if self.config.baseline not in values:
            return {}
        values = self._baselines.setdefault(key, values)  # two GPUs of one name: first wins
        self._record_baselines(key, values, summaries, slot)
        return values

    def _time_reference(self, task_src: str, slot: Any) -> dict[str, dict[str, Any]]:
        """The reference's timing summaries by baseline name from a golden process run for them alone ({} if it
        failed); its baseline timing holds ``slot``'s device alone, ahead of the candidates' timings."""
        gate = self._devices.gates[slot]
        alone = functools.partial(gate.exclusive, priority=float("-inf"))  # as `_compute_golden`'s: before candidates
        fresh = _golden_run.run_golden([("b", task_src)], root=self._root, gpu=self._gpu_env(slot), config=self.config,
                                       seed=self._seed, baseline_keys=frozenset({"b"}), n_rechecks=0,
                                       shared=gate.shared, alone=alone, zygote=self._get_zygote(),
                                       permute=self._permute)["b"]
        if fresh.inputs_path:
            shutil.rmtree(os.path.dirname(os.path.dirname(fresh.inputs_path)), ignore_errors=True)
        return _baseline_summaries(fresh.meta) if fresh.error is None else {}

    def _rechecked_baselines(self, task_src: str, slot: Any, speedup: float | None,
                             state: "_JobState") -> dict[str, float] | None:
        """The task's baselines once the reference has been timed a second time, each the faster of its two
        timings; None before that (CPU backend only). The first correct kernel ``recheck_baseline_speedup`` times
        faster than the first timing takes the second one; every correct kernel judged while it runs waits for it.
        A second timing that fails (the golden process raised or timed nothing) changes nothing, and the next kernel
        over the threshold tries again, twice at most."""
        threshold = self.config.recheck_baseline_speedup
        if self.backend != "cpu" or threshold is None:
            return None
        key = self._baseline_key(task_src, slot)
        if key in self._rechecked:
            return self._baselines[key]
        due = speedup is not None and speedup >= threshold and key in self._baselines
        with self._lock:
            recheck = self._rechecks.get(key)
            if recheck is None and due:
                recheck = self._rechecks[key] = threading.Lock()
        if recheck is None:  # none due, none running
            return None
        state.enter("baseline")
        while not recheck.acquire(timeout=0.5):  # a recheck running: wait for it, whatever this kernel's speedup
            state.check()
        try:
            if key not in self._rechecked and due:
                first = self._baselines[key]
                try:
                    summaries = self._time_reference(task_src, slot)
                except Exception:  # noqa: BLE001 - a failed recheck must not cost this kernel its verdict
                    logging.getLogger(__name__).warning("timing the reference again failed", exc_info=True)
                    summaries = {}
                again = {name: float(summary["median_ms"]) for name, summary in summaries.items()}
                self._recheck_failures[key] = self._recheck_failures.get(key, 0) + (self.config.baseline not in again)
                if self.config.baseline in again or self._recheck_failures[key] >= 2:
                    values = {name: min(ms, again.get(name, ms)) for name, ms in first.items()}
                    self._baselines[key] = values
                    self._rechecked.add(key)
                    self._record_baselines(key, values, {"first_ms": dict(first), "again": summaries}, slot)
        finally:
            recheck.release()
        return self._baselines[key] if key in self._rechecked else None

    def _rebased(self, task_src: str, result: EvalResult) -> EvalResult:
        """``result`` against the task's current baselines: a correct verdict given before the reference was timed
        a second time (a twin's, `_Verdicts`) gets the faster timing too. CPU backend only, as the recheck."""
        key = self._baseline_key(task_src, "cpu") if self.backend == "cpu" else None
        if not result.correct or key not in self._rechecked or self._baselines[key] == result.baselines_ms:
            return result
        return self._with_baselines(result, self._baselines[key])

    def _with_baselines(self, result: EvalResult, baselines: dict[str, float]) -> EvalResult:
        """A correct ``result`` with ``baselines`` (its baseline, every timing carried and the feedback's speedup)."""
        baseline_ms = baselines.get(self.config.baseline)
        return dataclasses.replace(result, baseline_ms=baseline_ms, baselines_ms=dict(baselines),
                                   feedback=feedback.correct_feedback(result.runtime_ms, baseline_ms))

    def _record_baselines(self, key: str, values: dict[str, float], summaries: dict[str, Any], slot: Any) -> None:
        """Write the baselines of ``key`` under the cache directory, a record for people: never read back."""
        path = os.path.join(self.cache_dir, "baselines", key + ".json")
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = path + f".tmp{os.getpid()}.{threading.get_ident()}"
            with open(tmp, "w") as f:
                json.dump({"baselines_ms": values, "timing": summaries, "device_name": self._device_names[slot],
                           "note": "a record only: kevin never reads this file back"}, f)
            os.replace(tmp, path)
        except OSError:
            pass

    def _compute_golden(self, task_src: str, slot: Any) -> _golden_run.Golden:
        """Run the golden process for one task on ``slot``; times the baseline unless known.

        It shares ``slot``'s gate while the reference runs and compiles and holds it alone only while the
        baselines are timed, so the goldens of a batch's tasks overlap each other and the correctness runs.
        """
        key = _resolve.sha256(task_src)[:16]
        need_baseline = self.config.measure_speed and self._baseline_key(task_src, slot) not in self._baselines
        gate = self._devices.gates[slot]
        return _golden_run.run_golden(
            [(key, task_src)], root=self._root, gpu=self._gpu_env(slot), config=self.config, seed=self._seed,
            baseline_keys=frozenset({key}) if need_baseline else frozenset(), shared=gate.shared,
            alone=functools.partial(gate.exclusive, priority=float("-inf")),  # a task's candidates all wait for it
            zygote=self._get_zygote(), permute=self._permute,
        )[key]


def _baseline_summaries(meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The golden process's timing summaries by baseline name, those with a median only."""
    summaries = dict(meta.get("baselines") or {})
    if "eager" not in summaries and meta.get("baseline"):
        summaries["eager"] = meta["baseline"]
    return {k: v for k, v in summaries.items() if isinstance(v, dict) and v.get("median_ms") is not None}


_DEFAULT: dict[tuple[str, SandboxConfig], Sandbox] = {}
_DEFAULT_LOCK = threading.Lock()


def evaluate(task: Any, candidate_src: str, *, device: str = "cuda", config: SandboxConfig | None = None) -> EvalResult:
    """Evaluate one candidate with a process-wide `Sandbox` for (device, config) (one secret seed per run)."""
    config = config or SandboxConfig()
    with _DEFAULT_LOCK:
        sandbox = _DEFAULT.get((device, config))
        if sandbox is None:
            sandbox = _DEFAULT[(device, config)] = Sandbox(device, config)
    return sandbox.evaluate(task, candidate_src)
