"""Checkpoints that resume exactly: safetensors for every tensor, JSON for the rest, atomic on disk.

A checkpoint is a directory ``<root>/step_000012/`` holding, for each named state (``model``,
``optimizer``, ``scheduler``, ``sampler``, ``rng``, ``trainer``, ...), a ``<name>.safetensors`` with
its tensors and a ``<name>.json`` with everything else (the nesting, ints, floats, strings), plus a
``meta.json``. No pickles: a checkpoint can be read without running code from it.

Crash safety: the directory is written under a hidden temporary name next to its final place, every
file is flushed to disk, and only then is it renamed into place (``os.replace`` of a directory is
atomic on POSIX). A crash or Ctrl-C mid-save leaves a hidden ``.step_*.tmp-*`` directory that
:func:`latest_checkpoint` ignores and the next save removes; the checkpoints already there are
untouched.

Limits: states are plain nested dicts/lists/tuples of tensors and JSON scalars (what
``optimizer.state_dict()``, ``LambdaLR.state_dict()`` and :func:`rng_state` return).

Sharded (FSDP2) training: :func:`save_sharded_checkpoint` writes the model's and optimizer's shards with
torch.distributed.checkpoint (every process its own files, under ``sharded/``) into the same hidden directory as
the other states, which the main process renames into place once every process has written; it needs a filesystem
that every process sees (one node's disk, or a shared one across nodes). :func:`load_sharded_state` reads them back
into a model sharded over the same number of processes.

>>> tensors, skeleton = flatten_state({"step": 3, "w": torch.ones(2), "betas": (0.9, 0.99)})
>>> sorted(tensors), unflatten_state(skeleton, tensors)["betas"]
(['w'], (0.9, 0.99))
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any, Mapping

import torch

__all__ = [
    "flatten_state", "unflatten_state", "save_checkpoint", "load_checkpoint", "latest_checkpoint",
    "checkpoint_path", "prune_checkpoints", "rng_state", "set_rng_state", "training_state", "restore_training_state",
    "save_sharded_checkpoint", "load_sharded_state", "load_sharded_weights", "SHARDED",
]

_STEP_DIR = re.compile(r"^step_(\d+)$")


# --------------------------------------------------------------------------- nested state <-> (tensors, JSON)

def flatten_state(obj: Any, prefix: str = "") -> tuple[dict[str, torch.Tensor], Any]:
    """Split a nested state into ``{key: tensor}`` and a JSON-able skeleton that names those keys.

    Tensors become ``{"__tensor__": key}`` (key = their path, e.g. ``state.0.exp_avg``); dicts become
    ``{"__dict__": [[key, value], ...]}`` so int keys survive JSON; tuples ``{"__tuple__": [...]}``.
    """
    tensors: dict[str, torch.Tensor] = {}

    def enc(x: Any, path: str) -> Any:
        if isinstance(x, torch.Tensor):
            tensors[path] = x.detach().to("cpu", copy=True).contiguous()
            return {"__tensor__": path}
        if isinstance(x, Mapping):
            for k in x:
                if not isinstance(k, (str, int)):
                    raise TypeError(f"checkpoint dict key {k!r} at {path or '<root>'} must be str or int")
            return {"__dict__": [[k, enc(v, f"{path}.{k}" if path else str(k))] for k, v in x.items()]}
        if isinstance(x, tuple):
            return {"__tuple__": [enc(v, f"{path}.{i}" if path else str(i)) for i, v in enumerate(x)]}
        if isinstance(x, list):
            return [enc(v, f"{path}.{i}" if path else str(i)) for i, v in enumerate(x)]
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        raise TypeError(f"cannot checkpoint a {type(x).__name__} at {path or '<root>'}")

    return tensors, enc(obj, prefix)


def unflatten_state(skeleton: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    """Inverse of :func:`flatten_state`."""
    if isinstance(skeleton, list):
        return [unflatten_state(v, tensors) for v in skeleton]
    if isinstance(skeleton, dict):
        if "__tensor__" in skeleton:
            return tensors[skeleton["__tensor__"]]
        if "__tuple__" in skeleton:
            return tuple(unflatten_state(v, tensors) for v in skeleton["__tuple__"])
        if "__dict__" in skeleton:
            return {k: unflatten_state(v, tensors) for k, v in skeleton["__dict__"]}
        raise ValueError(f"malformed checkpoint skeleton: {sorted(skeleton)}")
    return skeleton


# --------------------------------------------------------------------------- RNG state

def rng_state() -> dict[str, Any]:
    """The global RNG states of Python, NumPy (when installed), torch CPU and the current CUDA device.

    One process per GPU (accelerate) samples on its current device only; reading every device's state
    would create a CUDA context on each GPU from each process.
    """
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {"python": [version, list(internal), gauss], "torch": torch.get_rng_state()}
    try:
        import numpy as np
        name, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = [name, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)]
    except ImportError:
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()  # this process's current device only
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` returned (the CUDA state onto the current device)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"].to(torch.uint8))
    if "numpy" in state:
        import numpy as np
        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"].to(torch.uint8))


# --------------------------------------------------------------------------- directories

def checkpoint_path(root: str | os.PathLike, step: int) -> Path:
    """``<root>/step_<step, 6 digits>``."""
    return Path(root) / f"step_{step:06d}"


def _complete_checkpoints(root: Path) -> list[tuple[int, Path]]:
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and (p / "meta.json").is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The complete checkpoint with the highest step under ``root``, or None."""
    found = _complete_checkpoints(Path(root))
    return found[-1][1] if found else None


def prune_checkpoints(root: str | os.PathLike, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` complete checkpoints (keep <= 0 keeps all); returns the deleted."""
    found = _complete_checkpoints(Path(root))
    doomed = [p for _, p in found[:-keep]] if keep > 0 else []
    for p in doomed:
        shutil.rmtree(p)
    return doomed


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def save_checkpoint(directory: str | os.PathLike, states: Mapping[str, Any], *, meta: Mapping[str, Any] | None = None) -> Path:
    """Write ``states`` (name -> nested state) to ``directory`` atomically; returns the directory.

    Files: ``<name>.safetensors`` + ``<name>.json`` per state, then ``meta.json`` (``meta`` plus the
    state names). An existing checkpoint at ``directory`` is replaced only after the new one is complete.
    """
    final = Path(directory)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(final)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    tmp.mkdir()
    _write_states(tmp, states, meta)
    return _commit(tmp, final)


def _remove_stale(final: Path) -> None:
    """Delete what an interrupted save of ``final`` left (hidden ``.<name>.*`` directories)."""
    for stale in final.parent.glob(f".{final.name}.*"):
        shutil.rmtree(stale, ignore_errors=True)


def _write_states(tmp: Path, states: Mapping[str, Any], meta: Mapping[str, Any] | None) -> None:
    """``<name>.safetensors`` + ``<name>.json`` per state, then ``meta.json``, into ``tmp``, each flushed to disk."""
    from safetensors.torch import save as st_save

    for name, state in states.items():
        if not re.fullmatch(r"[A-Za-z0-9_\-]+", name):
            raise ValueError(f"state name {name!r} must be a plain file name")
        tensors, skeleton = flatten_state(state)
        _write_file(tmp / f"{name}.safetensors", st_save(tensors))
        _write_file(tmp / f"{name}.json", json.dumps(skeleton).encode())
    _write_file(tmp / "meta.json", json.dumps({**dict(meta or {}), "states": list(states)}, indent=1).encode())


def _commit(tmp: Path, final: Path) -> Path:
    """Rename the complete ``tmp`` into ``final``, replacing an existing checkpoint only now."""
    if final.exists():
        old = final.parent / f".{final.name}.old-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old)
    else:
        os.replace(tmp, final)
    return final


def load_checkpoint(directory: str | os.PathLike, names: list[str] | None = None) -> dict[str, Any]:
    """Read the named states (all when None) back into nested dicts of CPU tensors, plus ``"meta"``."""
    from safetensors.torch import load_file

    d = Path(directory)
    meta = json.loads((d / "meta.json").read_text())
    out: dict[str, Any] = {"meta": meta}
    for name in names if names is not None else meta["states"]:
        skeleton = json.loads((d / f"{name}.json").read_text())
        out[name] = unflatten_state(skeleton, load_file(d / f"{name}.safetensors"))
    return out


# --------------------------------------------------------------------------- a trainer's whole state

def training_state(*, model: Any, optimizer: Any, scheduler: Any, sampler: Any, rngs: list, step: int) -> dict[str, Any]:
    """The states a recipe saves to resume exactly: trainable weights, optimizer, LR scheduler, task
    sampler, the RNG state of every process (``rngs[rank]``, see :func:`rng_state`) and the next step.

    Only parameters with ``requires_grad`` are saved (all of them in full fine-tuning, the adapters with
    LoRA); frozen weights are rebuilt from the run's config.
    """
    return {
        "model": {n: p for n, p in model.named_parameters() if p.requires_grad},
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "sampler": sampler.state_dict(),
        "rng": list(rngs),
        "trainer": {"step": int(step)},
    }


def restore_training_state(state: Mapping[str, Any], *, model: Any, optimizer: Any, scheduler: Any, sampler: Any,
                           rank: int = 0) -> int:
    """Load a :func:`training_state` (as read by :func:`load_checkpoint`) INTO the given objects and set this
    process's RNG state; returns the step to continue from. Raises ValueError when a trainable weight
    of ``model`` is missing from the checkpoint (a checkpoint of another model or LoRA setting). ``model`` and
    ``optimizer`` None: a sharded checkpoint's, which :func:`load_sharded_state` loaded."""
    if model is not None:
        missing = [n for n, p in model.named_parameters() if p.requires_grad and n not in state["model"]]
        if missing:
            raise ValueError(f"checkpoint lacks {len(missing)} trainable weights, e.g. {missing[:3]}")
        model.load_state_dict(state["model"], strict=False)
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    sampler.load_state_dict(state["sampler"])
    set_rng_state(state["rng"][min(rank, len(state["rng"]) - 1)])
    return int(state["trainer"]["step"])


# --------------------------------------------------------------------------- sharded (FSDP2) model and optimizer

SHARDED = "sharded"
"""The sub-directory of a checkpoint that holds the torch.distributed.checkpoint files of the model and optimizer."""


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _sharded_states(model: Any, optimizer: Any) -> dict[str, Any]:
    """``{"model", "optimizer"}``: this process's shards of the trainable weights and of their optimizer state, keyed
    by parameter name (torch.distributed.checkpoint.state_dict; frozen weights are rebuilt from the run's config)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    model_state, optim_state = get_state_dict(model, getattr(optimizer, "optimizer", optimizer),
                                              options=StateDictOptions(ignore_frozen_params=True))
    return {"model": model_state, "optimizer": optim_state}


def save_sharded_checkpoint(directory: str | os.PathLike, states: Mapping[str, Any], *, model: Any, optimizer: Any,
                            is_main: bool, processes: int, meta: Mapping[str, Any] | None = None) -> Path:
    """Every process: write the shards of ``model``'s trainable weights and ``optimizer``'s state (under ``sharded/``,
    one file per process) and, from the main process (``is_main``), the other ``states`` as :func:`save_checkpoint`
    does, all into one hidden directory renamed into place after every process has written. ``meta.json`` records
    ``sharded`` (how many ``processes`` wrote it and which states the shards hold)."""
    import torch.distributed.checkpoint as dcp

    final = Path(directory)
    tmp = final.parent / f".{final.name}.tmp-{SHARDED}"
    if is_main:
        final.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(final)
        tmp.mkdir()
    _barrier()
    dcp.save(_sharded_states(model, optimizer), checkpoint_id=str(tmp / SHARDED))
    _barrier()
    if is_main:
        _write_states(tmp, states, {**dict(meta or {}), SHARDED: {"processes": processes,
                                                                  "states": ["model", "optimizer"]}})
        _commit(tmp, final)
    _barrier()
    return final


def load_sharded_state(directory: str | os.PathLike, *, model: Any, optimizer: Any) -> None:
    """Every process: read a :func:`save_sharded_checkpoint`'s shards INTO ``model`` and ``optimizer`` (sharded as when
    saved; frozen weights are left as they are)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    state = _sharded_states(model, optimizer)
    dcp.load(state, checkpoint_id=str(Path(directory) / SHARDED))
    set_state_dict(model, getattr(optimizer, "optimizer", optimizer), model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"], options=StateDictOptions(ignore_frozen_params=True,
                                                                                 strict=False))


def load_sharded_weights(directory: str | os.PathLike, model: Any) -> dict[str, torch.Tensor]:
    """``{name: full tensor}`` of the trainable weights of ``model`` (a plain, unsharded module, as the run built it)
    read from a :func:`save_sharded_checkpoint` in one process (torch.distributed.checkpoint joins the shards)."""
    import torch.distributed.checkpoint as dcp

    weights = {n: torch.empty_like(p) for n, p in model.named_parameters() if p.requires_grad}
    dcp.load({"model": weights}, checkpoint_id=str(Path(directory) / SHARDED), no_dist=True)
    return weights
