"""The trusted parent's side of one candidate: start its process, hand it a device, compare, decide.

Everything that decides the verdict happens here, in the caller's process: the comparison of the output
bytes (read from a safetensors file at a path the parent chose) with golden outputs held only in this
process's memory, the recheck of timed outputs, the wall-clock cross-check (timestamps taken here when
the worker's lines arrive), and the final status. A missing message, a malformed line, an early exit
(even ``os._exit(0)``), a signal or a hang is a failure: the only way to "correct" is a complete protocol
run whose outputs match.

Life of a `CandidateRun`: spawn (bound to one GPU) -> ``imported`` within the compile timeout (this is the
compile stage: the module's ``load_inline`` builds) -> ``go`` with the task's inputs once the device admits
correctness runs -> ``outputs`` -> compare -> ``time`` once the device is free of all other work -> ``report``
-> recheck, wall-clock check -> verdict.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shutil
import tempfile
import time
from typing import Any, Callable, ContextManager

from . import _golden_run, _process, _symbols, compare, feedback
from .config import SandboxConfig
from .result import EvalResult

PHASE_TEXT = {
    "": "starting the sandbox process",
    "import_begin": "compiling and loading your program",
    "imported": "preparing the inputs",
    "model_ready": "running your kernel on the correctness inputs",
    "outputs": "running your kernel on the correctness inputs",
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


MIN_TRIALS = 10  # kevin.sandbox.timing.MIN_TRIALS (timing imports torch; the parent does not)


def report_median(report: dict[str, Any], timing_end: _process.Message | None,
                  config: SandboxConfig) -> tuple[float, str]:
    """(runtime ms, "") from the samples of a timing report, or (nan, what is wrong with it).

    The parent takes the median of the samples itself, and checks that their count is one the loop can end
    with (``min(n_trials, MIN_TRIALS)`` to ``n_trials``) and matches the calls that ``timing_end`` announced
    (``n_warmup`` more), which the wall-clock check divides by: a report that claims more calls than it has
    samples would shrink the per-call wall time. A candidate that rewrites the worker's report consistently
    is not caught here (the module docstring: in-process forgery)."""
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


def wall_check(messages: dict[str, _process.Message], reported_ms: float, loop_overhead_ms: float,
               config: SandboxConfig, backend: str = "cuda", loop_overhead_cpu_ms: float | None = None) -> dict[str, Any]:
    """Per-call time implied by the parent's own clocks, against the reported median.

    implied = (t_arrival(timing_end) - t_arrival(timing_begin)) / calls - loop_overhead, where the loop
    overhead was measured by the golden process running the identical loop around a trusted copy.
    Fails when implied > max_wall_ratio * reported + (0.5 ms + 25% of the loop overhead): generous, because
    the host side of the loop slows down when other processes (parallel compiles) compete for the CPU.

    On the CPU backend the candidate's own CPU clock, read by the parent on the same two arrivals
    (`._process.cpu_clock`), gives a second figure: max(change of the tick count, change of the live threads'
    run time) / calls - the loop's CPU overhead. Work done outside the timed calls (in the loop, or in another
    thread) costs CPU time as well as wall time, while waiting for a core on a loaded host costs only wall time,
    so the check takes max(min(wall, cpu), wall / 2): a loaded host can at most halve the wall figure. The CPU
    figure is used only when nothing else could have worked for the process: no other process in its session
    or with it as parent at either reading, and no waited-for child's CPU time between them. On CUDA, work can
    escape to the GPU, where the host's CPU clock does not see it: the wall clock alone decides.
    """
    if "timing_begin" not in messages or "timing_end" not in messages:
        return {"ok": False, "reason": "the timing messages are incomplete"}
    begin, end = messages["timing_begin"], messages["timing_end"]
    calls = max(1, int(end.data.get("n_calls", 1)))
    implied_wall = (end.t - begin.t) * 1e3 / calls - loop_overhead_ms
    implied_cpu = None
    a, b = begin.cpu, end.cpu
    if backend == "cpu" and a is not None and b is not None and a.company == b.company == 0 and a.reaped == b.reaped:
        spent = b.ticks - a.ticks
        if a.live is not None and b.live is not None:
            spent = max(spent, b.live - a.live)
        overhead = loop_overhead_ms if loop_overhead_cpu_ms is None else loop_overhead_cpu_ms
        implied_cpu = spent * 1e3 / calls - overhead
    implied = implied_wall if implied_cpu is None else max(min(implied_wall, implied_cpu), implied_wall / 2)
    slack = 0.5 + 0.25 * loop_overhead_ms
    ok = implied <= config.max_wall_ratio * reported_ms + slack
    return {"ok": ok, "implied_ms": implied, "implied_wall_ms": implied_wall, "implied_cpu_ms": implied_cpu,
            "reported_ms": reported_ms, "loop_overhead_ms": loop_overhead_ms,
            "reason": "" if ok else (f"the parent's clocks imply {implied:.4g} ms per call, but the kernel reported "
                                    f"{reported_ms:.4g} ms (the timer was tampered with or work escaped the timed region)")}


def _violations(msg: _process.Message) -> list[str]:
    v = msg.data.get("violations", [])
    return [str(x) for x in v] if isinstance(v, list) else ["the report is malformed"]


class CandidateRun:
    """One candidate's process, from spawn to verdict. Always `close` it (kills its process group)."""

    def __init__(self, src: str, *, backend: str, config: SandboxConfig, cache_dir: str, gpu: str | None = None,
                 arch: str = "", max_jobs: int = 1, zygote: _process.Zygote | None = None):
        self.config = config
        self.backend = backend
        self.scratch = tempfile.mkdtemp(prefix="kevin-run-")
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
        }
        extra = {"TORCH_EXTENSIONS_DIR": os.path.join(cache_dir, "ext", "other"), "CUDA_VISIBLE_DEVICES": gpu or "",
                 "MAX_JOBS": str(max(1, max_jobs))}
        if arch:
            extra["TORCH_CUDA_ARCH_LIST"] = arch
        self.worker = _process.Worker("kevin.sandbox._candidate", job, scratch=self.scratch,
                                      env=_process.scrubbed_env(self.scratch, extra), zygote=zygote)

    def close(self) -> None:
        self.worker.kill()
        shutil.rmtree(self.scratch, ignore_errors=True)

    # ---------------------------------------------------------------- stage 1: compile (import)
    def wait_imported(self) -> EvalResult | None:
        """None once the module imported; else its compile_error / runtime_error / timeout result."""
        deadline = time.monotonic() + self.config.compile_timeout_s
        msg = self.worker.wait_for(("imported",), deadline)
        self.details["compile_seconds"] = round(time.monotonic() - self.t0, 3)
        if msg is not None and msg.event == "imported":
            return self._check_symbols()
        if msg is not None and msg.event == "error":
            log = str(msg.data.get("message", ""))
            self.details["compile_log"] = log[-8000:]
            return EvalResult("compile_error", feedback.compile_error_feedback(log), details=self.details)
        result = self._crash(msg, deadline, self.config.compile_timeout_s)
        if result.status == "timeout":
            self._clear_build_locks()
        return result

    def _check_symbols(self) -> EvalResult | None:
        """Reject a built extension that imports ATen compute or forbidden libc functions (:mod:`._symbols`)."""
        if not self.config.kernel_inventory:
            return None
        pid = getattr(self.worker.proc, "pid", None)
        paths = _symbols.mapped_extensions(pid, self.ext_root) if pid else []
        found, checked = _symbols.violations(paths, backend=self.backend)
        self.details["symbol_check"] = {"libraries": [os.path.basename(p) for p in paths], "nm": checked}
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
    def judge(self, golden: _golden_run.Golden, *, baseline_ms: float | None,
              checks: Callable[[], ContextManager[Any]] = contextlib.nullcontext,
              timing: Callable[[], ContextManager[Any]] = contextlib.nullcontext) -> EvalResult:
        """Run the correctness sets inside ``checks()`` and the timing inside ``timing()``, then decide.

        The Sandbox passes its device gate: correctness runs may share the device, a timing has it alone.
        """
        config = self.config
        marks: dict[str, float] = {}
        self.details["marks"] = marks
        inputs = os.path.join(self.scratch, "inputs.safetensors")
        shutil.copyfile(golden.inputs_path, inputs)
        spec = {
            "inputs": inputs,
            "sets": [s["inputs"] for s in golden.meta["sets"]],
            "rechecks": [r["inputs"] for r in golden.meta["rechecks"]] if config.measure_speed else [],
            "init_inputs": golden.meta["init_inputs"], "init_seed": golden.meta["init_seed"],
        }
        self.details["set_names"] = list(golden.meta.get("set_names", []))
        with checks():
            t_go = marks["checks"] = time.monotonic()
            self.worker.send("go " + json.dumps(spec))
            deadline = time.monotonic() + config.run_timeout_s
            msg = self.worker.wait_for(("outputs",), deadline)
            marks["checked"] = time.monotonic()
            if msg is None or msg.event != "outputs":  # killed before the device is handed on
                return self._crash(msg, deadline, config.run_timeout_s)
        self.details["seconds_to_outputs"] = round(time.monotonic() - t_go, 3)
        torch_ops = msg.data.get("torch_ops")
        if config.kernel_inventory and (not isinstance(torch_ops, dict) or torch_ops):
            self.details["torch_ops"] = torch_ops
            names = ", ".join(f"aten.{op}" for op in sorted(torch_ops or {})[:6]) or "(malformed inventory)"
            return EvalResult("format_error", feedback.trim(
                f"Format error: your forward called PyTorch operators ({names}) instead of doing the work in your "
                "own kernel. Only allocation, copies and views may go through PyTorch."), details=self.details)
        violations = _violations(msg)
        if violations:
            self.details["violations"] = violations
            return EvalResult("incorrect", feedback.incorrect_feedback(violations[0]), details=self.details)
        # On the CPU backend the parent's comparisons run on the cores a timing is measured on: they hold the
        # device like a correctness run, so they never overlap a timing (on CUDA they run beside it).
        comparing = checks if self.backend == "cpu" else contextlib.nullcontext
        with comparing():
            verdict = self._compare_sets(golden)
        if not verdict.ok:
            message = feedback.incorrect_feedback(verdict.reason, verdict.max_abs_error, verdict.max_rel_error)
            return EvalResult("incorrect", message, max_abs_error=verdict.max_abs_error,
                              max_rel_error=verdict.max_rel_error, details=self.details)
        if not config.measure_speed:
            return EvalResult("correct", feedback.correct_feedback(None, None), max_abs_error=verdict.max_abs_error,
                              max_rel_error=verdict.max_rel_error, details=self.details)

        marks["compared"] = time.monotonic()
        with timing():
            t_time = marks["timing"] = time.monotonic()
            self.worker.send("time")
            deadline = time.monotonic() + config.run_timeout_s
            msg = self.worker.wait_for(("report",), deadline)
            marks["timed"] = time.monotonic()
            if msg is None or msg.event != "report":  # killed before the device is handed on
                return self._crash(msg, deadline, config.run_timeout_s)
        self.details["run_seconds"] = round(marks["checked"] - t_go + marks["timed"] - t_time, 3)

        def bad(reason: str) -> EvalResult:
            return EvalResult("incorrect", feedback.incorrect_feedback(reason), max_abs_error=verdict.max_abs_error,
                              max_rel_error=verdict.max_rel_error, details=self.details)

        report = msg.data.get("timing") if isinstance(msg.data.get("timing"), dict) else {}
        self.details["timing"] = report
        violations = _violations(msg)
        if violations:
            self.details["violations"] = violations
            return bad(violations[0])
        re_path = os.path.join(self.scratch, "rechecks.safetensors")
        with comparing():
            for r, entry in enumerate(golden.meta["rechecks"]):
                outs = _load_outputs(re_path, f"re{r}", entry["n_outputs"])
                if isinstance(outs, str):
                    return bad(f"a timed call's output was not recorded: {outs}")
                c = compare.compare_outputs(outs, golden.set_outputs(f"re{r}", entry["n_outputs"]),
                                            atol=config.atol, rtol=config.rtol, label="a timed call (recheck)")
                if not c.ok:
                    return bad(c.reason + "; the outputs of timed calls must be as correct as the checked ones")
        events = {m.event: m for m in self.worker.messages}
        median, problem = report_median(report, events.get("timing_end"), config)
        if problem:
            return bad(f"the timing report is malformed: {problem}")
        for name in ("timing_begin", "timing_end"):  # the timed loop itself, inside "timing" .. "timed"
            if name in events:
                marks[name] = events[name].t
        cpu_overhead = golden.meta.get("loop_overhead_cpu_ms")
        wall = wall_check(events, float(median), float(golden.meta.get("loop_overhead_ms", 0.0)), config, self.backend,
                          None if cpu_overhead is None else float(cpu_overhead))
        self.details["wall_check"] = wall
        if not wall["ok"]:
            return bad(wall["reason"])
        runtime = max(float(median), 1e-6)
        return EvalResult("correct", feedback.correct_feedback(runtime, baseline_ms), runtime_ms=runtime,
                          baseline_ms=baseline_ms, max_abs_error=verdict.max_abs_error,
                          max_rel_error=verdict.max_rel_error, details=self.details)

    def _compare_sets(self, golden: _golden_run.Golden) -> compare.Comparison:
        out_path = os.path.join(self.scratch, "outputs.safetensors")
        comparisons = []
        for k, entry in enumerate(golden.meta["sets"]):
            label = f"input set {k} ({golden.meta['set_names'][k]})"
            outs = _load_outputs(out_path, f"set{k}", entry["n_outputs"])
            if isinstance(outs, str):
                comparisons.append(compare.Comparison(False, f"{label}: {outs}"))
                break
            refs = golden.set_outputs(f"set{k}", entry["n_outputs"])
            comparisons.append(compare.compare_outputs(outs, refs, atol=self.config.atol, rtol=self.config.rtol, label=label))
            if not comparisons[-1].ok:
                break
        self.details["per_set"] = [{"ok": c.ok, "max_abs_error": c.max_abs_error, "max_rel_error": c.max_rel_error}
                                   for c in comparisons]
        return compare.combine(comparisons)

    def _crash(self, msg: _process.Message | None, deadline: float, limit_s: float) -> EvalResult:
        """The status for a run that ended without the message it owed: error, garbage, timeout or death."""
        last = next((m.event for m in reversed(self.worker.messages) if m.event in PHASE_TEXT), "")
        phase = PHASE_TEXT[last]
        details = self.details
        if msg is not None and msg.event == "error":
            where = str(msg.data.get("phase", "unknown"))
            text = str(msg.data.get("message", ""))
            details["traceback"] = text
            if where == "import":
                return EvalResult("compile_error", feedback.compile_error_feedback(text), details=details)
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
