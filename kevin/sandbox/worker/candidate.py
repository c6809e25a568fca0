"""The candidate process: a fresh, throw-away process that runs one candidate and reports raw facts.

``python -m kevin.sandbox.worker.candidate JOB REPORT_FD COMMAND_FD``, started by the parent in a private
scratch directory (cwd, HOME and TMPDIR), with a scrubbed environment, its own process group and, on the
CPU backend, an address-space limit. It never decides anything: it receives input tensors (never the
reference, its generator or the seed of the inputs), writes the candidate's outputs as safetensors and
reports what it observed over the private pipe; the parent compares and decides.

Order of work:

1. poison uninitialised memory (deterministic mode with ``fill_uninitialized_memory``: ``torch.empty``
   is NaN-filled; on CUDA the caching allocator is also pre-filled with NaN); snapshot numerics flags,
   trusted function identities and the thread count;
2. import the candidate (this is the compile stage: its ``load_inline`` builds, content-addressed);
   report ``imported`` and wait;
3. on ``go {inputs, ...}`` (sent when its device is free and the task's golden data exists) load the
   inputs file and delete it at once (it holds the recheck inputs: no later candidate code can read it), build
   ``ModelNew(*init_inputs)`` right after ``torch.manual_seed(init_seed)``;
4. for each input set: clone the inputs, run the candidate first (under the operator inventory of
   :mod:`._inventory`), check the output's exact type, device, that its memory comes from PyTorch's
   allocator (not ``from_blob`` over memory the candidate controls, e.g. pages that compute on first
   read), aliasing with the inputs, and that the inputs are unchanged; copy the outputs out;
5. send ``outputs`` and wait: the parent compares and answers ``time`` or ``stop``;
6. time with fresh inputs per call and rechecks at secret positions (:mod:`.timing`); report.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
from typing import Any

from kevin.sandbox.worker import channel as _worker


def _tag(exc: BaseException, phase: str) -> BaseException:
    try:
        exc.phase = phase  # type: ignore[attr-defined]
    except AttributeError:
        pass
    return exc


def harness_write(save: Any, tensors: dict[str, Any], path: str, reference_bytes: int | None = None) -> None:
    """``save(tensors, path)``, the harness's own file for the parent. An I/O failure of it (a full disk: an
    ``OSError``, or safetensors' own error naming an I/O error) becomes `HarnessError`, which the parent
    reports as the sandbox's failure, unless the tensors are larger than the reference's outputs
    (``reference_bytes``): a kernel whose outputs filled the disk failed by itself."""
    try:
        save(tensors, path)
    except Exception as exc:
        size = sum(t.nbytes for t in tensors.values())
        if (isinstance(exc, OSError) or "I/O error" in str(exc)) and reference_bytes is not None \
                and size <= reference_bytes:
            raise _worker.HarnessError(f"{type(exc).__name__}: {exc}") from exc
        raise


def main(job: dict[str, Any], channel: _worker.Channel) -> None:
    backend = job["backend"]
    _worker.apply_limits(job.get("memory_limit") if backend == "cpu" else None)
    import torch
    from safetensors.torch import load_file, save_file

    from kevin.sandbox.build import extension as _extension, pch as _pch
    from kevin.sandbox.worker import guards as _guards, inventory as _inventory, timing

    if backend == "cuda":  # the harness's own kernel, before any candidate code: failing here is not the candidate's
        try:
            timing.load_permute(job["permute_lib"], job["permute_sha256"])
        except (OSError, RuntimeError) as exc:
            raise _worker.HarnessError(f"loading the sandbox's permutation kernel: {exc}") from exc
    # What decides is bound here, before any candidate code runs: replacing the module attributes later changes
    # nothing this function calls (and the tripwires report the replacement).
    time_calls, profiled_ops, op_inventory = timing.time_calls, _inventory.ProfiledOps, _inventory.OpInventory
    pin, on_device = timing.pin, timing.on_device
    send, receive, mark = channel.send, channel.receive, channel.mark  # bound before the candidate runs
    warm_up_dispatch_mode()
    set_deterministic(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    torch.set_grad_enabled(False)
    wires = _guards.Tripwires()
    threads0 = wires.threads
    threads0_native = _guards.native_threads()
    rng = random.Random(secrets.randbits(64))  # seeded before any candidate code runs (it could fix randbits)

    # ---- import: candidate code enters the process here (its load_inline builds, content-addressed)
    send("import_begin")
    cache_dir = os.path.dirname(job["ext_root"])
    _extension.install(job["ext_root"], backend, on_build=lambda path: send("build_dir", path=path),
                       pch_root=_pch.root(cache_dir),
                       obj_root=os.path.join(cache_dir, "obj") if job.get("object_cache", True) else None,
                       light=job.get("light_prelude", True), niceness=int(job.get("compile_niceness", 0)))
    try:
        module = _extension.import_candidate(job["candidate"])
    except BaseException as exc:
        raise _tag(exc, "import")
    violations: list[str] = []
    rules: set[str] = set()  # the rule family of each violation ("dynamic/<name>"), for the run's hack telemetry
    reported: set[str] = set()

    def flag(rule: str, message: str) -> None:
        violations.append(message)
        rules.add(f"dynamic/{rule}")

    def audit(when: str) -> None:
        """The tripwires against their state before import; each change is reported once, when first seen."""
        changes = wires.changes()
        for c in changes:
            if c not in reported:
                flag("tripwire", f"{when}: {c}")
        reported.update(changes)

    audit("after import")
    send("imported")

    # ---- the parent hands over a device and the task's inputs once both are free / ready
    command = receive()
    if not command.startswith("go "):
        return
    spec = json.loads(command[3:])
    device = torch.device("cuda:0" if backend == "cuda" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        _prefill_cuda_allocator(device)
    tensors = load_file(spec["inputs"])
    os.unlink(spec["inputs"])  # read once, before any more candidate code runs: the rechecks are in it

    def args_of(entries: list[dict[str, Any]], prefix: str) -> list[Any]:
        return [tensors[f"{prefix}.in{j}"] if e["kind"] == "tensor" else e["value"] for j, e in enumerate(entries)]

    def to_dev(xs: list[Any]) -> list[Any]:
        return [x.to(device) if isinstance(x, torch.Tensor) else x for x in xs]

    sets = [args_of(e, f"set{k}") for k, e in enumerate(spec["sets"])]
    rechecks = [args_of(e, f"re{r}") for r, e in enumerate(spec["rechecks"])]
    init_inputs = [tensors[f"init.in{j}"] if e["kind"] == "tensor" else e["value"] for j, e in enumerate(spec["init_inputs"])]
    timing_args = dict(device=device, n_warmup=int(job["n_warmup"]), n_trials=int(job["n_trials"]),
                       budget_s=float(job["budget_s"]), launch_cover_us=float(job["launch_cover_us"]))

    model_cls = getattr(module, "ModelNew", None)
    if not isinstance(model_cls, type):
        raise _tag(TypeError("the program defines no class `ModelNew`"), "build")
    torch.manual_seed(int(spec["init_seed"]))
    try:
        model = model_cls(*init_inputs)
        if isinstance(model, torch.nn.Module):
            model = model.to(device).train(bool(job.get("train_mode", True)))
    except BaseException as exc:
        raise _tag(exc, "build")
    send("model_ready")

    # ---- correctness: the candidate runs first, on clones
    outputs: dict[str, torch.Tensor] = {}
    torch_ops: dict[str, int] = {}
    for k, raw in enumerate(sets):
        originals = to_dev(raw)
        args = [x.clone() if isinstance(x, torch.Tensor) else x for x in originals]
        inventory = op_inventory() if job.get("inventory", True) else contextlib.nullcontext()
        profiled = profiled_ops() if job.get("inventory", True) else contextlib.nullcontext()
        try:
            with profiled, inventory:
                out = model(*args)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        except BaseException as exc:
            raise _tag(exc, f"forward on input set {k}")
        n_threads = _guards.python_threads()
        if n_threads != threads0:
            flag("threads", f"input set {k}: forward left {n_threads - threads0} extra Python thread(s) running")
        for seen in (inventory, profiled):
            if isinstance(seen, (op_inventory, profiled_ops)):
                for op in seen.compute_ops:
                    torch_ops[op] = max(torch_ops.get(op, 0), seen.ops[op])
        # exactly a tuple or list, never a subclass: its __iter__ would run the candidate's code when read here
        outs = list(out) if type(out) is tuple or type(out) is list else [out]
        for i, o in enumerate(outs):
            if type(o) is not torch.Tensor:
                flag("outputs", f"input set {k}: output {i} is a {type(o).__name__}, not exactly a torch.Tensor")
                continue
            if o.device != device:
                flag("outputs", f"input set {k}: output {i} is on {o.device}, expected {device}")
            if not o.untyped_storage().resizable():
                flag("outputs", f"input set {k}: output {i} is not in memory from PyTorch's allocator "
                     "(torch::from_blob, numpy or foreign memory); allocate it with torch::empty")
            if _aliases(o, args):
                flag("aliasing", f"input set {k}: output {i} shares memory with an input (return a new tensor)")
            outputs[f"set{k}.out{i}"] = o.detach().to("cpu", copy=True).contiguous()
        changed = [j for j, (a, b) in enumerate(zip(args, originals)) if isinstance(a, torch.Tensor) and not _same_bits(a, b)]
        if changed:
            flag("input_mutation", f"input set {k}: the kernel modified its input(s) {changed} in place")
        del out, outs, args
        audit(f"input set {k}")  # after every set: an object replaced for one set and put back is still seen
        del originals
    if device.type == "cuda":
        # Give the device back what this process cached (the NaN prefill, the sets): it may now wait long for its
        # timing, and dozens of processes waiting with gigabytes each could leave too little for the one timed.
        torch.cuda.empty_cache()
    out_path = os.path.join(os.getcwd(), "outputs.safetensors")
    harness_write(save_file, outputs, out_path, spec.get("output_bytes"))
    shapes = [(outputs[f"set0.out{i}"].shape, outputs[f"set0.out{i}"].dtype)
              for i in range(sum(k.startswith("set0.") for k in outputs))]
    send("outputs", file=out_path, violations=violations, rules=sorted(rules), torch_ops=torch_ops)
    if device.type == "cuda" and int(spec.get("pin_bytes", 0)) > 0:  # while the parent compares: the copy inside
        tensors.clear()  # the timing's hold then runs at full speed; the parent asks for the hold after "pinned"
        pin(sets + rechecks, max_bytes=int(spec["pin_bytes"]))
        send("pinned")
    if receive() != "time":
        return

    # ---- timing: every timed call made alike; the rechecks' places are known only to time_calls
    pool, recheck_args = on_device(sets, device), on_device(rechecks, device)

    def null_call(args: list[Any]) -> Any:
        """The harness's stand-in for the forward in the null calls: fresh outputs of the forward's shapes."""
        outs = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in shapes]
        return outs[0] if len(outs) == 1 else outs

    send("timing_begin")
    # The NaN fill of every allocation would be timed as the candidate's work (the baseline has none):
    # off while timing; stale or uninitialised outputs in timed calls are caught by the rechecks instead.
    set_deterministic(False)
    timing_flags = _guards.numerics_flags()  # the flags are compared with these while timing
    try:
        run = time_calls(lambda a: model(*a), pool, rng=rng, rechecks=recheck_args, **timing_args,
                         inventory=profiled_ops if job.get("inventory", True) else None,
                         audit=lambda full: wires.changes(dispatcher=full, flags=timing_flags),
                         null_call=null_call, mark=mark)
    except BaseException as exc:
        raise _tag(exc, "timing")
    set_deterministic(True)
    send("timing_end", n_calls=int(job["n_warmup"]) + len(run.samples_ms))
    for error in run.errors:  # first: a change seen after a timed call names that call
        flag("timed_calls", error)
    reported.update(run.audit_changes)
    audit("after timing")
    if device.type == "cuda":
        # The parent lets others onto the device on "released" (correctness runs, a decoding policy) and hands it to
        # the next timing on the report, while this process lives on until it is killed: what the timing held (the
        # pool, the rechecks' sources, the allocator's cache of its fresh inputs and kept copies: gigabytes at
        # KernelBench sizes) goes back first, but for the rechecked calls' outputs, copied to the host after it.
        del pool, recheck_args
        torch.cuda.empty_cache()
    send("released")
    re_out: dict[str, torch.Tensor] = {}
    positions = list(run.recheck_outputs)  # entry r: recheck r's position
    for r, p in enumerate(run.recheck_outputs):
        snap = run.recheck_outputs[p]
        if isinstance(snap, str) or snap is None:
            flag("timed_calls", f"timed call {p}: {snap or 'no output'}")
            continue
        for i, o in enumerate(snap):
            re_out[f"re{r}.out{i}"] = o.to("cpu").contiguous()
    run.recheck_outputs = {}
    if device.type == "cuda":
        snap = o = None  # the loop's last references
        torch.cuda.empty_cache()  # their device memory too, before the device goes to the next timing on the report
    re_path = os.path.join(os.getcwd(), "rechecks.safetensors")
    harness_write(save_file, re_out, re_path, spec.get("recheck_bytes"))
    send("report", timing=run.summary(), recheck_file=re_path, recheck_positions=positions,
         violations=violations, rules=sorted(rules), native_threads=[threads0_native, _guards.native_threads()])
    receive()  # stay mapped until the parent has read the libraries once more (it kills this process after)


def warm_up_dispatch_mode() -> None:
    """Dispatch one op under a TorchDispatchMode: the first time imports torch._dynamo (~1 s), which wraps
    ``torch.manual_seed``; done before the identities are captured, so that benign patch is not flagged."""
    import torch

    from kevin.sandbox.worker import inventory as _inventory

    with _inventory.OpInventory():
        torch.zeros(1).clone()


def set_deterministic(mode: bool) -> None:
    """``torch.use_deterministic_algorithms(mode, warn_only=True)`` without its import of torch._inductor
    (which costs 1-2 s per process and only configures the compiler, which candidates may not use)."""
    import torch

    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is not None:
        setter(mode, warn_only=mode)
    else:
        torch.use_deterministic_algorithms(mode, warn_only=True)


def _aliases(out: Any, args: list[Any]) -> bool:
    """True when ``out``'s bytes overlap any input tensor's storage."""
    import torch

    if out.numel() == 0:
        return False
    o0 = out.untyped_storage().data_ptr()
    o1 = o0 + out.untyped_storage().nbytes()
    for a in args:
        if isinstance(a, torch.Tensor) and a.numel():
            a0 = a.untyped_storage().data_ptr()
            a1 = a0 + a.untyped_storage().nbytes()
            if o0 < a1 and a0 < o1:
                return True
    return False


def _same_bits(a: Any, b: Any) -> bool:
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return bool(torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)))


def _prefill_cuda_allocator(device: Any, max_bytes: int = 8 << 30, block_bytes: int = 512 << 20) -> None:
    """Fill up to ``max_bytes`` of the caching allocator with NaN and free it: stale reads see NaN (hack B5).

    In blocks of ``block_bytes``, each its own segment: a tensor still alive after the correctness run (the model,
    a workspace the kernel keeps) then pins one block's segment when the cache is emptied, not all of them, so a
    process waiting for its timing does not hold gigabytes of the device."""
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    left = min(max_bytes, int(free * 0.25))
    blocks = []
    while left >= 4:
        n = min(block_bytes, left)
        blocks.append(torch.full((n // 4,), float("nan"), dtype=torch.float32, device=device))
        left -= n
    torch.cuda.synchronize(device)
    del blocks


if __name__ == "__main__":
    _worker.run_main(main)
