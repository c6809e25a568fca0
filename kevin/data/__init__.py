"""Tasks, loaders, the built-in suite, the program writer and the task synthesizer, prompts, the
response parser and the batch sampler.

    from kevin.data import Task, load_tasks, builtin_tasks, parse_response, build_messages

Every name is imported on first use (module ``__getattr__``), so ``import kevin.data`` is cheap and
never imports ``datasets`` or ``transformers``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "Task": "kevin.data.task",
    "load_tasks": "kevin.data.loaders",
    "save_tasks": "kevin.data.loaders",
    "validate_source": "kevin.data.loaders",
    "builtin_tasks": "kevin.data.builtin",
    "tasks_from_spec": "kevin.data.builtin",
    "synthesize_tasks": "kevin.data.synth",
    "BatchSampler": "kevin.data.sampler",
    "build_messages": "kevin.data.prompts",
    "Attempt": "kevin.data.prompts",
    "parse_response": "kevin.data.parse",
    "ParsedResponse": "kevin.data.parse",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily
    from kevin.data.builtin import builtin_tasks
    from kevin.data.loaders import load_tasks, save_tasks, validate_source
    from kevin.data.parse import ParsedResponse, parse_response
    from kevin.data.prompts import Attempt, build_messages
    from kevin.data.sampler import BatchSampler
    from kevin.data.synth import synthesize_tasks
    from kevin.data.task import Task


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kevin.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
