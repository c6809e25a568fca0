"""Argument checks done at once in the caller: device strings, task sources, cache keys.

Standard library only, except that asking for CUDA imports torch to see whether CUDA is there.
"""

from __future__ import annotations

import ast
import hashlib
import os
import threading
from dataclasses import dataclass

_AST = threading.Lock()


def parse_python(source: str) -> ast.Module:
    """``ast.parse(source)``, one thread at a time: CPython 3.11's AST constructor can raise a spurious
    ``SystemError: AST constructor recursion depth mismatch`` when threads parse at once (python/cpython#106905),
    and `Sandbox.evaluate_many` checks its candidates from many threads (an honest kernel was judged an internal
    error so)."""
    with _AST:
        return ast.parse(source)


@dataclass(frozen=True)
class DeviceSpec:
    """``backend`` ("cpu" or "cuda") and, for CUDA, the logical GPU indices this sandbox may use."""

    backend: str
    gpus: tuple[int, ...] = ()


def resolve_device(device: str) -> DeviceSpec:
    """"cpu" -> C++ backend; "cuda" -> every visible GPU; "cuda:N" -> GPU N. Raises at once when unusable.

    >>> resolve_device("cpu")
    DeviceSpec(backend='cpu', gpus=())
    """
    if not isinstance(device, str):
        raise ValueError(f"device must be a string such as 'cpu', 'cuda' or 'cuda:0', not {device!r}")
    if device == "cpu":
        return DeviceSpec("cpu")
    if device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError(
                f"device {device!r} was requested but CUDA is not available on this machine "
                "(use device='cpu' for the C++ backend)"
            )
        count = torch.cuda.device_count()
        if device == "cuda":
            return DeviceSpec("cuda", tuple(range(count)))
        idx = int(device[5:])
        if idx >= count:
            raise ValueError(f"device {device!r}: only {count} CUDA device(s) are visible")
        return DeviceSpec("cuda", (idx,))
    raise ValueError(f"unknown device {device!r}; expected 'cpu', 'cuda' or 'cuda:N'")


def physical_gpu(logical: int) -> str:
    """The CUDA_VISIBLE_DEVICES entry for a logical GPU index of this process."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or visible.strip() == "":
        return str(logical)
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    return ids[logical]


def validate_task_source(source: str, task_id: str = "") -> None:
    """ValueError unless the source parses and defines ``Model``, ``get_inputs`` and ``get_init_inputs``."""
    label = f"task {task_id!r}" if task_id else "task"
    try:
        tree = parse_python(source)
    except SyntaxError as exc:
        raise ValueError(f"{label}: source does not parse: {exc}") from None
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in names]
    if missing:
        raise ValueError(f"{label}: source defines no {', '.join('`' + m + '`' for m in missing)} (KernelBench format needed)")


def sha256(*parts: str) -> str:
    """Hex sha256 of the parts, each ended by a NUL; any string hashes (a candidate's lone surrogate included)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()
