"""The trusted parent's side of one candidate: start its process, hand it a device, compare, decide.

Everything that decides the verdict happens here, in the caller's process: the comparison of the output
bytes (read from a safetensors file at a path the parent chose) with golden outputs held only in this
process's memory, the recheck of timed outputs, the wall-clock cross-check (timestamps taken here when
the worker's lines arrive), and the final status. A missing message, a malformed line, an early exit
(even ``os._exit(0)``), a signal or a hang is a failure: the only way to "correct" is a complete protocol
run whose outputs match.

Life of a `CandidateRun`: spawn (bound to one GPU) -> ``imported`` within the compile timeout (this is the
compile stage: the module's ``load_inline`` builds) -> ``go`` with the task's inputs once the device admits
correctness runs -> ``outputs`` -> compare -> ``time`` once the device is free of all other work ->
``timing_begin``, ``timing_end``, ``released`` (the timed loop over, its device memory freed: the device is then
shared with untimed work, still with no other timing) -> ``report`` -> recheck, wall-clock check -> verdict.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import shutil
import statistics
import tempfile
import time
from typing import Any, Callable, ContextManager, Sequence

from . import _golden_run, _process, compare, feedback
from kevin.sandbox.build import harness as _harness
from kevin.sandbox.static import symbols as _symbols
from .config import SandboxConfig
from .result import EvalResult

PHASE_TEXT = {
    "": "starting the sandbox process",
    "import_begin": "compiling and loading your program",
    "imported": "preparing the inputs",
    "model_ready": "running your kernel on the correctness inputs",
    "outputs": "running your kernel on the correctness inputs",
    "pinned": "preparing the timing",
    "timing_begin": "timing your kernel",
    "timing_end": "timing your kernel",
}


def torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _load_outputs(path: str, prefix: str, n: int) -> list[Any] | str:
    """The candidate's outputs for one set, read from bytes; a reason string when missing or malformed."""
    from safetensors import safe_open

    try:
        with safe_open(path, framework="pt") as f:
            keys = set(f.keys())
            wanted = [f"{prefix}.out{i}" for i in range(n)]
            missing = [i for i, k in enumerate(wanted) if k not in keys]
            if missing:
                return f"output {missing[0]} is missing or is not a tensor"
            extra = [k for k in keys if k.startswith(prefix + ".") and k not in wanted]
            if extra:
                return f"returned {n + len(extra)} outputs, expected {n}"
            return [f.get_tensor(k) for k in wanted]
    except Exception as exc:  # noqa: BLE001 - a missing or corrupt file is the candidate's failure
        return f"its outputs could not be read ({type(exc).__name__})"


MIN_TRIALS = 10  # kevin.sandbox.worker.timing.MIN_TRIALS (timing imports torch; the parent does not)


TIMING_MARKS = ("timing_begin", "timing_end", "released")
"""The timing's report lines that the harness sends exactly once, in this order (`released_in_order`)."""


def released_in_order(messages: Sequence[_process.Message], since: float) -> bool:
    """Whether the timing's marks so far are exactly ``TIMING_MARKS``, in order, each arrived at or after ``since``
    (when the parent sent "time"): only then is the hold shared before the report."""
    marks = [m for m in messages if m.event in TIMING_MARKS]
    return [m.event for m in marks] == list(TIMING_MARKS) and all(m.t >= since for m in marks)


def duplicated_marks(messages: Sequence[_process.Message]) -> str | None:
    """The first of ``TIMING_MARKS`` that arrived more than once (None: none did): the harness sends each once."""
    seen = [m.event for m in messages if m.event in TIMING_MARKS]
    return next((event for event in TIMING_MARKS if seen.count(event) > 1), None)


def report_median(report: dict[str, Any], timing_end: _process.Message | None,
                  config: SandboxConfig) -> tuple[float, str]:
    """(runtime ms, "") from the samples of a timing report, or (nan, what is wrong with it).

    The parent takes the median of the samples itself, and checks that their count is one the loop can end
    with (``min(n_trials, MIN_TRIALS)`` to ``n_trials``) and matches the calls that ``timing_end`` announced
    (``n_warmup`` more): a report whose count disagrees is malformed. A candidate that rewrites the worker's
    report consistently is not caught here (docs/threat-model.md, in-process forgery)."""
    samples = report.get("samples_ms")
    if not isinstance(samples, list) or not samples:
        return float("nan"), "no samples"
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < float("inf") for x in samples):
        return float("nan"), "a sample is not a finite time"
    n = len(samples)
    if not min(config.n_trials, MIN_TRIALS) <= n <= config.n_trials:
        return float("nan"), f"{n} samples for {config.n_trials} timed calls"
    calls = timing_end.data.get("n_calls") if timing_end is not None else None
    if calls != config.n_warmup + n:
        return float("nan"), f"{calls} calls announced for {config.n_warmup} warm-up calls and {n} samples"
    s = sorted(float(x) for x in samples)
    median = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    claimed = report.get("median_ms")
    if not isinstance(claimed, (int, float)) or abs(float(claimed) - median) > 1e-5 + 1e-6 * median:
        return float("nan"), f"a median of {claimed!r} ms for samples whose median is {median:.6g} ms"
    return median, ""


STAMP_SPAN_TOLERANCE_S = 0.1
"""How far the stamps' span of the timing loop may differ from the arrival times' before a step of the realtime
clock is assumed: the arrival times lag by milliseconds, while time daemons slew small offsets and step only
large ones (ntpd's default step threshold is 0.128 s)."""


def wall_check(messages: Sequence[_process.Message], reported_ms: float, n_calls: int, config: SandboxConfig,
               stamps: Sequence[_process.MarkStamp] = ()) -> dict[str, Any]:
    """Per-call time implied by the parent's own clocks, against the reported median.

    The timed calls run in segments, each led by `._loop.NULL_CALLS` calls of the same harness around a null
    call, and the worker marks each null block and each segment (`._loop`). For segment s, from the marks'
    send times (``stamps``, the kernel's, when they are exactly the marks in order over the same span; else the
    arrival times here, which lag whenever this process is slow to read: a null block of two calls read late
    looks short by the lag): implied_wall_s = (its time / its calls) - (its null block's time / NULL_CALLS): what a
    call cost beyond the harness, with the harness's cost measured in the same process a moment before, under
    the same load. The candidate's CPU clock, read here on each mark's arrival (`._process.cpu_clock`), gives
    implied_cpu_s the same way (the process's CPU-time clock; where it cannot be read, the larger of the tick count
    and the live threads' run time): waiting for a core on a
    loaded host costs wall time and no CPU time, while work done anywhere in the process costs CPU time. A
    segment's figure is max(min(wall, cpu), wall / 2) (the CPU figure only when no other process shares the
    candidate's session as its helper could (`_process.count_company`) and no child was reaped in between: a
    helper process works off its clock), so load can at most halve it. The check fails when every segment implies
    more than ``max_wall_ratio * reported + 0.5 ms + 3 * noise``, where noise is the standard deviation of the null
    blocks' per-call times over the segments (how much the harness's own cost wandered on this host meanwhile): a forged
    timer shows in every segment, while a load spike that stretched some segments leaves another within bounds.

    It also fails when the process has more native threads at the end of the loop than at its first mark: a
    thread started during the timed calls can work outside them.
    """
    from kevin.sandbox.worker import loop as _loop

    sizes = _loop.segment_sizes(n_calls)
    marks = [m for m in messages if m.event in _loop.MARKS]
    expected = [(e, s) for s in range(len(sizes)) for e in ("null", "calls")] + [("end", len(sizes))]
    if [(m.event, m.data.get("index")) for m in marks] != expected:
        return {"ok": False, "reason": "the timing loop's marks are missing or out of order"}
    sent, arrived = [x.sent for x in stamps], [m.t for m in marks]
    exact = ([(x.event, x.index) for x in stamps] == expected  # and no step of the realtime clock meanwhile:
             and all(b >= a for a, b in zip(sent, sent[1:]))
             and abs((sent[-1] - sent[0]) - (arrived[-1] - arrived[0])) <= STAMP_SPAN_TOLERANCE_S)
    at = sent if exact else arrived
    first, last = marks[0].cpu, marks[-1].cpu
    if first is not None and last is not None and first.threads is not None and last.threads is not None \
            and last.threads > first.threads:
        return {"ok": False, "threads": [first.threads, last.threads],
                "reason": f"your program started {last.threads - first.threads} native thread(s) while it was being "
                          "timed; work must finish inside the call"}

    counted = [m.cpu for m in messages if m.event in ("timing_begin", "timing_end")]
    alone = len(counted) == 2 and all(c is not None and c.company == 0 for c in counted)

    def spent(i: int, j: int) -> tuple[float, float | None]:
        """(wall ms, CPU ms or None) between marks i and j."""
        wall = (at[j] - at[i]) * 1e3
        x, y = marks[i].cpu, marks[j].cpu
        if not alone or x is None or y is None or x.reaped != y.reaped:
            return wall, None
        if x.process is not None and y.process is not None:  # precise: the tick count's 10 ms steps, taken as
            return wall, (y.process - x.process) * 1e3  # the larger, gave an honest kernel 1.2 ms a call it never ran
        cpu = y.ticks - x.ticks
        if x.live is not None and y.live is not None:
            cpu = max(cpu, y.live - x.live)
        return wall, cpu * 1e3

    nulls = [spent(2 * s, 2 * s + 1)[0] / _loop.NULL_CALLS for s in range(len(sizes))]
    noise = statistics.stdev(nulls) if len(nulls) > 1 else 0.0
    limit = config.max_wall_ratio * reported_ms + 0.5 + 3 * noise
    segments = []
    for s, size in enumerate(sizes):
        null_wall, null_cpu = (x / _loop.NULL_CALLS if x is not None else None for x in spent(2 * s, 2 * s + 1))
        call_wall, call_cpu = (x / size if x is not None else None for x in spent(2 * s + 1, 2 * s + 2))
        wall = call_wall - null_wall
        cpu = None if call_cpu is None or null_cpu is None else call_cpu - null_cpu
        implied = wall if cpu is None else max(min(wall, cpu), wall / 2)
        segments.append({"implied_ms": round(implied, 4), "implied_wall_ms": round(wall, 4),
                         "implied_cpu_ms": None if cpu is None else round(cpu, 4), "null_ms": round(null_wall, 4),
                         "limit_ms": round(limit, 4)})
    best = min(segments, key=lambda g: g["implied_ms"] - g["limit_ms"])
    ok = best["implied_ms"] <= best["limit_ms"]
    return {"ok": ok, "implied_ms": best["implied_ms"], "reported_ms": reported_ms, "segments": segments,
            "clock": "sent" if exact else "arrival",
            "reason": "" if ok else (f"the parent's clocks imply {best['implied_ms']:.4g} ms per call, but the kernel "
                                    f"reported {reported_ms:.4g} ms (the timer was tampered with or work escaped the "
                                    "timed region)")}


def _rules(msg: _process.Message) -> list[str]:
    """The worker's rule names of its violations (``"dynamic/<rule>"``; malformed ones dropped), for telemetry."""
    given = msg.data.get("rules", [])
    return sorted({r for r in given if isinstance(r, str) and _RULE.fullmatch(r)} if isinstance(given, list) else set())


_RULE = re.compile(r"dynamic/[a-z_]{1,40}")


def _violations(msg: _process.Message) -> list[str]:
    v = msg.data.get("violations", [])
    return [str(x) for x in v] if isinstance(v, list) else ["the report is malformed"]


def _output_bytes(golden: _golden_run.Golden, prefix: str) -> int:
    """Bytes of the golden outputs whose keys start with ``prefix`` ("set": the correctness sets, "re": the rechecks)."""
    return sum(t.nbytes for k, t in golden.outputs.items() if k.startswith(prefix))


def pinned_need(golden: _golden_run.Golden) -> int | None:
    """Page-locked bytes a candidate's worker holds once it pins ``golden``'s input sets and rechecks
    (`.worker.timing.pin`): each tensor rounded up to a power of two, as PyTorch's pinned allocator rounds it. None
    when the golden data does not give its tensors' sizes.

    >>> pinned_need(_golden_run.Golden("k", meta={"sets": [{"inputs": [{"kind": "tensor", "nbytes": 3000}]}]}))
    4096
    """
    entries = [e for part in ("sets", "rechecks") for s in golden.meta.get(part, []) for e in s["inputs"]
               if e["kind"] == "tensor"]
    if any("nbytes" not in e for e in entries):
        return None
    return sum(1 << (n - 1).bit_length() for n in (int(e["nbytes"]) for e in entries) if n > 0)


class CandidateRun:
    """One candidate's process, from spawn to verdict. Always `close` it (kills its process group)."""

    def __init__(self, src: str, *, backend: str, config: SandboxConfig, cache_dir: str, gpu: str | None = None,
                 arch: str = "", max_jobs: int = 1, zygote: _process.Zygote | None = None,
                 deadline: float = float("inf"), scratch_parent: str | None = None,
                 permute: _harness.Built | None = None):
        if backend == "cuda" and permute is None:  # nothing started yet
            raise ValueError("a CUDA candidate needs the sandbox's permutation kernel (harness.build_permute)")
        self.config = config
        self.deadline = deadline  # the batch's (monotonic): every wait ends by then as well as by its own limit
        self.backend = backend
        self.src = src
        self.scratch = tempfile.mkdtemp(prefix="kevin-run-", dir=scratch_parent)  # the Sandbox's root: swept if it dies
        self.t0 = time.monotonic()
        self.details: dict[str, Any] = {}
        cand = os.path.join(self.scratch, "candidate.py")
        with open(cand, "w") as f:
            f.write(src)
        self.ext_root = os.path.join(cache_dir, "ext")
        job = {
            "candidate": cand, "backend": backend, "ext_root": self.ext_root,
            "memory_limit": config.memory_limit_bytes, "measure_speed": config.measure_speed,
            "n_warmup": config.n_warmup, "n_trials": config.n_trials, "budget_s": config.timing_budget_s,
            "launch_cover_us": config.launch_cover_us, "inventory": config.kernel_inventory, "train_mode": config.train_mode,
            "object_cache": config.object_cache, "light_prelude": config.light_prelude,
            "niceness": _process.niceness(backend), "compile_niceness": _process.compile_niceness(backend),
        }
        if backend == "cuda":  # its timing's fresh inputs
            job["permute_lib"], job["permute_sha256"] = permute.path, permute.sha256
        extra = {"TORCH_EXTENSIONS_DIR": os.path.join(cache_dir, "ext", "other"), "CUDA_VISIBLE_DEVICES": gpu or "",
                 "MAX_JOBS": str(max(1, max_jobs))}
        if arch:
            extra["TORCH_CUDA_ARCH_LIST"] = arch
        self.worker = _process.Worker("kevin.sandbox.worker.candidate", job, scratch=self.scratch,
                                      env=_process.scrubbed_env(self.scratch, extra), zygote=zygote, marks=True)

    def close(self) -> None:
        self.worker.kill()
        shutil.rmtree(self.scratch, ignore_errors=True)

    # ---------------------------------------------------------------- stage 1: compile (import)
    def wait_imported(self, paused_s: Callable[[], float] | None = None, check: bool = True) -> EvalResult | None:
        """None once the module imported; else its compile_error / runtime_error / timeout result. ``paused_s()``:
        seconds the import was stopped by timings (the CPU backend), which do not count against its limit.
        ``check`` False: the caller checks the built libraries itself (`check_libraries`)."""
        start = time.monotonic()
        while True:
            deadline = min(start + self.config.compile_timeout_s + (paused_s() if paused_s else 0.0), self.deadline)
            msg = self.worker.wait_for(("imported",), deadline)
            # waited out its limit while alive: again, while timings stopped it for longer than accounted so far
            if msg is not None or paused_s is None or not self.worker.timed_out(deadline) \
                    or min(start + self.config.compile_timeout_s + paused_s(), self.deadline) <= deadline:
                break
        self.details["compile_seconds"] = round(time.monotonic() - self.t0, 3)
        if msg is not None and msg.event == "imported":
            return self._check_symbols() if check else None
        if msg is not None and msg.event == "error":
            log = str(msg.data.get("message", ""))
            self.details["compile_log"] = log[-8000:]
            return EvalResult("compile_error", feedback.compile_error_feedback(log, source=self.src), details=self.details)
        result = self._crash(msg, deadline, self.config.compile_timeout_s)
        if result.status == "timeout":
            self._clear_build_locks()
        return result

    def check_libraries(self, hold: Callable[[], ContextManager[Any]] | None) -> EvalResult | None:
        """`_check_symbols` inside ``hold()`` on the CPU backend: its ``nm`` runs on the cores a timing is measured
        on, so it holds the device like a correctness run."""
        with hold() if hold is not None and self.backend == "cpu" else contextlib.nullcontext():
            return self._check_symbols()

    def _check_symbols(self) -> EvalResult | None:
        """Reject a built extension that imports ATen compute or forbidden libc functions (:mod:`._symbols`)."""
        if not self.config.kernel_inventory:
            return None
        pid = getattr(self.worker.proc, "pid", None)
        paths = _symbols.mapped_extensions(pid, self.ext_root) if pid else []
        found, checked = _symbols.violations(paths, backend=self.backend)
        seen = self.details.get("symbol_check", {"libraries": [], "nm": True})  # checked up to three times
        self.details["symbol_check"] = {"libraries": sorted(set(seen["libraries"]) | {os.path.basename(p) for p in paths}),
                                        "nm": seen["nm"] and checked}
        if found:
            self.details["violations"] = found
            body = "\n".join(f"- {v}" for v in found[:8])
            return EvalResult("format_error", feedback.trim(f"Format error: your compiled extension was rejected.\n{body}"),
                              details=self.details)
        return None

    def _clear_build_locks(self) -> None:
        """Remove torch's build lock in the directories a killed build was using (else the next candidate
        with the same extension would wait on it until its own timeout)."""
        root = os.path.realpath(self.ext_root)
        for m in self.worker.messages:
            if m.event != "build_dir":
                continue
            path = os.path.realpath(str(m.data.get("path", "")))
            name = os.path.basename(path)
            if os.path.dirname(path) == root and len(name) == 32 and all(c in "0123456789abcdef" for c in name):
                try:
                    os.remove(os.path.join(path, "lock"))
                except OSError:
                    pass

    # ---------------------------------------------------------------- stage 2: run and decide
    def judge(self, golden: _golden_run.Golden, *, baseline_ms: float | None, reference_ms: float | None = None,
              checks: Callable[[], ContextManager[Any]] = contextlib.nullcontext,
              timing: Callable[[], ContextManager[Any]] = contextlib.nullcontext,
              compare_on: str = "cpu", pin_bytes: int = 0) -> EvalResult:
        """Run the correctness sets inside ``checks()`` and the timing inside ``timing()``, then decide.

        The Sandbox passes its device gate: correctness runs may share the device, a timed loop has it alone.
        ``reference_ms`` (the reference's eager time per call) bounds the correctness run
        (`SandboxConfig.checks_timeout_s`). The outputs are compared on ``compare_on`` (the parent's own copies
        of both sides, moved there): the correctness sets' inside ``checks()``, the timed calls' rechecks inside
        ``timing()``, each before the device is handed on; so are the built-library checks after each on the CPU
        backend, whose ``nm`` runs on the cores a timing is measured on (`check_libraries`). ``pin_bytes`` (CUDA): the
        page-locked host memory the worker may take for its inputs while its outputs are compared (0: none).
        """
        config, cpu = self.config, self.backend == "cpu"
        marks: dict[str, float] = {}
        self.details["marks"] = marks
        inputs = os.path.join(self.scratch, "inputs.safetensors")
        _golden_run.hand_over(golden, inputs)
        spec = {
            "inputs": inputs,
            "sets": [s["inputs"] for s in golden.meta["sets"]],
            "rechecks": [r["inputs"] for r in golden.meta["rechecks"]] if config.measure_speed else [],
            "init_inputs": golden.meta["init_inputs"], "init_seed": golden.meta["init_seed"],
            # the reference's output sizes (not secret): past them, a failed write of the outputs is the kernel's
            "output_bytes": _output_bytes(golden, "set"), "recheck_bytes": _output_bytes(golden, "re"),
            "pin_bytes": 0 if cpu else int(pin_bytes),
        }
        self.details["set_names"] = list(golden.meta.get("set_names", []))
        with checks():
            t_go = marks["checks"] = time.monotonic()
            self.worker.send("go " + json.dumps(spec))
            limit = config.checks_timeout_s(reference_ms, len(spec["sets"]))
            deadline = min(time.monotonic() + limit, self.deadline)
            msg = self.worker.wait_for(("outputs",), deadline)
            marks["checked"] = time.monotonic()
            if msg is None or msg.event != "outputs":  # killed before the device is handed on
                return self._crash(msg, deadline, limit)
            # What the parent does with the outputs on the device a timing is measured on (comparisons on the GPU,
            # or anything on the CPU backend's cores, the built-library check's nm included) runs inside this hold,
            # which no timing overlaps: released and asked for again, a hold waits behind every timing queued
            # meanwhile. Decided below in the usual order: libraries, PyTorch operators, violations, outputs.
            symbols = self._check_symbols() if cpu else None
            rejected = self._outputs_rejected(msg) if symbols is None else None
            verdict = self._compare_sets(golden, compare_on) if symbols is None and rejected is None else None
            marks["compared"] = time.monotonic()
        self.details["seconds_to_outputs"] = round(marks["checked"] - t_go, 3)
        # again now that the forward has run: an ``imported`` line forged before the real import (the report
        # pipe is the candidate's to write) would have had the libraries checked before any was loaded
        failed = symbols if cpu else self._check_symbols()
        if failed is not None:
            return failed
        if rejected is not None:
            extra, status, message = rejected
            self.details.update(extra)
            return EvalResult(status, message, details=self.details)
        if not verdict.ok:
            message = feedback.incorrect_feedback(verdict.reason, verdict.max_abs_error, verdict.max_rel_error)
            return EvalResult("incorrect", message, max_abs_error=verdict.max_abs_error,
                              max_rel_error=verdict.max_rel_error, details=self.details)
        if not config.measure_speed:
            return EvalResult("correct", feedback.correct_feedback(None, None), max_abs_error=verdict.max_abs_error,
                              max_rel_error=verdict.max_rel_error, details=self.details)

        if spec["pin_bytes"]:  # the worker pins the timing's inputs while the outputs are compared; the hold is asked
            limit = config.run_timeout_s  # for once they are, so their copy to the device inside it runs at full speed
            deadline = min(time.monotonic() + limit, self.deadline)
            msg = self.worker.wait_for(("pinned",), deadline)
            if msg is None or msg.event != "pinned":
                return self._crash(msg, deadline, limit, phase="preparing the timing")
        with timing() as hold:
            t_time = marks["timing"] = time.monotonic()
            self.worker.send("time")
            deadline = min(time.monotonic() + config.run_timeout_s, self.deadline)
            msg = self.worker.wait_for(("released", "report"), deadline)
            if msg is not None and msg.event == "released":
                # The timed loop is over and the worker gave back its device memory: what follows (its rechecks
                # written out and compared) shares the device with correctness runs and a decoding policy, though
                # with no other timing. Only marks in the harness's order, all sent after "time", share it: a mark
                # forged to share early is sent again by the harness, and the duplicate is rejected below.
                if released_in_order(self.worker.messages, t_time) and hasattr(hold, "share"):
                    marks["shared"] = time.monotonic()
                    hold.share()
                msg = self.worker.wait_for(("report",), deadline)
            marks["timed"] = time.monotonic()
            if msg is None or msg.event != "report":  # killed before the device is handed on
                return self._crash(msg, deadline, config.run_timeout_s)
            # Likewise inside this hold (asked for again, the device came back only after every timing waiting by
            # then): the rechecks' comparison, and on the CPU backend
            # the built-library check, again after timing, so that a library loaded late is checked too.
            symbols = self._check_symbols() if cpu else None
            violations = _violations(msg)
            recheck_failure = self._compare_rechecks(golden, compare_on) if symbols is None and not violations else None
            marks["rechecked"] = time.monotonic()
        self.details["run_seconds"] = round(marks["checked"] - t_go + marks["timed"] - t_time, 3)

        def bad(reason: str) -> EvalResult:
            return EvalResult("incorrect", feedback.incorrect_feedback(reason), max_abs_error=verdict.max_abs_error,
                              max_rel_error=verdict.max_rel_error, details=self.details)

        failed = symbols if cpu else self._check_symbols()
        if failed is not None:
            return failed
        report = msg.data.get("timing") if isinstance(msg.data.get("timing"), dict) else {}
        self.details["timing"] = report
        if violations:
            self.details["violations"] = violations
            self.details["rules"] = _rules(msg)
            return bad(violations[0])
        if recheck_failure is not None:
            reason, rules = recheck_failure
            if rules:
                self.details["rules"] = rules
            return bad(reason)
        if duplicated := duplicated_marks(self.worker.messages):
            return bad(f"the timing's {duplicated} mark was sent more than once (a forged report line)")
        events = {m.event: m for m in self.worker.messages}
        median, problem = report_median(report, events.get("timing_end"), config)
        if problem:
            return bad(f"the timing report is malformed: {problem}")
        for name in ("timing_begin", "timing_end"):  # the timed loop itself, inside "timing" .. "timed"
            if name in events:
                marks[name] = events[name].t
        wall = wall_check(self.worker.messages, float(median), len(report["samples_ms"]), config, self.worker.stamps)
        if wall.get("clock") == "sent":  # what the arrival times alone would have said (telemetry, not the verdict)
            by_arrival = wall_check(self.worker.messages, float(median), len(report["samples_ms"]), config)
            wall["by_arrival"] = {k: by_arrival.get(k) for k in ("ok", "implied_ms")}
        self.details["wall_check"] = wall
        if not wall["ok"]:
            return bad(wall["reason"])
        runtime = max(float(median), 1e-6)
        return EvalResult("correct", feedback.correct_feedback(runtime, baseline_ms), runtime_ms=runtime,
                          baseline_ms=baseline_ms, max_abs_error=verdict.max_abs_error,
                          max_rel_error=verdict.max_rel_error, details=self.details)

    def _compare_sets(self, golden: _golden_run.Golden, device: str = "cpu") -> compare.Comparison:
        out_path = os.path.join(self.scratch, "outputs.safetensors")
        comparisons = []
        for k, entry in enumerate(golden.meta["sets"]):
            label = f"input set {k} ({golden.meta['set_names'][k]})"
            outs = _load_outputs(out_path, f"set{k}", entry["n_outputs"])
            if isinstance(outs, str):
                comparisons.append(compare.Comparison(False, f"{label}: {outs}"))
                break
            refs = golden.set_outputs(f"set{k}", entry["n_outputs"])
            comparisons.append(compare.compare_outputs(outs, refs, atol=self.config.atol, rtol=self.config.rtol,
                                                       label=label, device=device))
            if not comparisons[-1].ok:
                break
        self.details["per_set"] = [{"ok": c.ok, "max_abs_error": c.max_abs_error, "max_rel_error": c.max_rel_error}
                                   for c in comparisons]
        return compare.combine(comparisons)

    def _outputs_rejected(self, msg: _process.Message) -> tuple[dict[str, Any], str, str] | None:
        """How a correctness run's own report rejects it, as (details to add, status, feedback): PyTorch compute
        operators in its forward (``format_error``) or a violation its process saw (``incorrect``); None when its
        outputs are to be compared. Nothing is recorded here: a built-library verdict may still come first."""
        torch_ops = msg.data.get("torch_ops")
        if self.config.kernel_inventory and (not isinstance(torch_ops, dict) or torch_ops):
            names = ", ".join(f"aten.{op}" for op in sorted(torch_ops or {})[:6]) or "(malformed inventory)"
            return {"torch_ops": torch_ops}, "format_error", feedback.trim(
                f"Format error: your forward called PyTorch operators ({names}) instead of doing the work in your "
                "own kernel. Only allocation, copies and views may go through PyTorch.")
        violations = _violations(msg)
        if violations:
            return ({"violations": violations, "rules": _rules(msg)}, "incorrect",
                    feedback.incorrect_feedback(violations[0]))
        return None

    def _compare_rechecks(self, golden: _golden_run.Golden, compare_on: str) -> tuple[str, list[str]] | None:
        """The timed calls' recheck outputs against the golden ones (on ``compare_on``): the first failure's reason
        and rules, or None when all match."""
        config = self.config
        re_path = os.path.join(self.scratch, "rechecks.safetensors")
        for r, entry in enumerate(golden.meta["rechecks"]):
            outs = _load_outputs(re_path, f"re{r}", entry["n_outputs"])
            if isinstance(outs, str):
                return f"a timed call's output was not recorded: {outs}", []
            c = compare.compare_outputs(outs, golden.set_outputs(f"re{r}", entry["n_outputs"]), atol=config.atol,
                                        rtol=config.rtol, label="a timed call (recheck)", device=compare_on)
            if not c.ok:
                reason = c.reason + "; the outputs of timed calls must be as correct as the checked ones"
                return reason, ["dynamic/recheck"]
        return None

    def _crash(self, msg: _process.Message | None, deadline: float, limit_s: float,
               phase: str | None = None) -> EvalResult:
        """The status for a run that ended without the message it owed: error, garbage, timeout or death. ``phase``:
        what the run was doing, when its last message does not say."""
        last = next((m.event for m in reversed(self.worker.messages) if m.event in PHASE_TEXT), "")
        phase = phase or PHASE_TEXT[last]
        details = self.details
        if msg is not None and msg.event == "error":
            where = str(msg.data.get("phase", "unknown"))
            text = str(msg.data.get("message", ""))
            details["traceback"] = text
            if msg.data.get("out_of_memory") is True:
                details["out_of_memory"] = where
            if where == "import":
                return EvalResult("compile_error", feedback.compile_error_feedback(text, source=self.src), details=details)
            if where == "harness":  # the harness's own files or kernel: not the kernel's failure
                details["internal_error"] = text
                cause = text.strip().splitlines()[-1][-200:] if text.strip() else "an OS error"
                message = f"the sandbox failed internally while {phase} ({cause}); not your kernel's fault."
                return EvalResult("runtime_error", feedback.runtime_error_feedback(message), details=details)
            return EvalResult("runtime_error", feedback.runtime_error_feedback(f"while {phase} ({where}):\n{text[-900:]}"),
                              details=details)
        if msg is not None and msg.event == "garbage":
            return EvalResult("runtime_error", feedback.runtime_error_feedback(
                "your program wrote to the sandbox's private report channel; that is not allowed"), details=details)
        if self.worker.timed_out(deadline):
            self.worker.kill()
            return EvalResult("timeout", feedback.timeout_feedback(phase, limit_s), details=details)
        rc = self.worker.finish(time.monotonic() + 10)
        tail = self.worker.log_tail(1500)
        details["log_tail"] = tail
        return EvalResult("runtime_error", feedback.runtime_error_feedback(
            f"the process ended while {phase} ({_process.describe_exit(rc)}) without finishing the checks.\n{tail[-700:]}"),
            details=details)
