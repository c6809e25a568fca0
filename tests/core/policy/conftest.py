"""Fixtures of the policy-plumbing tests."""

import pytest
import torch


@pytest.fixture()
def fresh_dynamo():
    """Dynamo's caches emptied before and after the test: every compile of a model's forward is an entry of one code
    object, and past the recompile limit (8) Dynamo runs the forward eagerly, so a test that counts what a compiled
    graph holds would see nothing once earlier tests have compiled enough."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
