"""`SandboxConfig`: every knob of the evaluator in one frozen record. Standard library only."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any


def default_cache_dir() -> str:
    """``$KEVIN_CACHE_DIR`` if set, else ``~/.cache/kevin``."""
    return os.environ.get("KEVIN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kevin")


RULES: dict[str, dict[str, Any]] = {
    "kevin": {"tolerance": 1e-3, "nn_modules_in_init": False},
    "kernelbench": {"tolerance": 1e-2, "nn_modules_in_init": True},
}
"""The named rule sets: what differs between them (everything else of the sandbox is shared)."""

BASELINES = ("eager", "tf32", "compile")


@dataclass(frozen=True)
class SandboxConfig:
    """How a candidate is checked and timed.

    Correctness: ``n_input_sets`` sets are drawn from a secret seed (the task's own distribution, then a
    signed, a scaled and a heavy-tailed variant, where the reference stays finite on them). An output
    element passes when ``|out - ref| <= atol * rms(ref) + rtol * |ref|``: both tolerances are relative
    to the magnitude of the reference, so a tiny reference cannot be matched by zeros (hack B1).

    >>> SandboxConfig(n_input_sets=5).n_input_sets
    5
    """

    rules: str = "kevin"
    """which rule set judges a candidate: "kevin" (the paper's: no ``torch.nn`` modules or PyTorch compute in
    ``ModelNew``, tolerances 1e-3) or "kernelbench" (KernelBench's: ``torch.nn`` modules may hold weights in
    ``__init__`` as long as their forward never runs, tolerances 1e-2); the dynamic gate is the same under both"""
    n_input_sets: int = 4
    """correctness input sets per candidate, the variants in turn (task, signed, scaled, heavy-tailed): at least 4,
    since fewer would drop the heavy-tailed set, the defence against kernels that compute on a subsample"""
    atol: float | None = None
    """absolute tolerance, in units of the reference's RMS value; None = the rule set's (1e-3, kernelbench 1e-2)"""
    rtol: float | None = None
    """relative tolerance, per element; None = the rule set's (1e-3, kernelbench 1e-2)"""
    n_warmup: int = 5
    """untimed calls before timing"""
    n_trials: int = 50
    """timed calls (the median is reported); fewer if ``timing_budget_s`` runs out after 10"""
    timing_budget_s: float = 10.0
    """wall-clock budget of the timed calls of one candidate"""
    n_rechecks: int = 3
    """timed calls, at secret positions, whose outputs are compared with golden outputs (hack C5/D4/D5)"""
    compile_timeout_s: float = 180.0
    """seconds for importing the candidate module (the load_inline build) once it may start compiling"""
    run_timeout_s: float = 60.0
    """seconds for each of the candidate's two runs on its device: the correctness sets, then the timing"""
    checks_floor_s: float = 10.0
    """with a measured reference: seconds a correctness run may take beyond ``checks_slowdown`` times the reference's
    own time on the same sets (process start, device setup, module load); see `checks_timeout_s`"""
    checks_slowdown: float = 100.0
    """how many times slower than the reference a kernel may run its correctness sets and still get a verdict"""
    batch_deadline_s: float | None = None
    """seconds from the start of `Sandbox.evaluate_many` after which every unfinished candidate is stopped and
    judged ``timeout`` (None = each candidate is bounded by its own limits only); the call's ``deadline_s``
    overrides it"""
    golden_timeout_s: float = 300.0
    """seconds for the golden process (reference outputs and baseline timing)"""
    memory_limit_bytes: int | None = 8 * 2**30
    """RLIMIT_AS of candidate processes on the CPU backend (None = no limit; not applied with CUDA)"""
    measure_speed: bool = True
    """time correct candidates and their baseline; False = correctness only (runtime_ms stays None)"""
    allow_libraries: bool = False
    """let C++/CUDA sources call cuBLAS / cuDNN (passed to the static checks)"""
    static_checks: bool = True
    """run `check_format` first; False only to test the dynamic gate on its own"""
    prefork: bool = True
    """fork candidate processes from a zygote that has torch imported and never touched the CUDA driver
    (saves seconds per candidate); False = a new interpreter per candidate. If the zygote cannot start, or a
    probe fork could not use CUDA, the sandbox falls back to new interpreters (``details["forked"]``)"""
    max_golden_tasks: int = 16
    """tasks whose golden data (inputs on disk, outputs in memory) a Sandbox keeps; older ones are recomputed"""
    max_golden_bytes: int | None = 24 << 30
    """bytes of golden data (the inputs files on disk and the outputs in the parent's memory) a Sandbox keeps:
    past it, the least recently used tasks that no pending candidate needs (queued ones included) are dropped (at
    KernelBench sizes one task holds up to 7 GB, and 13 tasks filled a 64 GB disk). None = only ``max_golden_tasks``
    bounds it"""
    min_free_disk_bytes: int | None = 2 << 30
    """free bytes the Sandbox leaves on the disk of its scratch directory: below it, golden data no pending candidate
    needs is dropped, and each task's golden is computed again for every use (slow; said once in the log).
    Candidates write their outputs there too, up to gigabytes each at KernelBench sizes. None = no reserve"""
    pinned_host_bytes: int = 16 << 30
    """CUDA: page-locked host memory that the candidates waiting for their timings may hold, all together. A candidate
    whose input sets and rechecks fit what is left pins them while its outputs are compared, so that their copy to
    the device inside its timing's hold runs at full speed; the others copy from pageable memory. 0 = never pin"""
    kernel_inventory: bool = True
    """reject a forward that dispatches PyTorch compute operators (from Python or C++): hacks A1-A5"""
    workers: int = max(1, (os.cpu_count() or 1))
    """compile processes running at once in `Sandbox.evaluate_many`"""
    precompiled_header: bool | None = None
    """build a precompiled <torch/extension.h> (``._pch``, ~0.8 GB per flag set, built once per toolchain in the
    cache) and compile candidates' ``main.cpp`` against it (on the CPU: a whole build's, not the bindings of a kernel
    compiled apart, and the kernel's light prelude precompiled too); None = on for the CUDA backend only. On the CPU
    backend the build (about a minute, once per cache) runs niced beside the compiles and is stopped by timings like
    them: the training recipes turn it on there, a short-lived CPU sandbox is better without it"""
    object_cache: bool = True
    """compile each distinct ``main.cpp`` once across build directories (``._objcache``): candidates that declare
    the same functions with other kernels share the compiled bindings. False = every build compiles its own"""
    light_prelude: bool = True
    """compile a CUDA unit first with a lighter prelude than load_inline's ``<torch/types.h>`` (the tensor class,
    dispatch macros and allocation factories: ``kevin.sandbox.build.extension.light_arguments``), and again as
    written when it does not compile. False = the full prelude always"""
    parallel_checks: bool = True
    """let candidates on one device run their (untimed) correctness sets at the same time; timings always run
    alone on their device. False = a correctness run has its device alone too (the device is still handed on
    between a candidate's correctness run and its timing)"""
    gpu_sharers: int | None = 4
    """on the CUDA backend, at most this many processes share one GPU at once (candidates' correctness runs, golden
    reference runs, the parent's comparisons); each may hold gigabytes (the NaN-filled allocator cache, its input
    sets at KernelBench sizes), and dozens at once ran a 141 GB GPU out of memory. None = no limit"""
    reuse_verdicts: bool = True
    """a candidate byte-identical to one judged for the same task since the last `Sandbox.forget_verdicts` (each
    rollout calls it) gets that verdict again, whatever it was (marked ``details["reused"]``; a copy that arrives
    meanwhile waits for it): policies repeat kernels often, and a repeat costs a compile, a correctness run and a
    timing (docs/threat-model.md, "Reused verdicts"). False = every candidate is judged afresh (to measure the
    sandbox's own repeatability)"""
    cache_dir: str | None = None
    """compiled extensions (and baseline timings, written as a record, never read back); None = `default_cache_dir()`"""
    seed: int | None = None
    """input seed; None = a secret per-run seed from `secrets` (the right choice for training)"""
    train_mode: bool = True
    """build both models in training mode, as KernelBench does (``nn.Module``'s default): BatchNorm uses
    batch statistics. False = ``.eval()`` (BatchNorm uses running statistics, Dropout is the identity)"""
    launch_cover_us: float = 200.0
    """CUDA: a GPU-side wait (``torch.cuda._sleep``) queued after the L2 flush and before the start event, so the
    host's launch of the call is queued before the GPU reaches the start event and the runtime is the GPU's, as
    long as the launch takes less than the flush and the wait (in a candidate's process on an H200: 0.13-0.20 ms
    at the 90th percentile, ``benchmarks/results/sandbox_h200.md``; ``timing.time_calls``); 0 = the flush alone
    covers the launch"""
    baseline: str = "eager"
    """the reference timing the speedup (and so the reward) divides by: "eager" (the paper's), "tf32" (eager
    with TF32 matmuls and convolutions allowed) or "compile" (``torch.compile``)"""
    extra_baselines: tuple[str, ...] | None = None
    """reference timings taken besides ``baseline`` and carried in `EvalResult.baselines_ms`; None = "tf32" and
    "compile" on CUDA, none on the CPU backend (where TF32 does not exist and compiling costs tens of seconds)"""
    recheck_baseline_speedup: float | None = 1.0
    """CPU backend: the first correct kernel of a task at least this much faster than the reference has the
    reference timed again, and the faster of its two timings stands for that kernel, the kernels judged while it
    ran and every later one. A baseline timed while another process loaded the host's cores would otherwise
    inflate every speedup of the task for the Sandbox's life. None: never. Not done on CUDA, where a second timing
    costs a golden process on the GPU; a loaded host can slow a small, launch-bound reference there too."""
    max_wall_ratio: float = 1.5
    """reject when the parent's clocks imply a per-call time above this multiple of the reported one (plus 0.5 ms
    and three standard deviations of the harness's own cost): a kernel can hide at most a third of its work from the
    timer before it is caught"""

    def __post_init__(self) -> None:
        if self.rules not in RULES:
            raise ValueError(f"rules must be one of {sorted(RULES)}, not {self.rules!r}")
        for name in ("atol", "rtol"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, RULES[self.rules]["tolerance"])
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {BASELINES}, not {self.baseline!r}")
        if self.extra_baselines is not None and not set(self.extra_baselines) <= set(BASELINES):
            raise ValueError(f"extra_baselines must name baselines among {BASELINES}")
        if self.recheck_baseline_speedup is not None and not self.recheck_baseline_speedup > 0:
            raise ValueError(f"recheck_baseline_speedup must be > 0 (or None), got {self.recheck_baseline_speedup!r}")
        if self.gpu_sharers is not None and not (isinstance(self.gpu_sharers, int) and self.gpu_sharers >= 1):
            raise ValueError(f"gpu_sharers must be an int >= 1 (or None), got {self.gpu_sharers!r}")
        if self.batch_deadline_s is not None and not self.batch_deadline_s > 0:
            raise ValueError("batch_deadline_s must be > 0 seconds (or None)")
        if not (self.checks_floor_s > 0 and self.checks_slowdown > 0):
            raise ValueError("checks_floor_s and checks_slowdown must be > 0")
        if not (self.compile_timeout_s > 0 and self.run_timeout_s > 0 and self.golden_timeout_s > 0):
            raise ValueError("timeouts must be > 0 seconds")
        if self.n_input_sets < 4:
            raise ValueError("n_input_sets must be >= 4 (one set of each variant: task, signed, scaled, heavy-tailed)")
        if self.n_trials < 1 or self.n_warmup < 0:
            raise ValueError("n_trials must be >= 1 and n_warmup >= 0")
        if not 0 < self.timing_budget_s < float("inf"):  # NaN fails too
            raise ValueError(f"timing_budget_s must be a positive number of seconds, not {self.timing_budget_s!r}")
        if self.measure_speed and self.n_warmup < 1:
            # the first call may start a thread pool or touch its output buffers: not inside the judged loop
            raise ValueError("n_warmup must be >= 1 when measure_speed is on")
        if self.atol < 0 or self.rtol < 0:
            raise ValueError("tolerances must be >= 0")
        if self.measure_speed and not 1 <= self.n_rechecks <= self.n_trials:
            # none leaves the timed calls unchecked (hacks C5, D4); more than the trials cannot be placed
            raise ValueError("n_rechecks must be between 1 and n_trials when measure_speed is on")
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.pinned_host_bytes < 0:
            raise ValueError("pinned_host_bytes must be >= 0 bytes")
        if self.min_free_disk_bytes is not None and self.min_free_disk_bytes < 0:
            raise ValueError("min_free_disk_bytes must be >= 0 bytes (or None)")
        if not 0 <= self.launch_cover_us <= 1e5:  # NaN and inf fail too
            raise ValueError("launch_cover_us must be between 0 and 100000 (microseconds)")

    def checks_timeout_s(self, reference_ms: float | None, n_calls: int) -> float:
        """Seconds for one correctness run: ``min(run_timeout_s, checks_floor_s + checks_slowdown * n_calls *
        reference_ms / 1000)``, or ``run_timeout_s`` when the reference was not timed. Correctness runs share their
        device and a timing waits for all of them, so a forward that hangs must not hold the device for the whole
        ``run_timeout_s``. Example: a 2 ms reference, 5 sets: min(60, 10 + 100 * 5 * 0.002) = 11 s.

        >>> SandboxConfig().checks_timeout_s(2.0, 5)
        11.0
        """
        if reference_ms is None:
            return self.run_timeout_s
        return round(min(self.run_timeout_s, self.checks_floor_s + self.checks_slowdown * n_calls * reference_ms / 1e3), 1)

    def baselines_for(self, backend: str) -> tuple[str, ...]:
        """Every reference timing taken on ``backend``: ``baseline`` first, then the extra ones."""
        extra = self.extra_baselines
        if extra is None:
            extra = BASELINES if backend == "cuda" else ()
        return (self.baseline,) + tuple(b for b in extra if b != self.baseline)

    def resolved_cache_dir(self) -> str:
        return self.cache_dir or default_cache_dir()

    def timing_settings(self) -> dict[str, Any]:
        """The fields that change a timing, so they key the baseline cache."""
        return {k: v for k, v in asdict(self).items() if k in ("n_warmup", "n_trials", "timing_budget_s", "train_mode",
                                                                 "launch_cover_us")}
