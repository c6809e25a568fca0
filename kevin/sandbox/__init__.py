"""kevin.sandbox: compile, check and time a candidate kernel, in a way the candidate cannot game.

    from kevin.sandbox import evaluate, Sandbox, SandboxConfig
    result = evaluate(task, candidate_src, device="cuda")           # one kernel
    results = Sandbox("cuda").evaluate_many([(task, src), ...])    # a batch: parallel compiles, one timing per GPU

Backends: ``"cuda"`` / ``"cuda:N"`` (the candidate builds CUDA with ``load_inline(cuda_sources=...)``,
timed with CUDA events) and ``"cpu"`` (the same file format with C++ ``cpp_sources``, timed with the
host clock). `calibrate` / `calibrate_many` vet a task with negative controls. Importing this package
imports only the standard library; torch is loaded by the worker processes (and lazily here to compare).

THREAT MODEL
============

The reward is only as good as this evaluator: a hack that passes becomes the only positive-advantage
sample of its group and the policy learns it. The candidate is treated as an adversary that can run any
Python or C++ in its own process. Attack ids are those of ``reference/sandbox-threats.md`` section 3.

Design: three trust zones.

- The golden process loads only the task's reference (never candidate code). It draws the input sets
  from a secret per-run seed (``secrets``; never in any environment or file the candidate sees): the task's
  own distribution, then signed, scaled and heavy-tailed variants wherever the reference stays finite. It
  computes golden outputs and times the baseline. Golden outputs go to the parent as bytes over a private
  pipe and live only in its memory: they are never written to disk.
- The candidate process is fresh per candidate: a scrubbed environment (an allow-list: PATH, CUDA and
  compiler variables), a private scratch directory as cwd/HOME/TMPDIR deleted afterwards, its own
  process group (killed as a whole), no core dumps, an address-space limit on the CPU backend. It receives
  input tensors only (safetensors), and writes output tensors (safetensors). It reports facts over a
  private inherited pipe; its stdout and stderr are only logged, never parsed. With ``prefork`` (the
  default) it is a fork of a zygote process that imported torch under the same scrubbed
  environment and has never seen a task, an input, a seed or another candidate; otherwise a new
  interpreter.
- The trusted parent compares the bytes it loads itself with the golden outputs it holds, checks the
  timing against its own clock, and decides. A verdict of "correct" needs the complete protocol: any
  missing message, malformed line, exit (``os._exit(0)`` included), signal or hang is a failure.

Defended (each has an adversarial test under tests/sandbox/candidates/):

- A1-A5 delegating to PyTorch (reference op, ATen from C++, try/except fallback, inheriting the reference,
  ghost branch): the static layer (`check_format`, advisory) and, at run time, an inventory of every ATen
  operator the forward dispatches, from Python or C++ (only allocation, copies and views are allowed), taken
  twice: by a Python dispatch mode and by the profiler (``RecordFunction``), which
  ``torch._C._DisableTorchDispatch()`` cannot switch off; the profiler also watches the rechecked timed
  calls (a forward can tell the correctness calls by their NaN-filled allocations, and delegate later), and
  a check of the built library: its undefined symbols (``nm -D``) must name no ATen operator outside that
  allow-list, and no libc function for files, memory mapping, signals, processes, threads, dynamic
  loading or system calls, however the source spelled the call (`._symbols`; on CUDA ``open`` and
  ``syscall`` are exempt: every honest CUDA extension built on the H200 imports them), and on CUDA no
  stream, graph, host callback, context, L2 persistence or device-limit call of the runtime or the driver. A6
  (torch.compile, CUDA graphs): static layer only.
- B1-B4 fabricated outputs (zeros, constants, passthrough, analytic or subsampled shortcuts): an error
  scaled to the reference's magnitude (``atol * rms(ref) + rtol * |ref|``, never a bare absolute
  tolerance), and at most 1 % of the nonzero elements off by more than half (elements far below the rms
  count too: a cumulative product cut short passed before stop 17), on at least four input sets (the task's
  draw, signed, scaled and heavy-tailed values); `calibrate` proves per task that zeros, a mean constant, a
  passthrough and a subsampled computation all fail, and the training recipes drop loaded tasks where one
  passes (a KernelBench output can be constant). The policy's feedback gives relative errors only, to two
  figures: the absolute error of zeros is the golden value itself.
- B5 stale or uninitialised memory: the candidate runs first, in a process where the reference never
  ran; ``torch.empty`` is NaN-filled during the checks (deterministic mode with
  ``fill_uninitialized_memory``); the CUDA caching allocator is pre-filled with NaN. Outputs must live in
  storage PyTorch allocated (checked on every correctness and timed call): an output wrapped around
  memory the candidate controls (``torch::from_blob`` over pages that compute themselves when first
  read, outside the timed window; numpy memory) is rejected, and the static layer forbids memory
  mapping, page protection and signal handlers in C++.
- B6 precision downgrade: exact dtype check; fp16 rounding exceeds the default 1e-3 tolerance except on
  ops that are exact in fp16 (where it is harmless).
- B7 reading the reference / B8 fixed seeds / C4 rewriting the generator: the reference, its outputs,
  its generator and the seed never exist in the candidate's process.
- C1 input mutation: inputs are cloned and compared bit for bit after every call.
- C2 global numerics, C3 comparison patching, D6 timer patching, D2 threads: numerics flags (default
  dtype, TF32, cudnn, matmul precision, determinism, flush-to-zero, thread counts) and the identity of the
  harness's functions, entered dispatch and function modes and trace or profile hooks (`._guards.Tripwires`)
  are snapshotted before import and compared after import, after every correctness set, after every timed
  call and after timing: before stop 17 they were compared once after all sets and once after the loop, so
  ``torch.equal`` replaced for one set (hiding an input mutation), a timer replaced for two timed calls, each
  put back by the next call, or a dispatch mode left entered (it sees the harness's ``clone`` of an output
  with the dispatcher's table unchanged) was judged correct; the
  Python thread count is checked after each call; the output must be exactly ``torch.Tensor`` (D3), on
  the right device, with no memory shared with an input (B2). The dispatcher's kernels for the operators
  the harness itself runs (clone, copy, to, equal, the permutation's randperm and gather, ..., every
  overload) are compared too, with the flags: those that make fresh inputs after every timed call, all of
  them before each rechecked timed call's output is snapshotted. A kernel registered over ``clone`` could
  finish deferred work only when the harness reads an output (registered after each timed call and removed by
  the next, it was judged correct before stop 17).
- C5 evaluator-mode branching, D4 caching on pointers or content, D5 batch-and-skip: every timed call gets
  new content (a correctness set with each tensor's elements randomly permuted), either at new addresses
  (old buffers kept alive) or written into the previous call's buffers in place, at random. Outputs of
  timed calls at secret positions are compared with golden outputs, and those rechecks are made the same
  way (permuted correctness sets, whose reference outputs the golden process computed), so neither the
  content nor the address tells a checked call from an unchecked one; with two or more rechecks at least
  one reuses the previous buffers (a pointer-keyed cache returns a stale answer there) and one does not.
  Permutations, not rolls: from a rolled copy of a seen set, tables built during the untimed correctness
  calls answer cheaply (circular prefix sums give every row sum); from a permuted copy, deriving the
  answer costs a gather of every element. The inputs file (which holds the recheck inputs) is deleted by
  the harness as soon as it is loaded, before any more candidate code runs.
  The check is a sample: a candidate that skips the work on a random share f of its timed calls passes
  with probability (1 - f)^n_rechecks (about 0.125 for f = 0.5 and the default 3 rechecks).
- D1 side streams: after every timed call, once the call's own stream has reached its end event, a
  device-wide synchronize, then a last event. The sample is start -> end, unless the synchronize had to wait
  (longer than twice its median time with nothing left to wait for + 0.02 ms, at most 0.1 ms, measured in
  the same process with no call) or the last event came more than 0.2 ms later than usual after the end
  event (something held the harness's thread back): then it is start -> last event, less that event's usual
  latency, so work left on another stream is timed. D7 L2 persistence: the persisting-L2 limit set to 0 and
  persisting lines reset, then a flush of max(2 x L2 size, 256 MB) and a GPU-side wait of ``launch_cover_us``
  (200 us) queued last before every timed call's start event: the host's launch of the call overlaps them, so
  the sample is the GPU's time, as do_bench's is (in a candidate's process the launch alone takes 0.07-0.22 ms
  at the 90th percentile, more than the flush); host work on the inputs cannot overlap, since a copy to the
  host waits behind them. Not defended: work launched on a non-blocking stream runs beside the flush and the
  wait, before the start event (a head start of the flush, by arithmetic about 0.08 ms for 256 MB, plus the
  0.2 ms wait, less the host's launch time), and can end within the synchronize's limit after the call's own
  work (when the harness's thread also comes back late, up to 0.2 ms more), without being timed; a kernel
  shorter than that head start can be hidden whole. What stands against that is the ban on making a second
  stream: the static layer forbids streams, host callbacks, graphs and entry-point lookups in the runtime and
  the driver API, and the built library's symbol check rejects the runtime's and the driver's as imports
  (libcudart and libcuda are linked dynamically), with their L2 persistence calls; a library that links the
  runtime statically defines them inside and is rejected only for the libc functions (``dlopen``,
  ``pthread_create``) that the static runtime imports. c10's stream pool is
  forbidden by the static layer alone: honest device guards import it too, so the symbol check cannot tell
  (reached through c10's guard registry, a pool stream needs no import of its own). The per-thread default
  stream (``cudaStreamPerThread``, ``--default-stream per-thread``) is no way round: the timed call records its
  events on the legacy default stream, which waits for it.
  D8: the baseline is timed in the golden process, with the same protocol, before and apart from any
  candidate, and kept in the parent's memory for the Sandbox's lifetime: it is never read back from disk,
  where any candidate could rewrite it.
- D6 forged timing: the parent's wall clock over the timing loop, minus the loop's own cost measured in
  the golden process, must not exceed ``max_wall_ratio`` (3x) the reported median plus 0.5 ms (plus a
  quarter of the loop's own cost). On the CPU backend the same figure from the candidate's CPU clock (read
  by the parent from /proc, all threads) may lower it, to no less than half: a loaded host delays a process
  without making it compute. The CPU figure counts only when no other process shares the candidate's session
  or has it as parent, and no reaped child's time appeared. A helper process that leaves the session (a
  double fork and ``setsid``, which the static layer forbids but is not proof against) can still keep its
  work off that clock; the floor of half the wall figure bounds what that gains.
- E1-E3: a fresh process and scratch directory per candidate, a scrubbed environment, no secrets in the
  candidate's process; E2 exits and crashes, hangs (timeouts kill the process group) and out-of-memory
  (RLIMIT_AS on CPU, the CUDA allocator's OOM on GPU) become statuses, never a crash of the caller.

Not defended, and why:

- Same-user file access. Candidates run as the caller's user without an OS sandbox (no container,
  seccomp or network namespace on the target machines). A candidate that deliberately walks the file
  system can read the harness's source, write into the shared build cache (``<cache>/ext``) or the
  precompiled header (``<cache>/pch``, read-only files but the same owner) to poison another candidate's build, leave notes for later candidates (the rechecks of one task are the same for
  every candidate in one Sandbox, so candidates that pool what they saw could learn them), or reach the
  network. Static rules forbid the means (file access in Python and C++, os tricks, ctypes, subprocess,
  sockets, importlib); nothing that scores is read from disk (golden outputs travel over a pipe,
  baselines stay in memory); but the real fix is running the candidate process under another uid or in
  a container.
- In-process forgery by a determined candidate. The candidate's process also runs our worker code, so
  native code can in principle rewrite the worker, write its own report lines on the pipe, or read the
  worker's memory, including which timed calls are rechecks (a red-team candidate walked the worker's
  Python frames from C++ through pybind11 and computed only on rechecks: 8x reported, with the wall
  clock consistent, because it really skipped the work; a later one reached the same frame in pure Python
  through a running generator, ``getattr(gen, "gi" + "_frame")``: 55x). Outputs are still compared byte
  for byte by the parent against golden outputs the candidate never saw, but speed is not bounded: the
  static layer, which forbids Python objects, frames and modules in C++, frame attributes in Python
  (also through ``getattr`` with a literal name) and ``getattr``/``setattr``/``hasattr`` with a computed
  name, is the defence here. The dynamic fix would be choosing the rechecked calls after the loop, from inputs the golden
  process can regenerate; it is not built. Pure Python can do as much by rewriting the worker's own code: a
  red-team candidate (stop 17) replaced ``kevin.sandbox._worker.Channel.send``, announced 10^9 timed calls
  and a median of 1e-6 ms, and was judged correct at 30,296x. The parent now takes the median of the reported
  samples itself and checks their count against the calls announced, and the static layer forbids importing
  ``kevin``. A report rewritten consistently (samples, calls, empty violation and operator lists) passes
  those checks, and only the parent's wall clock stands against it (3x the reported median + 0.5 ms per call,
  so below about 0.5 ms per call any speed passes); a rewrite that also delays the ``timing_begin`` message
  defeats that too. The worker's tripwires (flags, identities, dispatcher, modes, thread counts) run in the
  same process and can be switched off the same way. What holds whatever the candidate's process does: the
  parent's comparison of outputs with golden outputs the candidate never saw, the built library's symbol
  check, and the golden and baseline processes. Speed against such a candidate rests on the static layer.
- Compute outside PyTorch's dispatcher is invisible to the runtime inventory: numpy on a tensor's memory
  (``x.numpy()``), and from C++ ATen's per-backend kernels (``at::cpu::addmm``, declared in
  ``<ATen/ops/addmm_cpu_dispatch.h>``) and its ``at::native`` functions. A red-team round (stop 13) got
  both judged correct, numpy at 128x and ``at::cpu::`` reached by argument-dependent lookup from a
  function the candidate put in ``namespace at``. The static layer now bans numpy and the attributes that
  hand a tensor to other array libraries (``.numpy``, ``__array__``, ``__dlpack__``), code in PyTorch's
  namespaces and includes of ATen's per-backend headers; the built-library check rejects imported
  ``at::<backend>::<op>`` and ``at::native::`` symbols and C++ threads (``std::thread`` starts its thread
  inside libstdc++, so an extension imports ``std::thread::_M_start_thread``, not ``pthread_create``).
- The static layer's C++ scan reads source text: it bans the spellings that reviews have used (macro
  calls before ``::``, function pointers to libc, ``syscall`` in inline assembly, ``extern "C"``,
  load-time constructors, digraphs, operator registration), but a new spelling could pass it. The
  built-library check closes that for ATen operators and libc imports; it cannot judge Python C-API
  use (pybind11's binding code imports it in every extension), inline ``syscall`` instructions, or, on
  CUDA, ``open`` and ``syscall`` (imported by honest builds there; the text scan still bans them).
- The NaN fill of fresh allocations is on during the correctness calls and off while timing (it would be
  timed as the candidate's work), so a candidate can tell the phases apart; the timed calls' outputs are
  still checked by the rechecks, and ATen delegation in timed calls is seen on the rechecked calls (the
  profiler watches them) and, from C++, by the built-library check.
- The static scan does not follow a file-level function stored in an attribute (``self.fn = helper``)
  into the forward path; the runtime inventory and the watch on rechecks see what such a helper calls.
- Outputs invariant under permuting their input's elements (a full reduction over a whole tensor) can
  be cached by content: a permuted copy of a seen set has the seen answer, and rechecks agree. No
  built-in task is such a reduction (reductions there run over one dimension).
- Library kernels called directly from C++ (cuBLAS, cuDNN, CUTLASS) bypass the dispatcher, so the
  runtime inventory misses them; only the static layer flags them (``allow_libraries`` turns that off).
  No CUPTI kernel inventory is taken.
- Shapes: inputs have the task's shapes only (no hidden extra shapes), so B9 shape-specialised kernels
  that are correct at the task's shapes pass; they are, at those shapes, correct.
- Escaping the process group: a candidate that forks a child which calls ``setsid()`` survives the
  kill of its group (no cgroup or PID namespace here). The static layer forbids processes; the fix is
  again an OS sandbox.
- ``measure_speed=False`` skips the timed calls and therefore the rechecks: first-N-calls hacks (C5)
  then pass; keep timing on for rewards.
- Interference with other candidates on the same GPU. Candidates of one device run their correctness sets
  at the same time (``parallel_checks``; a timing always has its device alone, `DeviceGate`), so one
  candidate's memory use can make another's correctness run fail with out-of-memory (each candidate also keeps
  its NaN-filled allocator block, up to 8 GB or a quarter of the free memory, while it waits for its timing:
  on a GPU shared with a large model, many waiting candidates can leave a timing short of memory), and GPU work a candidate
  leaves running after its report (kernels queued without waiting for them) can overlap the next timing
  on its device. Neither raises the candidate's own verdict; both can lower a sibling's, which in a group
  baseline raises the offender's advantage. The static layer forbids extra streams and threads;
  ``parallel_checks=False`` removes the first (one candidate per device at a time).
- What is compiled: a CUDA unit is built first with a lighter prelude than load_inline's ``<torch/types.h>``
  (``_extension.LIGHT_PRELUDE``: a subset of the same torch headers) and, if that build fails, with the full
  one. The verdict is about the library that was built and loaded; a source whose meaning depended on a
  declaration only the full prelude makes visible (an overload or specialisation that changes what compiles
  without making it fail) would be judged as built with the subset. Kernels' host code uses the tensor class,
  factories and dispatch macros, which the subset holds whole.
- Background work that finishes before the output is copied (a native thread, a CUDA stream outside
  the device) is caught only through the thread count, the static layer and the device-wide synchronize.

What a "correct" verdict guarantees: in a process that never held the reference, ``ModelNew`` built after
the reference's seed returned, for every input set (the task's own distribution and its variants, drawn from
a seed it could not know), exact ``torch.Tensor`` outputs of the reference's dtype, shape and device, in
storage PyTorch allocated, not aliasing its inputs, with NaN/inf exactly where the reference has them and
every other element within ``atol * rms(ref) + rtol * |ref|``; it left its inputs, the numerics flags, the
harness's functions and the thread count unchanged; it dispatched no PyTorch compute operator; and, when
timed, its timed calls on fresh inputs were as correct as the checked ones, and the reported runtime (median
over calls after an L2 flush of the GPU time from the start event, which the GPU reaches once the call is
queued or the cover has passed, to the end of the call's stream, or to an event after a device-wide
synchronize when that synchronize waited or the harness came back late) is consistent with the parent's wall
clock (on the CPU
backend, with that clock eased by at most half where the candidate's own CPU clock shows it was kept waiting).
The output checks hold whatever the candidate did in its process; the rest (the flags, functions, operators,
threads and the timing) is measured in the candidate's process and holds for a candidate that passed the
static layer, which forbids rewriting the harness ("In-process forgery" above).
"""

from .calibrate import CalibrationReport, calibrate, calibrate_many
from .config import SandboxConfig
from .result import STATUSES, EvalResult
from .sandbox import Sandbox, evaluate
from .static import check_format


__all__ = [
    "CalibrationReport", "EvalResult", "STATUSES", "Sandbox", "SandboxConfig", "calibrate", "calibrate_many",
    "check_format", "evaluate",
]
