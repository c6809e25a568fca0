"""kevin.core.policy.attention: the compiled prefill's rotary (cos, sin) computed once, as one operator.

(The decode attention functions are tested with the policy, in tests/core/test_policy.py.)
"""

import copy
import re

import pytest
import torch

from kevin.core.policy import attention
from kevin.core.policy.decoding import model_static_cache
from kevin.core.policy.tiny import build_tiny_model, build_tiny_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def test_the_prefill_rotary_equals_the_models_own_cos_and_sin(tok):
    model = build_tiny_model(tok, seed=3).eval()
    rotary = model.model.rotary_emb
    x, positions = torch.zeros(2, 9, 8), torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [1, 1, 1, 0, 1, 2, 3, 4, 5]])
    own = rotary(x, positions)
    assert attention.install_prefill_rotary(model) == 1
    with attention.fresh_prefill(padded=True):
        ours = rotary(x, positions)
    assert all(torch.equal(a, b) for a, b in zip(own, ours))


def test_installing_the_prefill_rotary_twice_changes_nothing_more(tok):
    model = build_tiny_model(tok, seed=3).eval()
    assert attention.install_prefill_rotary(model) == 1
    assert attention.install_prefill_rotary(model) == 0


def test_outside_a_prefill_the_rotary_runs_its_own_forward(tok, monkeypatch):
    model = build_tiny_model(tok, seed=3).eval()
    attention.install_prefill_rotary(model)
    calls = []
    monkeypatch.setattr(torch.ops.kevin, "rotary_cos_sin", lambda *a: calls.append(a), raising=False)
    model.model.rotary_emb(torch.zeros(1, 4, 8), torch.arange(4)[None])
    assert calls == []


def test_a_copied_models_prefill_rotary_reads_its_own_frequencies(tok):
    model = build_tiny_model(tok, seed=3).eval()
    attention.install_prefill_rotary(model)
    twin = copy.deepcopy(model)
    twin.model.rotary_emb.inv_freq.mul_(2.0)
    x, positions = torch.zeros(1, 4, 8), torch.arange(4)[None]
    with attention.fresh_prefill(padded=False):
        cos, _ = model.model.rotary_emb(x, positions)
        twin_cos, _ = twin.model.rotary_emb(x, positions)
    assert not torch.equal(cos, twin_cos)


@pytest.mark.parametrize("install", [False, True])
def test_a_compiled_prefill_computes_cos_and_sin_outside_its_layers_kernels(tok, install):
    from torch._inductor.utils import run_and_get_code

    from kevin.core.policy.decoding import _cache_keyword

    torch._dynamo.reset()
    model = build_tiny_model(tok, seed=3).eval()
    if install:
        attention.install_prefill_rotary(model)
    cache = model_static_cache(model, 2, 32)
    cache.reset()
    prefill = torch.compile(model.__call__, dynamic=True)
    with torch.no_grad(), attention.fresh_prefill(padded=False):
        _, code = run_and_get_code(prefill, input_ids=torch.randint(1, 100, (2, 16)),
                                   attention_mask=torch.ones(2, 32, dtype=torch.long),
                                   position_ids=torch.arange(16)[None].repeat(2, 1), use_cache=True, logits_to_keep=1,
                                   **{_cache_keyword(model): cache})
    kernels = set(re.findall(r"\bcpp_fused_\w+", "\n".join(code)))
    with_cos = [k for k in kernels if "_cos_" in k]
    # traced through, cos is inlined into each layer's rotary kernel (2 layers); behind the operator, into none
    assert (len(with_cos) == 0) == install, with_cos
