"""The pure core of kevin: records, advantages, the GRPO loss, the turn splitter, and the rollout loop.

Everything here imports only torch and the standard library, except ``rollout`` and the policy package
(``kevin.core.policy``: the backends and their plumbing), which import transformers lazily. See
``kevin.core.types`` for the dimensions legend.
"""

import sys
from types import ModuleType as _ModuleType  # (the name `types` is the submodule kevin.core.types)

from kevin.core.advantages import group_advantages
from kevin.core.loss import grpo_loss, token_logprobs
from kevin.core.split import group_labels, split_trajectories
from kevin.core.types import Sample, Trajectory, Turn

__all__ = [
    "Sample",
    "Trajectory",
    "Turn",
    "group_advantages",
    "group_labels",
    "grpo_loss",
    "rollout",
    "split_trajectories",
    "token_logprobs",
]


def __getattr__(name):
    # rollout pulls in the prompt builder, the parser and the sandbox; import it on first use.
    if name == "rollout":
        from kevin.core.rollout import rollout

        return rollout
    raise AttributeError(f"module 'kevin.core' has no attribute {name!r}")


class _Core(_ModuleType):
    """kevin.core, whose ``rollout`` is always the function: importing the submodule ``kevin.core.rollout`` would
    otherwise bind the module to that name on the package (``from kevin.core import rollout`` then gave the module).
    The submodule stays reachable as ``sys.modules["kevin.core.rollout"]`` (``from kevin.core.rollout import ...``)."""

    def __setattr__(self, name, value):
        if name == "rollout" and isinstance(value, _ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Core
