"""`Task`: one KernelBench-format problem, with per-backend problem sizes."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

BACKENDS = ("cuda", "cpu")


@dataclass(frozen=True)
class Task:
    """A PyTorch reference program for the model to rewrite as a kernel.

    ``source`` is a KernelBench-format program: ``class Model(nn.Module)``, ``get_inputs()`` and
    ``get_init_inputs()``, with module-level size constants (``batch_size = 16``). ``sizes`` maps a
    backend to overrides of those constants, so one task has GPU sizes (eager runtime above 0.1 ms on an
    H200) and CPU sizes (well under a second on 2 cores). ``source_for(backend)`` applies them.

    >>> t = Task("demo", "N = 4096\\n", sizes={"cpu": {"N": 64}})
    >>> t.source_for("cpu")
    'N = 64\\n'
    """

    task_id: str
    source: str
    level: int | None = None
    name: str = ""
    sizes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, hash=False)
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not self.task_id:
            raise ValueError("Task.task_id must be a non-empty string")
        unknown = set(self.sizes) - set(BACKENDS)
        if unknown:
            raise ValueError(f"Task {self.task_id}: sizes for unknown backends {sorted(unknown)}")
        # Freeze the mappings so a Task cannot be changed after construction.
        object.__setattr__(self, "sizes", MappingProxyType({k: MappingProxyType(dict(v)) for k, v in self.sizes.items()}))
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))

    def source_for(self, backend: str) -> str:
        """The source with this backend's module-level constants substituted (unchanged if none)."""
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
        overrides = self.sizes.get(backend)
        if not overrides:
            return self.source
        return substitute_constants(self.source, overrides)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "source": self.source,
            "level": self.level,
            "name": self.name,
            "sizes": {k: dict(v) for k, v in self.sizes.items()},
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Task":
        return cls(
            task_id=str(d["task_id"]),
            source=d["source"],
            level=d.get("level"),
            name=d.get("name", "") or "",
            sizes=d.get("sizes") or {},
            metadata=d.get("metadata") or {},
        )


def substitute_constants(source: str, overrides: Mapping[str, Any]) -> str:
    """Rewrite top-level ``NAME = value`` assignments of ``source`` to ``NAME = overrides[NAME]``.

    Only simple module-level assignments to a single name are rewritten; every name in ``overrides``
    must be assigned at module level, else ValueError (a typo would silently keep the GPU size).
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    found: dict[str, tuple[int, int, int, int]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in overrides:
                found[name] = (node.value.lineno, node.value.col_offset, node.value.end_lineno, node.value.end_col_offset)
    missing = set(overrides) - set(found)
    if missing:
        raise ValueError(f"size overrides name constants not assigned at module level: {sorted(missing)}")
    # Replace from the bottom up so earlier offsets stay valid.
    for name, (l0, c0, l1, c1) in sorted(found.items(), key=lambda kv: kv[1], reverse=True):
        head = lines[l0 - 1][:c0]
        tail = lines[l1 - 1][c1:]
        lines[l0 - 1 : l1] = [head + repr(overrides[name]) + tail]
    return "".join(lines)
