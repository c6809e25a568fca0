"""The examples in the public docstrings run and give what they show."""

import doctest
import importlib

import pytest

MODULES = [
    "kevin.rewards",
    "kevin.rewards.score",
    "kevin.rewards.aggregate",
    "kevin.core.advantages",
    "kevin.core.loss",
    "kevin.core.split",
    "kevin.core.metrics",
    "kevin.core.policy",
    "kevin.core.rollout",
    "kevin.core.policy.tiny",
    "kevin.core.report",
    "kevin.core.batch",
    "kevin.core.cli",
    "kevin.core.checkpoint",
    "kevin.core.tracking",
    "kevin.sandbox.result",
    "kevin.sandbox.static",
    "kevin.sandbox.feedback",
    "kevin.data.task",
    "kevin.data.prompts",
    "kevin.data.parse",
    "kevin.data.loaders",
    "kevin.data.sampler",
    "kevin.data.synth",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no docstring example"
    assert result.failed == 0
