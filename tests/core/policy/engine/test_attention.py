"""kevin.core.policy.engine.attention: the compiled prefill's rotary (cos, sin) computed once, as one operator.

(The decode attention functions are tested with the policy, in tests/core/test_policy.py.)
"""

import copy
import re

import pytest
import torch

from kevin.core.policy.engine import attention
from kevin.core.policy.engine.decoding import model_static_cache
from kevin.core.policy.tiny import build_tiny_model, build_tiny_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def _count_op_calls(monkeypatch):
    calls = []
    real = torch.ops.kevin.rotary_cos_sin
    monkeypatch.setattr(torch.ops.kevin, "rotary_cos_sin", lambda *a: calls.append(a) or real(*a), raising=False)
    return calls


def test_the_prefill_rotary_equals_the_models_own_cos_and_sin(tok, monkeypatch):
    model = build_tiny_model(tok, seed=3).eval()
    rotary = model.model.rotary_emb
    x, positions = torch.zeros(2, 9, 8), torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [1, 1, 1, 0, 1, 2, 3, 4, 5]])
    own = rotary(x, positions)
    assert attention.install_prefill_rotary(model) == 1
    calls = _count_op_calls(monkeypatch)
    with attention.fresh_prefill(padded=True):
        ours = rotary(x, positions)
    assert len(calls) == 1  # the operator computed them
    assert all(torch.equal(a, b) for a, b in zip(own, ours))


def test_installing_the_prefill_rotary_twice_changes_nothing_more(tok):
    model = build_tiny_model(tok, seed=3).eval()
    assert attention.install_prefill_rotary(model) == 1
    assert attention.install_prefill_rotary(model) == 0


def test_outside_a_prefill_the_rotary_runs_its_own_forward(tok, monkeypatch):
    model = build_tiny_model(tok, seed=3).eval()
    attention.install_prefill_rotary(model)
    assert type(model.model.rotary_emb) in attention._PREFILL_ROTARY.values()
    calls = _count_op_calls(monkeypatch)
    model.model.rotary_emb(torch.zeros(1, 4, 8), torch.arange(4)[None])
    assert calls == []


def test_a_copied_model_is_installed_again_and_reads_its_own_frequencies(tok):
    model = build_tiny_model(tok, seed=3).eval()
    attention.install_prefill_rotary(model)
    twin = copy.deepcopy(model)
    assert type(twin.model.rotary_emb) not in attention._PREFILL_ROTARY.values()  # copied as the model's own class
    twin.model.rotary_emb.inv_freq.mul_(2.0)
    x, positions = torch.zeros(1, 4, 8), torch.arange(4)[None]
    own_twin_cos, _ = twin.model.rotary_emb(x, positions)
    assert attention.install_prefill_rotary(twin) == 1
    with attention.fresh_prefill(padded=False):
        cos, _ = model.model.rotary_emb(x, positions)
        twin_cos, _ = twin.model.rotary_emb(x, positions)
    assert torch.equal(twin_cos, own_twin_cos) and not torch.equal(cos, twin_cos)


def test_a_model_with_the_prefill_rotary_pickles_and_loads(tok, tmp_path):
    model = build_tiny_model(tok, seed=3).eval()
    attention.install_prefill_rotary(model)
    torch.save(model, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    ids = torch.randint(1, 100, (1, 6))
    torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits, atol=0, rtol=0)


def test_a_rotary_that_interleaves_its_halves_is_left_alone(tok):
    from transformers.models.qwen2 import modeling_qwen2

    class InterleavedRotaryEmbedding(modeling_qwen2.Qwen2RotaryEmbedding):
        def forward(self, x, position_ids):  # cos([f0, f0, f1, f1, ...]): not what rotary_cos_sin computes
            freqs = position_ids[..., None].float() * self.inv_freq.float()
            emb = freqs.repeat_interleave(2, dim=-1)
            return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    model = build_tiny_model(tok, seed=3).eval()
    model.model.rotary_emb.__class__ = InterleavedRotaryEmbedding
    assert attention.install_prefill_rotary(model) == 0


def test_an_unknown_architecture_keeps_its_rotary():
    from transformers import CohereConfig, CohereForCausalLM

    model = CohereForCausalLM(CohereConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                           num_attention_heads=2, num_key_value_heads=2))
    assert attention.install_prefill_rotary(model) == 0


@pytest.mark.parametrize("install", [False, True])
def test_a_compiled_prefill_computes_cos_and_sin_outside_its_layers_kernels(tok, install):
    from torch._inductor.utils import run_and_get_code

    from kevin.core.policy.engine.decoding import _cache_keyword

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
