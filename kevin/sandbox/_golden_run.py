"""Parent side of the golden process: start it for a batch of tasks, collect what it produced.

Golden outputs arrive as safetensors bytes over a private pipe and live only in the parent's memory: no
golden output is ever on disk, where a candidate process of the same user could read it. The inputs file
stays on disk, read-only: each candidate gets a hard link to it (`hand_over`), which its worker unlinks once
read. Copies would cost the disk a task's inputs (gigabytes at KernelBench sizes) per candidate at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Sequence

from . import _process
from kevin.sandbox.build import harness as _harness
from .config import SandboxConfig


@dataclass(frozen=True)
class Golden:
    """What the golden process produced for one task (``error`` set when the reference failed)."""

    key: str
    inputs_path: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict, repr=False)
    sub_outputs: dict[str, Any] = field(default_factory=dict, repr=False)
    error: str | None = None
    inputs_signature: tuple[int, ...] = ()

    @property
    def n_sets(self) -> int:
        return len(self.meta.get("sets", []))

    @property
    def n_rechecks(self) -> int:
        return len(self.meta.get("rechecks", []))

    def set_outputs(self, prefix: str, n: int) -> list[Any]:
        return [self.outputs[f"{prefix}.out{i}"] for i in range(n)]

    def inputs_intact(self) -> bool:
        """Whether the inputs file is still the one the golden outputs were computed from (same inode, size,
        modification time and read-only mode): a candidate that wrote to its link would change the inputs of
        every later candidate of the task."""
        return bool(self.inputs_signature) and file_signature(self.inputs_path) == self.inputs_signature


def file_signature(path: str) -> tuple[int, ...]:
    """(inode, size, mtime in ns, mode) of ``path``; () when it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return ()
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode


def hand_over(golden: Golden, dest: str) -> None:
    """Put the golden's inputs at ``dest`` for one candidate: a hard link (no copy of gigabytes), or a copy where
    no link can be made (``dest`` on another filesystem)."""
    try:
        os.link(golden.inputs_path, dest)
    except OSError:
        shutil.copyfile(golden.inputs_path, dest)


def worker_env(scratch: str, gpu: str | None) -> dict[str, str]:
    return _process.scrubbed_env(scratch, {"CUDA_VISIBLE_DEVICES": gpu if gpu is not None else ""})


def run_golden(
    tasks: Sequence[tuple[str, str]],
    *,
    root: str,
    gpu: str | None,
    config: SandboxConfig,
    seed: int,
    mode: str = "golden",
    baseline_keys: frozenset[str] = frozenset(),
    n_rechecks: int | None = None,
    shared: Callable[[], ContextManager[Any]] = contextlib.nullcontext,
    alone: Callable[[], ContextManager[Any]] = contextlib.nullcontext,
    zygote: _process.Zygote | None = None,
    permute: _harness.Built | None = None,
) -> dict[str, Golden]:
    """Run one golden process over ``tasks`` = [(key, source)]; returns key -> Golden.

    ``gpu`` is the physical GPU id (None = CPU). ``baseline_keys``: tasks whose reference is also timed, once per
    name of ``config.baselines_for(backend)``: ``meta["baselines"]`` = {name: timing summary}, ``meta["baseline"]``
    = the configured ``config.baseline``'s, ``meta["baseline_errors"]`` = {name: error} for any that failed.
    ``shared()`` is held while a task's reference runs and compiles, ``alone()`` while its baselines are timed
    (the Sandbox passes its device gate's shared and exclusive admissions); nothing while the process starts.
    Time spent waiting for them does not count against ``config.golden_timeout_s``. With ``zygote`` the process
    is forked from it, as the candidates are, so that the reference is timed where they are (the same session, at
    the same niceness).
    """
    if gpu is not None and permute is None:  # nothing started yet
        raise ValueError("a golden process on a GPU needs the sandbox's permutation kernel (harness.build_permute)")
    scratch = tempfile.mkdtemp(prefix="golden-", dir=root)
    specs = []
    for key, source in tasks:
        out_dir = os.path.join(scratch, key)
        os.makedirs(out_dir, exist_ok=True)
        specs.append({"key": key, "source": source, "out_dir": out_dir, "baseline": key in baseline_keys})
    job = {
        "mode": mode,
        "device": "cuda:0" if gpu is not None else "cpu",
        "niceness": _process.niceness("cuda" if gpu is not None else "cpu"),  # as the candidates' (timings compared)
        "seed": seed,
        "n_sets": config.n_input_sets,
        "train_mode": config.train_mode,
        "n_rechecks": config.n_rechecks if n_rechecks is None else n_rechecks,
        "tasks": specs,
        "baselines": list(config.baselines_for("cuda" if gpu is not None else "cpu")),
        "timing": {"n_warmup": config.n_warmup, "n_trials": config.n_trials, "budget_s": config.timing_budget_s,
                   "launch_cover_us": config.launch_cover_us},
    }
    if permute is not None:  # a CUDA worker's fresh inputs
        job["permute_lib"], job["permute_sha256"] = permute.path, permute.sha256
    worker = _process.Worker("kevin.sandbox.worker.golden", job, scratch=scratch, env=worker_env(scratch, gpu),
                             zygote=zygote, data_pipe=True)
    deadline = time.monotonic() + config.golden_timeout_s * max(1, len(specs))
    status: dict[str, str | None] = {}
    outputs: dict[str, dict[str, Any]] = {}
    held = contextlib.ExitStack()

    def admit(gate: Callable[[], ContextManager[Any]], answer: str) -> float:
        """Leave the admission held, enter ``gate``, tell the worker; the seconds it waited."""
        held.close()
        t0 = time.monotonic()
        held.enter_context(gate())
        worker.send(answer)
        return time.monotonic() - t0

    with held:
        while True:
            msg = worker.next(deadline)
            if msg is None:
                break
            if msg.event == "need_device":
                deadline += admit(shared, "go")
            elif msg.event == "ready_to_time":
                deadline += admit(alone, "time")
            elif msg.event == "timed":
                held.close()
            elif msg.event == "golden":
                from safetensors.torch import load as load_bytes

                outputs[str(msg.data["key"])] = load_bytes(worker.read_data(int(msg.data["nbytes"])))
            elif msg.event in ("task_done", "task_error"):
                held.close()
                status[msg.data["key"]] = (None if msg.event == "task_done"
                                           else str(msg.data.get("message", "unknown error")))
            elif msg.event in ("error", "done"):
                break
    timed_out = worker.timed_out(deadline)
    rc = worker.finish(time.monotonic() + 30)
    tail = worker.log_tail()
    results: dict[str, Golden] = {}
    for spec in specs:
        key = spec["key"]
        if key not in status:
            why = "timed out" if timed_out else f"the golden process ended ({_process.describe_exit(rc)})"
            results[key] = Golden(key, error=f"reference not computed: {why}\n{tail}")
        elif status[key] is not None:
            results[key] = Golden(key, error=f"the reference failed: {status[key]}")
        elif key not in outputs:
            results[key] = Golden(key, error="the golden process sent no outputs")
        else:
            results[key] = load_golden(key, spec["out_dir"], outputs[key], keep_sub=(mode == "calibrate"))
    return results


def load_golden(key: str, out_dir: str, outputs: dict[str, Any], *, keep_sub: bool) -> Golden:
    import json

    from safetensors.torch import load_file

    with open(os.path.join(out_dir, "meta.json")) as f:
        meta = json.load(f)
    sub = {}
    sub_path = os.path.join(out_dir, "sub.safetensors")
    if keep_sub and os.path.exists(sub_path):
        sub = load_file(sub_path)
    inputs_path = os.path.join(out_dir, "inputs.safetensors")
    os.chmod(inputs_path, 0o444)  # candidates get links to it: none may write through its own
    return Golden(key, inputs_path=inputs_path, meta=meta, outputs=outputs, sub_outputs=sub,
                  inputs_signature=file_signature(inputs_path))


def load_inputs(golden: Golden) -> dict[str, Any]:
    """The input tensors of a golden record (``set{k}.in{j}``, ``re{r}.in{j}``, ``init.in{j}``)."""
    from safetensors.torch import load_file

    return load_file(golden.inputs_path)


def argument_list(golden: Golden, tensors: dict[str, Any], prefix: str) -> list[Any]:
    """Rebuild one argument list (tensors and plain values) of set ``prefix`` ("set0", "re1")."""
    if prefix.startswith("set"):
        entries = golden.meta["sets"][int(prefix[3:])]["inputs"]
    else:
        entries = golden.meta["rechecks"][int(prefix[2:])]["inputs"]
    return [tensors[f"{prefix}.in{j}"] if e["kind"] == "tensor" else e["value"] for j, e in enumerate(entries)]


def cleanup(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
