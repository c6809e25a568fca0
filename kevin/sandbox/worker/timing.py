"""The timing protocol, shared by the golden process (baselines) and the candidate process.

Used only inside worker processes (it imports torch). One timed call is:

    args = fresh.make(source, seed)      # outside the window: a source set permuted by a seeded permutation and
                                         # gathered into new buffers (or copied into the previous call's buffers)
    pre.record()                         # CUDA only: after the harness's own copies on this stream
    reset persisting L2; flush.zero_()   # CUDA only: a write of max(2 x L2, 256 MB) evicts the inputs (hack D7)
    torch.cuda._sleep(cover)             # CUDA only: the GPU waits launch_cover_us before the start event
    start.record(); out = call(args); end.record(); end.synchronize()                          # CUDA
    h0 = perf_counter(); torch.cuda.synchronize(); h1 = perf_counter()
    fin.record(); torch.cuda.synchronize(); h2 = perf_counter()
    t0 = perf_counter(); out = call(args); t1 = perf_counter()                                    # CPU
    audit(); kept.append(copy of out)    # outside the window, after every call alike

On CUDA a sample is start -> end, the call's work on the current stream, as ``triton.testing.do_bench``
measures it, unless one of two things happened after the call's stream reached its end:

- the device-wide synchronize had to wait: its host time h1 - h0, less the second one's, h2 - h1 (which has
  nothing to wait for but the last event), is above ``tail_limit_ms`` (twice the median of that difference with
  no call + 0.02 ms, at most 0.1 ms): work outlived the call on another stream (hack D1). Less the second
  one's, because in some candidate processes every synchronize is slow on the host;
- the last event came late (end -> fin above ``late_limit_ms``: its median with no call + 0.2 ms): something
  held the harness's own thread back after the stream's end, while work elsewhere could finish unseen.

Then the sample is start -> fin less that median (at most 0.05 ms), and never less than start -> end; when the
synchronize waited, never less than pre -> fin less the lead (the median pre -> start with no call) and that median
either: work put on another stream runs beside the flush and the cover, and can hold the start event back until it is
nearly done. Work on another stream that ends before the call's own stream does is not seen: the lead (the flush and
the cover) bounds what it can hide. The flush and the cover are the last things queued before the start event, so the
GPU is still busy with them while the host runs the call up to its first launch: the runtime is the GPU's, not the
launch latency of a Python forward
(in a candidate's process on an H200 the launch takes 0.13-0.20 ms at the 90th percentile;
`benchmarks/results/sandbox_h200.md`). Host work that reads the inputs cannot hide there: a copy to the host
waits behind the flush and the cover. The runtime is the median of the samples.

Rechecks: a few timed calls, at positions drawn inside `time_calls`, get golden content (a permuted copy of a
correctness set whose reference output the golden process computed), reached through exactly the work of any
other call: the call's seeded permutation gathers from a source that is the golden content scattered by that
permutation's inverse. Every call, checked or not, is followed by the same audit and a kept copy of its outputs;
the copies of the rechecked calls are handed back after the loop. So nothing visible inside the process tells a
checked call from an unchecked one (hacks C5, D4, D5). Permutations, not rolls: from a rolled copy of a seen set,
tables built in the untimed calls answer cheaply (circular prefix sums); from a permuted copy, deriving the answer
costs a gather of every element, no less than the work itself. Any call either gets new buffers or has its
content written into the previous call's buffers in place, at random; with two or more rechecks, one of the
first two is in place and one is not, so a pointer-keyed cache meets both.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import hashlib
import itertools
import os
import random
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

MIN_TRIALS = 10
LATE_MS = 0.2  # CUDA: a sample whose last event came this much later than usual after its stream's end runs to it
TAIL_LIMIT_CAP_MS = 0.1  # CUDA: the most the synchronize may wait before the sample runs to it
OVERHEAD_CAP_MS = 0.05  # CUDA: the most latency from a stream's end to the last event that is taken as usual


def median(xs: Sequence[float]) -> float:
    """Middle value (mean of the two middle values for an even count). ``median([3, 1, 2]) == 2``."""
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median of no samples")
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def l2_cache_bytes(device: torch.device) -> int:
    """The device's L2 size as the driver reports it (``cudaDevAttrL2CacheSize``); 0 on CPU."""
    if device.type != "cuda":
        return 0
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)


_PIN_MEMORY = torch.Tensor.pin_memory  # bound at import, before any candidate code runs in the process


def pin(sets: list[list[Any]], max_bytes: int) -> int:
    """Move the host tensors of the argument lists ``sets`` into page-locked memory, in place; returns the bytes.

    A timing copies its inputs to the device inside its hold on the device, and a pageable copy is staged through a
    driver buffer at a fraction of the link's bandwidth: pinned while the process waits for its turn, they copy at
    full speed. One tensor at a time, so each pageable original is freed (if nothing else holds it) before the next
    is pinned. Nothing moves (0) without CUDA, or when the tensors pass ``max_bytes`` in all; what the driver
    cannot pin stays pageable (the bytes pinned before it are returned).
    """
    host = [x for s in sets for x in s if isinstance(x, torch.Tensor) and x.device.type == "cpu"]
    if sum(x.numel() * x.element_size() for x in host) > max_bytes or not host or not torch.cuda.is_available():
        return 0
    done = 0
    for s in sets:
        for j, x in enumerate(s):
            if isinstance(x, torch.Tensor) and x.device.type == "cpu" and not x.is_pinned():
                try:
                    s[j] = _PIN_MEMORY(x)
                except RuntimeError:
                    return done
                done += x.numel() * x.element_size()
    return done


def on_device(sets: list[list[Any]], device: torch.device) -> list[list[Any]]:
    """The argument lists ``sets`` with every tensor copied to ``device`` (asynchronously from pinned memory), all
    copies finished on return."""
    out = [[x.to(device, non_blocking=True) if isinstance(x, torch.Tensor) else x for x in s] for s in sets]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out


_CUDART: Any = None


def _cudart() -> Any:
    """The CUDA runtime library torch loaded, through ctypes (None if it cannot be found)."""
    global _CUDART
    if _CUDART is not None:
        return _CUDART or None
    names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    roots = [os.path.join(os.path.dirname(torch.__file__), "lib")]
    for site in {os.path.dirname(os.path.dirname(torch.__file__))}:
        roots += glob.glob(os.path.join(site, "nvidia", "*", "lib")) + glob.glob(os.path.join(site, "nvidia", "lib"))
    candidates = names + [p for r in roots for n in names for p in glob.glob(os.path.join(r, n + "*"))]
    for name in candidates:
        try:
            _CUDART = ctypes.CDLL(name)
            return _CUDART
        except OSError:
            continue
    _CUDART = False
    return None


def reset_persisting_l2() -> bool:
    """Set the persisting-L2 limit to 0 and reset persisting lines (hack D7). True when both calls succeed."""
    lib = _cudart()
    if lib is None:
        return False
    cuda_limit_persisting_l2_cache_size = 0x06
    ok = lib.cudaDeviceSetLimit(ctypes.c_int(cuda_limit_persisting_l2_cache_size), ctypes.c_size_t(0)) == 0
    ok = (lib.cudaCtxResetPersistingL2Cache() == 0) and ok
    return ok


@dataclass
class TimingRun:
    """Samples of one timing loop. ``samples_ms`` are device times (events) on CUDA, host times on CPU."""

    samples_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    launch_ms: list[float] = field(default_factory=list)  # CUDA: host ms from recording the start event to the return
    overhead_ms: float = 0.0  # CUDA: the median GPU time from a stream's end to the last event, with no call
    l2_flush_bytes: int = 0
    l2_reset: bool = False
    cover_cycles: int = 0
    tail_limit_ms: float = 0.0
    lead_ms: float = 0.0  # CUDA: the median GPU time from before the flush to the start event, with no call
    late_limit_ms: float = 0.0
    n_tail: int = 0  # CUDA trials timed to the last event (work outlived the call's stream, or the host came back late)
    n_waited: int = 0  # ... of them because the synchronize waited
    n_late: int = 0  # ... because the last event came late
    recheck_outputs: dict[int, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    audit_failed: bool = False  # a tripwire was found changed after a call (reported once in errors)
    audit_changes: list[str] = field(default_factory=list)  # ... what it found

    @property
    def median_ms(self) -> float:
        return median(self.samples_ms)

    def summary(self) -> dict[str, Any]:
        return {
            "median_ms": self.median_ms if self.samples_ms else None,
            "samples_ms": [round(x, 6) for x in self.samples_ms],
            "wall_median_ms": median(self.wall_ms) if self.wall_ms else None,
            "overhead_ms": self.overhead_ms,
            "l2_flush_bytes": self.l2_flush_bytes,
            "l2_reset": self.l2_reset,
            "cover_cycles": self.cover_cycles,
            "tail_limit_ms": self.tail_limit_ms,
            "late_limit_ms": self.late_limit_ms,
            "lead_ms": self.lead_ms,
            "n_tail": self.n_tail,
            "n_waited": self.n_waited,
            "n_late": self.n_late,
            "launch_p90_ms": sorted(self.launch_ms)[int(0.9 * (len(self.launch_ms) - 1))] if self.launch_ms else None,
            "n_trials": len(self.samples_ms),
        }


class FreshInputs:
    """Per-call arguments with new content at a new address, every call made by the same work.

    `make(source, seed)` permutes every tensor of ``source`` by a permutation drawn from ``seed`` (numpy's on the
    CPU: torch's CPU randperm and index kernels can stall in a process forked from the zygote, whose intra-op pool
    is not fork-safe) and gathers it into a newly allocated buffer at a random 256-byte offset; on a GPU the
    sandbox's kernel (`_permute`) computes the permutation from the seed's round keys in the same pass as the
    gather, so no permutation is ever stored. Buffers stay alive (up to ``keep_alive_bytes``), so a data_ptr-keyed
    cache never sees a pointer twice.
    `source_for(content, seed)` is the inverse: the source that `make` turns into ``content`` with that seed, so
    golden content reaches a timed call through exactly the work of any other call.
    """

    def __init__(self, pool: Sequence[Sequence[Any]], *, rng: random.Random, keep_alive_bytes: int):
        self.pool = pool
        self.rng = rng
        self.keep_alive_bytes = keep_alive_bytes
        self._alive: deque[Any] = deque()
        self._alive_bytes = 0

    def _indices(self, seed: int, tensors: Sequence[torch.Tensor]) -> Iterator[Any]:
        """One permutation per tensor, all drawn from ``seed`` in order: on the CPU numpy's (each drawn only when the
        one before has been used: one held at a time), on a GPU the round keys of the kernel's (`_permute`)."""
        if not tensors:
            return
        if tensors[0].device.type != "cpu":
            yield from _round_keys(seed)
            return
        rng = np.random.default_rng(seed)
        for t in tensors:
            yield rng.permutation(t.numel())

    def _new_buffer(self, t: torch.Tensor) -> torch.Tensor:
        pad = self.rng.randrange(64) * max(1, 256 // max(1, t.element_size()))
        buf = torch.empty(t.numel() + pad, dtype=t.dtype, device=t.device)
        self._alive.append(buf)
        self._alive_bytes += buf.numel() * buf.element_size()
        while self._alive_bytes > self.keep_alive_bytes and len(self._alive) > 1:
            old = self._alive.popleft()
            self._alive_bytes -= old.numel() * old.element_size()
        return buf[pad:]

    def make(self, source: Sequence[Any], seed: int) -> list[Any]:
        tensors = [x for x in source if isinstance(x, torch.Tensor)]
        index = iter(self._indices(seed, tensors))
        out = []
        for x in source:
            if not isinstance(x, torch.Tensor):
                out.append(x)
                continue
            idx = next(index)
            view = self._new_buffer(x)
            if x.device.type == "cpu":
                view.copy_(_gather(x.reshape(-1), idx))
                _wipe(idx)  # freed memory may reach the candidate's allocations: leave no permutation in it
            else:
                _permute(view, x.contiguous().reshape(-1), idx, scatter=False)
            out.append(view.view(x.shape))
        return out

    def source_for(self, content: Sequence[Any], seed: int) -> list[Any]:
        tensors = [x for x in content if isinstance(x, torch.Tensor)]
        index = iter(self._indices(seed, tensors))
        out = []
        for x in content:
            if not isinstance(x, torch.Tensor):
                out.append(x)
                continue
            idx = next(index)
            src = torch.empty(x.numel(), dtype=x.dtype, device=x.device)
            if x.device.type == "cpu":
                _bits(src).numpy()[idx] = _bits(x.contiguous().reshape(-1)).numpy()
                _wipe(idx)  # drawn again at its call: no copy may wait in freed memory for the candidate to find
            else:
                _permute(src, x.contiguous().reshape(-1), idx, scatter=True)
            out.append(src.view(x.shape))
        return out

    def __call__(self, i: int) -> list[Any]:
        """A random pool set under a random permutation (what every timed call gets)."""
        return self.make(self.pool[self.rng.randrange(len(self.pool))], self.rng.getrandbits(63))


_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _numpy_permuted(flat: torch.Tensor, gen: np.random.Generator) -> torch.Tensor:
    """A CPU tensor's elements shuffled by numpy (any dtype of 1, 2, 4 or 8 bytes, through its bits)."""
    bits = _SAME_SIZE_INT.get(flat.element_size())
    if bits is None:  # e.g. complex128: shuffle pairs of 8-byte words
        return _numpy_permuted(flat.view(torch.int64).view(-1, 2), gen).view(flat.dtype).reshape(-1)
    arr = flat.contiguous().view(bits).numpy()
    return torch.from_numpy(np.ascontiguousarray(gen.permutation(arr, axis=0))).view(flat.dtype)


def _bits(flat: torch.Tensor) -> torch.Tensor:
    """A 1-D tensor's elements as integers of the same size (16-byte elements as rows of two 8-byte words)."""
    bits = _SAME_SIZE_INT.get(flat.element_size())
    if bits is not None:
        return flat.view(bits)
    return flat.view(torch.int64).view(-1, flat.element_size() // 8)


def _round_keys(seed: int) -> Iterator[Any]:
    """The permutation kernel's six 64-bit round keys for each tensor in turn: BLAKE2b of the seed and the tensor's
    place. One-way: keys found in memory give back neither the seed nor another tensor's keys."""
    for place in itertools.count():
        digest = hashlib.blake2b(f"{seed}:{place}".encode(), digest_size=48).digest()
        yield (ctypes.c_ulonglong * 6)(*struct.unpack("<6Q", digest))


_PERMUTE: Any = None  # the sandbox's CUDA permutation kernel, bound by `load_permute` before any candidate code runs
_LOADED_FDS: list[int] = []  # the in-memory copies of the libraries loaded


def load_permute(path: str, sha256: str) -> None:
    """Bind the permutation kernel that ``kevin.sandbox.build.harness.build_permute`` built at ``path``: its bytes are
    read once, checked against ``sha256`` and loaded from an anonymous in-memory copy, so a file replaced on disk
    (before the check or after it) is never what runs."""
    global _PERMUTE
    with open(path, "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise RuntimeError(f"the sandbox's permutation kernel at {path} is not the one it built (its hash differs)")
    try:
        fd = os.memfd_create("kevin-permute", 0x10)  # MFD_EXEC: hosts with vm.memfd_noexec = 1 seal others no-exec
    except OSError:  # a kernel before 6.3 knows no such flag
        fd = os.memfd_create("kevin-permute")
    # kept open: a closed copy's /proc name comes back, and dlopen answers a name it has seen with what it loaded then
    _LOADED_FDS.append(fd)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    fn = ctypes.CDLL(f"/proc/self/fd/{fd}").kevin_permute
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_int, ctypes.c_int,
                   ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_void_p]
    fn.restype = ctypes.c_int
    _PERMUTE = fn


def _permute(dst: torch.Tensor, src: torch.Tensor, keys: Any, scatter: bool) -> None:
    """``dst[i] = src[prp(i)]`` (or ``dst[prp(i)] = src[i]`` with ``scatter``) for contiguous 1-D GPU tensors of
    one dtype, on the current stream: ``prp`` is the keyed permutation of ``kevin.sandbox.build.harness``."""
    if _PERMUTE is None:
        raise RuntimeError("the sandbox's CUDA permutation kernel is not loaded (timing.load_permute)")
    rc = _PERMUTE(dst.data_ptr(), src.data_ptr(), src.numel(), src.element_size(), int(scatter), keys,
                  torch.cuda.current_stream(src.device).cuda_stream)
    if rc:
        what = f"no {src.element_size()}-byte element type" if rc == -1 else f"CUDA error {rc}"
        raise RuntimeError(f"the sandbox's permutation kernel failed to launch ({what})")


def _wipe(idx: Any) -> None:
    """Zero a permutation (or the keys that give one) before it is freed."""
    if isinstance(idx, torch.Tensor):
        idx.zero_()
    else:
        idx[...] = 0


def _gather(flat: torch.Tensor, idx: Any) -> torch.Tensor:
    """``flat[idx]`` on the raw element bits (any dtype); on the CPU through numpy."""
    if flat.device.type != "cpu":
        return _bits(flat)[idx].view(flat.dtype).reshape(-1)
    picked = np.ascontiguousarray(_bits(flat.contiguous()).numpy()[idx])
    return torch.from_numpy(picked).view(flat.dtype).reshape(-1)


def _as_list(out: Any) -> list[Any]:
    """The outputs of a call as a list, without running any of the candidate's code: a tensor, or exactly a tuple
    or list (a subclass could compute in ``__iter__`` when the harness reads it, outside the timed window); any
    other container is returned whole, as one output, for the type checks to reject."""
    if type(out) is tuple or type(out) is list:
        return list(out)
    return [out]


def _allocator_owned(out: Any) -> bool:
    """Every tensor output lives in a storage PyTorch allocated (resizable): not ``from_blob`` over memory the
    candidate controls, such as pages that compute their content when first read (a lazy output)."""
    return all(type(o) is torch.Tensor and o.untyped_storage().resizable() for o in _as_list(out))


def _snapshot(out: Any) -> Any:
    """A private copy of a call's outputs, taken outside the timed window on the same device; a string when they
    are not exactly tensors."""
    outs = _as_list(out)
    if not all(type(o) is torch.Tensor for o in outs):
        return "output is not exactly torch.Tensor"
    return [o.detach().clone() for o in outs]


def _copy_into(out: Any, slot: list[torch.Tensor]) -> Any:
    """The call's outputs copied into ``slot`` (preallocated tensors of the warm-up outputs' shapes); a fresh copy
    (`_snapshot`) when they do not match."""
    outs = _as_list(out)
    if len(outs) != len(slot) or not all(type(o) is torch.Tensor and o.shape == t.shape and o.dtype == t.dtype
                                         and o.device == t.device for o, t in zip(outs, slot)):
        return _snapshot(out)
    for o, t in zip(outs, slot):
        t.copy_(o)
    return slot


def _nbytes(out: Any) -> int:
    return sum(o.numel() * o.element_size() for o in _as_list(out) if type(o) is torch.Tensor)


def time_calls(
    call: Callable[[list[Any]], Any],
    pool: Sequence[Sequence[Any]],
    *,
    device: torch.device,
    n_warmup: int,
    n_trials: int,
    budget_s: float,
    rng: random.Random,
    rechecks: Sequence[Sequence[Any]] = (),
    keep_alive_bytes: int | None = None,
    keep_outputs_bytes: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
    inventory: Callable[[], Any] | None = None,
    launch_cover_us: float = 0.0,
    audit: Callable[[bool], list[str]] | None = None,
    null_call: Callable[[list[Any]], Any] | None = None,
    mark: Callable[..., None] | None = None,
) -> TimingRun:
    """Warm up, then time ``call`` on fresh inputs; ``rechecks`` are golden argument lists to place at secret
    positions among the timed calls.

    Every timed call looks the same from inside the process: its inputs are a source permuted by a seeded
    permutation and gathered (a pool set, or for a recheck the source that the permutation turns into the golden
    content), it runs under ``inventory()`` (:class:`._inventory.ProfiledOps`), when given, which watches the whole
    loop once (PyTorch compute in any warm-up or timed call is an error; one watch, so starting and stopping the
    profiler is not paid per call, and the harness's own operators run in a profiler scope outside the window,
    so the candidate's are the top-level ones), it is followed by
    ``audit(True)`` (what changed in the harness's trusted objects: the first change is an error) and a copy of
    its outputs, which is kept. Which copies are rechecks is known only to this function's locals, and they are
    read after the loop: ``run.recheck_outputs`` maps each recheck's position to its copy.

    The number of timed calls is fixed before the loop: ``n_trials``, fewer (not under ``MIN_TRIALS``) when the
    warm-up calls show that ``budget_s`` would not hold them or the kept copies would pass ``keep_outputs_bytes``.
    A call's cost is all the work done for it: its warm-up cycle (fresh inputs, the call, the audit and the copy)
    and a second draw of fresh inputs, which the plan makes for every timed call. On a large input the draws cost
    more than a fast kernel (a pass over every element), and a budget of the calls alone let such a timing
    hold the device well past it.
    With ``null_call`` and ``mark`` (`._loop`): the timed calls run in segments, each after `._loop.NULL_CALLS`
    calls of the same harness around ``null_call``, and ``mark(name, index)`` is called at the start of every
    null block ("null") and segment ("calls") and at the end ("end"), for the parent's wall-clock check; one
    unmarked null block runs before the first, so that no marked one pays for the null path's first run. On CUDA,
    ``launch_cover_us`` of GPU-side waiting follows the L2 flush (the module docstring); the CPU ignores it.
    """
    from kevin.sandbox.worker import inventory as _inventory, loop as _loop

    rechecks = list(rechecks)
    # the harness's own operators run inside a profiler scope, outside the timed window: a watch sees the
    # candidate's operators as the top-level ones
    harness = (lambda: torch.autograd.profiler.record_function(_inventory.HARNESS)) if inventory else contextlib.nullcontext
    cuda = device.type == "cuda"
    if keep_alive_bytes is None:
        keep_alive_bytes = (4 << 30) if cuda else (256 << 20)
    if keep_outputs_bytes is None:
        keep_outputs_bytes = (4 << 30) if cuda else (1 << 30)
    fresh = FreshInputs(pool, rng=rng, keep_alive_bytes=keep_alive_bytes)
    run = TimingRun()
    flush = None
    cover = 0
    if cuda:
        run.l2_flush_bytes = max(2 * l2_cache_bytes(device), 256 << 20)
        flush = torch.empty(run.l2_flush_bytes // 4, dtype=torch.int32, device=device)
        run.l2_reset = reset_persisting_l2()
        if launch_cover_us > 0:
            cover = max(1, round(launch_cover_us * 1e-3 * sleep_cycles_per_ms(device)))
        run.cover_cycles = cover
        latency, run.tail_limit_ms, run.lead_ms = _cuda_sync_overhead_ms(flush, device, cover, clock=clock)
        run.overhead_ms = min(latency, OVERHEAD_CAP_MS)  # a slow calibration cannot buy untimed work
        run.late_limit_ms = run.overhead_ms + LATE_MS

    def one(fn: Callable[[list[Any]], Any], args: list[Any]) -> tuple[float, float, Any, tuple[bool, bool], float]:
        """(sample ms, wall ms, outputs, (the synchronize waited, the last event came late), host launch ms)."""
        if cuda:
            pre, start, end, fin = (torch.cuda.Event(enable_timing=True) for _ in range(4))
            with harness():
                pre.record()  # after the harness's copies for this call, which run on this stream before it
                reset_persisting_l2()
                flush.zero_()
                if cover:
                    torch.cuda._sleep(cover)
            w0 = clock()
            start.record()
            out = fn(args)
            end.record()
            launched = clock()
            end.synchronize()
            h0 = clock()
            torch.cuda.synchronize(device)
            h1 = clock()
            fin.record()
            torch.cuda.synchronize(device)  # nothing left but fin: the same call's host cost, to compare with
            w1 = clock()
            waited = ((h1 - h0) - (w1 - h1)) * 1e3 > run.tail_limit_ms  # work outlived the call's own stream
            late = end.elapsed_time(fin) > run.late_limit_ms  # the host came back late from the stream's end
            wall, launch = (w1 - w0) * 1e3, (launched - w0) * 1e3
            stream_ms = start.elapsed_time(end)
            if waited or late:
                since = start.elapsed_time(fin)
                if waited:  # work the call put on another stream runs beside the flush and the cover and can hold
                    # the start event back: from before the flush, less the lead that the flush and the cover take
                    since = max(since, pre.elapsed_time(fin) - run.lead_ms)
                return max(stream_ms, since - run.overhead_ms), wall, out, (waited, late), launch
            return stream_ms, wall, out, (False, False), launch
        w0 = clock()
        out = fn(args)
        w1 = clock()
        return (w1 - w0) * 1e3, (w1 - w0) * 1e3, out, (False, False), 0.0

    prev: list[Any] | None = None
    # the last call's (ms, wall, waited, late, launch): a variable, not an attribute of ``step``, which would make
    # ``step`` refer to itself and keep this frame's buffers (gigabytes of fresh inputs) alive until the cyclic GC
    last: tuple[float, float, bool, bool, float] = (0.0, 0.0, False, False, 0.0)

    def step(fn: Callable[[list[Any]], Any], source: Sequence[Any], seed: int, in_place: bool, label: str,
             slot: list[Any] | None = None, draws_ms: list[float] | None = None) -> Any:
        """One call with all the harness's work around it; the same for every call. Returns its kept copy.
        ``draws_ms`` (warm-up calls): gets the seconds of drawing the fresh inputs, to the end of their GPU work."""
        nonlocal prev, last
        with harness():
            t0 = clock()
            new = fresh.make(source, seed)
            if draws_ms is not None:
                if cuda:
                    torch.cuda.synchronize(device)
                draws_ms.append((clock() - t0) * 1e3)
            args = _refill(prev, new) if in_place and prev is not None else new
        ms, wall, out, (waited, late), launch = one(fn, args)
        with harness():
            if audit is not None and not run.audit_failed:
                changes = audit(True)
                if changes:
                    run.audit_failed = True
                    run.audit_changes = list(changes)
                    run.errors.append(f"{label}: " + "; ".join(changes[:3]))
            if not run.errors and not _allocator_owned(out):
                run.errors.append(f"{label}: an output is not exactly a tensor in memory from PyTorch's allocator")
            kept = _copy_into(out, slot) if slot is not None else _snapshot(out)
        del out
        prev = args
        last = (ms, wall, waited, late, launch)
        return kept

    def any_source() -> tuple[Sequence[Any], int]:
        return pool[rng.randrange(len(pool))], rng.getrandbits(63)

    def timed_loop() -> None:
        """Warm-up calls, the plan of the timed calls, then the segments (all watched alike)."""
        nonlocal positions, kept_all, prev
        cycles_ms, draws_ms, out_bytes, template = [], [], 0, None
        for i in range(n_warmup):
            t0 = clock()
            kept = step(call, *any_source(), rng.random() < 0.5, f"warm-up call {i}", draws_ms=draws_ms)
            if cuda:
                torch.cuda.synchronize(device)  # the audit's and the copy's GPU work belong to this cycle
            cycles_ms.append((clock() - t0) * 1e3)
            out_bytes = max(out_bytes, _nbytes(kept) if not isinstance(kept, str) else 0)
            template = kept if not isinstance(kept, str) else None
            del kept
        # How many timed calls: fixed now, so the loop's length says nothing about where the rechecks are.
        n = n_trials
        if cycles_ms:  # a timed call costs its cycle and the plan's draw of its inputs
            per_call_ms = median(cycles_ms) + median(draws_ms)
            n = min(n, max(MIN_TRIALS, int(budget_s * 1e3 / max(per_call_ms, 1e-3))))
        if out_bytes:
            n = min(n, max(MIN_TRIALS, keep_outputs_bytes // out_bytes))
        n = max(n, len(rechecks), 1)
        positions = rng.sample(range(n), len(rechecks))
        # the plan's own operators (the scatters of the calls' sources) are the harness's
        with harness():
            # Every call's permutation is drawn and scattered here once, in call order: a recheck's source needs it,
            # and a hook watching the harness's buffers would otherwise see only the rechecks' permutations drawn twice
            plan = [any_source() for _ in range(n)]
            golden = dict(zip(positions, rechecks))
            for p in range(n):
                if p not in golden:
                    fresh.source_for(*plan[p])  # drawn and discarded, as a recheck's is drawn and kept
                    continue
                plan[p] = (fresh.source_for(golden[p], plan[p][1]), plan[p][1])
                for t in golden[p]:  # the golden content stays only as its scattered source: nothing to match inputs with
                    if isinstance(t, torch.Tensor):
                        t.zero_()
            golden.clear()
            rechecks.clear()
            # Which calls write into the previous call's buffers: half of them at random; with two or more rechecks, the
            # first recheck that has a call before it in place and another not, so a pointer-keyed cache is met both
            # ways (in place: into the buffers of the forward's previous call, warm-up or timed).
            in_place = [rng.random() < 0.5 for _ in range(n)]
            ordered = sorted(positions)
            first_in = next((p for p in ordered if p > 0 or n_warmup > 0), None)
            if len(ordered) >= 2 and first_in is not None:
                in_place[first_in] = True
                in_place[next(p for p in ordered if p != first_in)] = False
            elif ordered:
                in_place[ordered[0]] = False
            null_out = null_call if null_call is not None and mark is not None else None
            # Where the copies go, allocated and written before the loop: a copy into fresh memory costs page faults (or
            # a cudaMalloc) that a null call's copy, freed and reused, would not, and the wall check would count them as
            # the candidate's work
            slots = [[torch.zeros_like(t) for t in template] for _ in range(n + 1)] if template else None
            if cuda:  # the plan's GPU work (a permutation and a scatter per call) must not run into the first null calls
                torch.cuda.synchronize(device)
        # One unmarked block of null calls first: the first null block of a process ran slower than the rest (about 5.5
        # against 3 ms per call on the H200) and so gave segment 0 an implied time below zero, slack for any kernel
        if null_out is not None:
            seen = prev
            for j in range(_loop.NULL_CALLS):
                step(null_out, *any_source(), rng.random() < 0.5, f"null warm-up call {j}", slots and slots[n])
            prev = seen
            if cuda:
                torch.cuda.synchronize(device)
        sizes = _loop.segment_sizes(n) if null_out is not None else [n]
        kept_all = []
        i = 0
        for s, size in enumerate(sizes):
            if null_out is not None:
                mark("null", s)
                seen = prev  # a call in place writes into the buffers of the last call the forward saw, not a null call's
                for j in range(_loop.NULL_CALLS):
                    step(null_out, *any_source(), rng.random() < 0.5, f"null call {s}.{j}", slots and slots[n])
                prev = seen
                mark("calls", s)
            for _ in range(size):
                kept_all.append(step(call, plan[i][0], plan[i][1], in_place[i], f"timed call {i}", slots and slots[i]))
                ms, wall, waited, late, launch = last
                run.samples_ms.append(ms)
                run.wall_ms.append(wall)
                run.n_tail += waited or late
                run.n_waited += waited
                run.n_late += late
                if cuda:
                    run.launch_ms.append(launch)
                i += 1
        if null_out is not None:
            mark("end", len(sizes))

    positions: list[int] = []
    kept_all: list[Any] = []
    watch = inventory() if inventory is not None else contextlib.nullcontext()
    with watch:
        timed_loop()
    if getattr(watch, "compute_ops", None):
        run.errors.insert(0, "a warm-up or timed call: your forward called PyTorch operators ("
                          + ", ".join(f"aten.{op}" for op in watch.compute_ops[:6]) + ")")
    run.recheck_outputs = {p: kept_all[p] for p in positions}
    return run


def _refill(prev: list[Any], new: Sequence[Any]) -> list[Any]:
    """Copy new content into the previous call's buffers in place: same pointers, new content."""
    out = []
    for p, g in zip(prev, new):
        if isinstance(p, torch.Tensor) and isinstance(g, torch.Tensor) and p.shape == g.shape and p.dtype == g.dtype:
            p.copy_(g)
            out.append(p)
        else:
            out.append(g)
    return out


_SLEEP_CYCLES_PER_MS: dict[int, float] = {}


def sleep_cycles_per_ms(device: torch.device) -> float:
    """How many cycles of ``torch.cuda._sleep`` (a one-thread spin on the SM's clock) take one millisecond of
    event time on ``device``: the median of three event-timed spins of 2^20 cycles, measured once per process."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SLEEP_CYCLES_PER_MS:
        cycles, rates = 1 << 20, []
        with torch.cuda.device(index):
            torch.cuda._sleep(cycles)  # the first spin also loads the kernel
            for _ in range(3):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                torch.cuda._sleep(cycles)
                end.record()
                end.synchronize()
                rates.append(cycles / max(start.elapsed_time(end), 1e-6))
        _SLEEP_CYCLES_PER_MS[index] = min(max(median(rates), 1e5), 1e7)  # an SM clock of 0.1 to 10 GHz
    return _SLEEP_CYCLES_PER_MS[index]


def _cuda_sync_overhead_ms(flush: torch.Tensor, device: torch.device, cover: int = 0, n: int = 21,
                           clock: Callable[[], float] = time.perf_counter) -> tuple[float, float, float]:
    """The timer's own latency, from the timed call's sequence with no call (``pre; flush; cover; start; end;
    end.synchronize(); synchronize(); fin; synchronize()``): (median end -> fin, the GPU time from the stream's
    end to the last event; the tail limit: min(twice the median of |first - second synchronize's host time|
    + 0.02 ms, 0.1 ms), the quantity a timed call is judged on; the lead: the median pre -> start, the flush and
    the cover with nothing beside them)."""
    latency, waits, leads = [], [], []
    for _ in range(n):
        pre, start, end, fin = (torch.cuda.Event(enable_timing=True) for _ in range(4))
        pre.record()
        reset_persisting_l2()  # (the timed call's own sequence, so that its lead is the same)
        flush.zero_()
        if cover:
            torch.cuda._sleep(cover)
        start.record()
        end.record()
        end.synchronize()
        h0 = clock()
        torch.cuda.synchronize(device)
        h1 = clock()
        fin.record()
        torch.cuda.synchronize(device)
        waits.append(abs((h1 - h0) - (clock() - h1)) * 1e3)
        latency.append(end.elapsed_time(fin))
        leads.append(pre.elapsed_time(start))
    return median(latency), min(2 * median(waits) + 0.02, TAIL_LIMIT_CAP_MS), median(leads)
