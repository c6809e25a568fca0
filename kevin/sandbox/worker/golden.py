"""The golden process: the only place the reference `Model` runs. It never sees candidate code.

``python -m kevin.sandbox.worker.golden JOB REPORT_FD COMMAND_FD``. For every task of the job it

1. executes the task source (``Model``, ``get_inputs``, ``get_init_inputs``) in a fresh namespace;
2. builds ``Model(*get_init_inputs())`` right after ``torch.manual_seed(init_seed)`` and moves it to the
   device (the candidate builds ``ModelNew`` after the same seed, so equal parameters get equal values);
3. draws ``n_sets`` correctness sets and ``n_rechecks`` recheck sets from the secret seed
   (:mod:`._inputs`), keeping a variant only where the reference stays finite on it;
4. computes golden outputs (and, in calibrate mode, the outputs on subsampled inputs);
5. times the reference with the candidate's protocol (:mod:`.timing`) when asked, once per baseline of the
   job (eager, eager with TF32, ``torch.compile``; `time_baselines`);
6. writes ``inputs.safetensors`` (``sub.safetensors``) and ``meta.json``, and sends the golden outputs to
   the parent as safetensors bytes over a private pipe: they are never on disk.

The parent admits it to the device in two steps, as it admits candidates: it asks (``need_device``) before a
task's first device work and waits for ``go``, which the parent sends once the device may be shared (steps
2-4 and the ``torch.compile`` warm-up); it asks again (``ready_to_time``) and waits for ``time``, sent once
the device is its alone, before the baselines are timed, and says ``timed`` after. Only the timing excludes
other work: goldens of many tasks, each tens of seconds of imports and compilation, no longer queue one
behind the other for the whole device.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import time
from typing import Any, Callable, Iterator

import numpy as np
import torch
from safetensors.torch import save as safetensors_bytes
from safetensors.torch import save_file

from kevin.sandbox.worker import guards as _guards, inputs as _inputs, channel as _worker, timing
from kevin.sandbox.worker.timing import on_device



def permuted(v: torch.Tensor, gen: np.random.Generator) -> torch.Tensor:
    """``v`` with its elements in a random order drawn from ``gen`` (same shape, dtype and device)."""
    return timing._numpy_permuted(v.detach().to("cpu").reshape(-1), gen).to(v.device).reshape(v.shape)

def load_task_namespace(source: str) -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": "kevin_reference"}
    exec(compile(source, "<reference>", "exec"), ns)  # the task source is trusted
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if name not in ns:
            raise ValueError(f"task source defines no `{name}`")
    return ns


def as_output_list(out: Any) -> list[torch.Tensor]:
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
        raise TypeError(f"the reference returned {type(out).__name__}, not a tensor or a tuple of tensors")
    return outs


def jsonable(value: Any) -> Any:
    json.dumps(value)
    return value


def run_reference(model: Any, inputs: list[Any], device: torch.device) -> list[torch.Tensor]:
    args = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
    with torch.no_grad():
        outs = as_output_list(model(*args))
    return [o.detach().to("cpu").contiguous() for o in outs]


def draw_sets(ns: dict[str, Any], model: Any, job: dict[str, Any], key: str, device: torch.device):
    """(names, inputs, outputs) of the correctness sets; variants fall back to the task's own draw."""
    secret = int(job["seed"])
    names, sets, outs = [], [], []
    for k in range(int(job["n_sets"])):
        seed = _inputs.derive_seed(secret, key, "set", k)
        torch.manual_seed(seed)
        base = list(ns["get_inputs"]())
        variant = _inputs.VARIANTS[k % len(_inputs.VARIANTS)]
        x = _inputs.apply_variant(base, variant, torch.Generator().manual_seed(seed ^ 0x5EED))
        y = None
        if variant != "task":
            try:
                y = run_reference(model, x, device)
            except Exception:  # noqa: BLE001 - a variant the reference cannot take falls back
                y = None
            if y is not None and not _inputs.all_finite(y):
                y = None
        if y is None:
            variant, x = "task", base
            y = run_reference(model, x, device)
        names.append(variant)
        sets.append(x)
        outs.append(y)
    return names, sets, outs


def input_entries(inputs: list[Any], prefix: str, tensors: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    """Put the tensors of one argument list in ``tensors`` as ``{prefix}.in{j}``; describe every argument."""
    spec = []
    for j, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            tensors[f"{prefix}.in{j}"] = x.detach().to("cpu").contiguous().clone()
            spec.append({"kind": "tensor", "nbytes": x.numel() * x.element_size()})
        else:
            spec.append({"kind": "value", "value": jsonable(x)})
    return spec


def admitted(channel: _worker.Channel, ask: str, answer: str, key: str) -> None:
    """Send ``ask`` and block until the parent answers ``answer`` (its device gate admitted this process)."""
    channel.send(ask, key=key)
    got = channel.receive()
    if got != answer:
        raise RuntimeError(f"the parent answered {got!r} to {ask!r} (expected {answer!r})")


def golden_for_task(spec: dict[str, Any], job: dict[str, Any], device: torch.device, channel: _worker.Channel) -> dict[str, Any]:
    key, out_dir = spec["key"], spec["out_dir"]
    admitted(channel, "need_device", "go", key)
    ns = load_task_namespace(spec["source"])
    init_inputs = list(ns["get_init_inputs"]())
    init_seed = _inputs.derive_seed(int(job["seed"]), key, "init")
    torch.manual_seed(init_seed)
    model = ns["Model"](*init_inputs)
    if isinstance(model, torch.nn.Module):
        model = model.to(device).train(bool(job.get("train_mode", True)))
    names, sets, outs = draw_sets(ns, model, job, key, device)

    in_tensors: dict[str, torch.Tensor] = {}
    gold: dict[str, torch.Tensor] = {}
    meta: dict[str, Any] = {"key": key, "init_seed": init_seed, "set_names": names, "sets": [], "rechecks": []}
    init_spec = []
    for j, v in enumerate(init_inputs):
        if isinstance(v, torch.Tensor):
            in_tensors[f"init.in{j}"] = v.detach().to("cpu").contiguous().clone()
            init_spec.append({"kind": "tensor"})
        else:
            init_spec.append({"kind": "value", "value": jsonable(v)})
    meta["init_inputs"] = init_spec
    for k, (x, y) in enumerate(zip(sets, outs)):
        meta["sets"].append({"inputs": input_entries(x, f"set{k}", in_tensors), "n_outputs": len(y)})
        for i, o in enumerate(y):
            gold[f"set{k}.out{i}"] = o
    # Recheck inputs are made the way the candidate's timed inputs are (every tensor of a correctness set
    # with its elements permuted by a secret permutation), so the candidate cannot tell a checked timed
    # call from an unchecked one.
    gen = np.random.default_rng(_inputs.derive_seed(int(job["seed"]), key, "recheck"))
    for r in range(int(job["n_rechecks"])):
        # which correctness set, drawn from the secret seed: with fewer rechecks than sets, a fixed r % n_sets left
        # the last set never rechecked, so its timed calls could be skipped unseen
        base = sets[int(gen.integers(len(sets)))]
        x = [permuted(v, gen) if isinstance(v, torch.Tensor) and v.numel() > 1 else v for v in base]
        y = run_reference(model, x, device)
        meta["rechecks"].append({"inputs": input_entries(x, f"re{r}", in_tensors), "n_outputs": len(y)})
        for i, o in enumerate(y):
            gold[f"re{r}.out{i}"] = o
    if job["mode"] == "calibrate":
        sub = {}
        for k, x in enumerate(sets):
            for i, o in enumerate(run_reference(model, _inputs.subsample(x), device)):
                sub[f"set{k}.out{i}"] = o
        save_file(sub, os.path.join(out_dir, "sub.safetensors"))

    if spec.get("baseline"):
        names = list(job.get("baselines") or ["eager"])
        meta["baselines"], errors = time_baselines(model, sets, names, job, device,
                                                   alone=lambda: admitted(channel, "ready_to_time", "time", key))
        channel.send("timed", key=key)
        if errors:
            meta["baseline_errors"] = errors
        if names[0] in meta["baselines"]:
            meta["baseline"] = meta["baselines"][names[0]]
    save_file(in_tensors, os.path.join(out_dir, "inputs.safetensors"))
    # Golden outputs never touch the disk (a candidate process of the same user could read a file):
    # they go to the parent as safetensors bytes over the private data pipe.
    channel.send_bytes("golden", safetensors_bytes(gold), key=key)
    meta["device_name"] = device_name(device)
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f)
    return meta


# PyTorch's own float32 settings, read at import: the "eager" and "compile" baselines are timed under them
_DEFAULTS = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision())


@contextlib.contextmanager
def _float32_settings(matmul_tf32: bool, cudnn_tf32: bool, precision: str) -> Iterator[None]:
    """Matmul and cuDNN TF32 and the float32 matmul precision inside the block; the previous settings after."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())
    try:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul_tf32, cudnn_tf32
        torch.set_float32_matmul_precision(precision)
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[0], saved[1]
        torch.set_float32_matmul_precision(saved[2])


def exact_float32() -> contextlib.AbstractContextManager[None]:
    """Full float32 for the golden outputs. PyTorch lets cuDNN convolutions use TF32 by default
    (``torch.backends.cudnn.allow_tf32`` is True), which rounds a convolution's inputs to 10 mantissa bits: a
    reference computed that way differs from an honest float32 kernel by more than the 1e-3 tolerance."""
    return _float32_settings(False, False, "highest")


def pytorch_defaults() -> contextlib.AbstractContextManager[None]:
    """PyTorch's default float32 settings (cuDNN TF32 on, matmul TF32 off): what "eager" is timed under."""
    return _float32_settings(*_DEFAULTS)


def tf32_allowed() -> contextlib.AbstractContextManager[None]:
    """TF32 for float32 matmuls and cuDNN convolutions inside the block (the "tf32" baseline)."""
    return _float32_settings(True, True, "high")


def compiled(model: Any, pool: list[list[Any]], n_warmup: int) -> tuple[Callable[..., Any], float]:
    """``torch.compile(model)`` (default mode) and the seconds its untimed warm-up calls took (the compilation).

    One compile thread: no pool of inductor workers outlives the golden process.
    """
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1
    fn = torch.compile(model)
    t0 = time.perf_counter()
    with torch.no_grad():
        for k in range(max(2, n_warmup)):  # the first call compiles; later ones would show a recompilation
            fn(*pool[k % len(pool)])
    return fn, time.perf_counter() - t0


def time_baselines(model: Any, sets: list[list[Any]], names: list[str], job: dict[str, Any],
                   device: torch.device, alone: Callable[[], None] = lambda: None,
                   ) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Time the reference on the input ``sets`` once per baseline name ("eager", "tf32", "compile") with the
    candidates' protocol.

    Every baseline is prepared first (``torch.compile`` compiles in its warm-up calls), then ``alone()`` returns
    once the device is this process's alone, then all are timed. While it waits for the device (behind every
    timing queued before it) the process holds only its model: the inputs go to the device after ``alone()``
    and the allocator's cache (the reference's outputs, the warm-up) is handed back before it, so that goldens
    waiting in line do not take the memory the timed process needs. Returns ({name: timing summary}, {name:
    error}): a baseline that fails (a model torch.compile cannot compile) is left out with its error, and the
    others are still timed.
    """
    summaries: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    prepared: dict[str, tuple[Callable[..., Any], Callable[[], Any], dict[str, Any]]] = {}
    pool = on_device(sets, device) if "compile" in names else []
    for name in names:
        try:
            if name == "compile":
                fn, compile_s = compiled(model, pool, int(job["timing"]["n_warmup"]))
                prepared[name] = fn, pytorch_defaults, {"compile_s": round(compile_s, 3)}
            elif name in ("eager", "tf32"):
                prepared[name] = model, (tf32_allowed if name == "tf32" else pytorch_defaults), {}
            else:
                raise ValueError(f"unknown baseline {name!r}")
        except Exception as exc:  # noqa: BLE001 - one baseline failing leaves the others and the golden data
            errors[name] = _worker.error_text(exc, 2000)
    del pool
    if device.type == "cuda":
        torch.cuda.empty_cache()
    alone()
    pool = on_device(sets, device)
    for name, (fn, settings, extra) in prepared.items():
        try:
            with settings(), torch.no_grad():
                run = timing.time_calls(
                    lambda args: fn(*args), pool, device=device, n_warmup=int(job["timing"]["n_warmup"]),
                    n_trials=int(job["timing"]["n_trials"]), budget_s=float(job["timing"]["budget_s"]),
                    rng=random.Random(int(job["seed"])), launch_cover_us=float(job["timing"]["launch_cover_us"]),
                    audit=same_audit_work(),
                )
            if not run.samples_ms:
                raise RuntimeError("no timed samples: " + "; ".join(run.errors[:2]))
            summaries[name] = {**run.summary(), **extra}
        except Exception as exc:  # noqa: BLE001 - one baseline failing leaves the others and the golden data
            errors[name] = _worker.error_text(exc, 2000)
    del pool, prepared
    if device.type == "cuda":  # the next timing starts on "timed", while this process still writes its inputs
        torch.cuda.empty_cache()
    return summaries, errors


def same_audit_work() -> Callable[[bool], list[str]]:
    """The candidate loop's audit between calls (`._guards.Tripwires`), for a trusted loop: the same work, so the
    reference and a candidate are timed by the same loop, but nothing is reported (a reference that changes a
    flag, e.g. a lazy import, must not switch the audit off for the rest of the loop)."""
    wires = _guards.Tripwires()

    def audit(recheck: bool) -> list[str]:
        wires.changes(dispatcher=recheck)
        return []

    return audit


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def main(job: dict[str, Any], channel: _worker.Channel) -> None:
    device = torch.device(job["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
        timing.load_permute(job["permute_lib"], job["permute_sha256"])
    for spec in job["tasks"]:
        try:
            with exact_float32():  # the baselines inside are timed under PyTorch's defaults
                golden_for_task(spec, job, device, channel)
            channel.send("task_done", key=spec["key"])
        except Exception as exc:  # noqa: BLE001 - a broken task is reported, the others still run
            channel.send("task_error", key=spec["key"], message=_worker.error_text(exc, 2000))
    channel.send("done")


if __name__ == "__main__":
    _worker.run_main(main)
    sys.exit(0)
