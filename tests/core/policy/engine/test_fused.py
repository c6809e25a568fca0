"""kevin.core.policy.engine.fused: one matmul per group of sibling projections in a compiled forward, the same numbers."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from kevin.core.policy.engine import fused
from kevin.core.policy.tiny import build_tiny_model, build_tiny_tokenizer

MATMULS = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)


def count_matmuls(graph: torch.fx.Graph) -> int:
    return sum(1 for n in graph.nodes if n.op == "call_function" and n.target in MATMULS)


class CountMatmuls:
    """A post-grad pass that records the matmul count of each graph it sees (runs after the dedupe pass)."""

    def __init__(self):
        self.counts = []

    def __call__(self, graph):
        self.counts.append(count_matmuls(graph))

    def uuid(self):
        return None  # no FX graph caching: every compile runs the passes


@pytest.fixture()
def tiny():
    torch.manual_seed(0)
    return build_tiny_model(build_tiny_tokenizer(), seed=3).eval()  # 2 layers, hidden 64, 4 heads, 2 KV heads


def test_dedupe_collapses_two_identical_linears_into_one_matmul():
    x, w = torch.randn(3, 4), torch.randn(6, 4)
    gm = make_fx(lambda x, w: F.linear(x, w)[:, :2] + F.linear(x, w)[:, 2:4])(x, w)
    assert count_matmuls(gm.graph) == 2
    assert fused.dedupe_matmuls(gm.graph) >= 2  # the second permute(w) and the second mm
    gm.recompile()
    assert count_matmuls(gm.graph) == 1
    torch.testing.assert_close(gm(x, w), (x @ w.T)[:, :2] + (x @ w.T)[:, 2:4])


def test_dedupe_keeps_matmuls_of_different_inputs():
    x, y, w = torch.randn(3, 4), torch.randn(3, 4), torch.randn(6, 4)
    gm = make_fx(lambda x, y, w: F.linear(x, w) + F.linear(y, w))(x, y, w)
    fused.dedupe_matmuls(gm.graph)
    assert count_matmuls(gm.graph) == 2


def test_install_groups_q_k_v_and_gate_up_of_every_layer(tiny):
    groups = fused.install(tiny)
    assert len(groups) == 4  # 2 layers x (q, k, v) and (gate, up)
    attn = tiny.model.layers[0].self_attn
    # q: 4 heads x 16 = 64 rows, k and v: 2 KV heads x 16 = 32 rows each -> rows 0-64, 64-96, 96-128
    assert groups[0].bounds == [(0, 64), (64, 96), (96, 128)]
    assert [attn.q_proj._kevin_index, attn.k_proj._kevin_index, attn.v_proj._kevin_index] == [0, 1, 2]
    assert groups[0].weight.shape == (128, 64) and groups[0].bias.shape == (128,)


def test_outside_a_compiled_context_the_model_computes_as_before(tiny):
    ids = torch.randint(1, 100, (2, 5))
    with torch.no_grad():
        before = tiny(input_ids=ids).logits
        fused.install(tiny)
        with fused.fused_projections(tiny):  # eager inside: each linear uses its own weight
            during = tiny(input_ids=ids).logits
    assert torch.equal(before, during)


def test_the_compiled_forward_runs_one_matmul_per_group_with_the_same_logits(tiny, fresh_dynamo):
    ids = torch.randint(1, 100, (2, 3))
    with torch.no_grad():
        expected = tiny(input_ids=ids).logits
    counter = CountMatmuls()
    options = dict(fused.compile_options(cuda_graphs=False), post_grad_custom_post_pass=counter)
    step = torch.compile(tiny.__call__, options=options)
    with torch.no_grad(), fused.fused_projections(tiny):
        logits = step(input_ids=ids).logits
    # per layer: qkv, o, gate_up, down = 4 matmuls (unfused: q, k, v, o, gate, up, down = 7); 2 layers + lm_head:
    # 2 * 4 + 1 = 9
    assert counter.counts == [9]
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)


def test_entering_the_context_copies_the_current_weights_into_the_fused_ones(tiny):
    groups = fused.install(tiny)
    k = tiny.model.layers[1].self_attn.k_proj
    k.weight.data.add_(1.0)  # a write through .data, which no version counter sees
    with fused.fused_projections(tiny):
        lo, hi = groups[2].bounds[k._kevin_index]
        assert torch.equal(groups[2].weight[lo:hi], k.weight)


def test_a_lora_models_base_layers_are_fused_and_its_adapters_still_apply(tiny):
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(tiny, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "up_proj"]))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)  # a trained adapter: B != 0, so it changes the output
    model.eval()
    ids = torch.randint(1, 100, (2, 3))
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    inner = model.get_base_model()
    assert len(fused.install(inner)) == 4
    step = torch.compile(inner.__call__, options=fused.compile_options(cuda_graphs=False))
    with torch.no_grad(), fused.fused_projections(inner):
        logits = step(input_ids=ids).logits
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)


def test_projections_with_and_without_bias_are_not_fused():
    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)
            self.v_proj = torch.nn.Linear(8, 4, bias=False)

    assert fused.install(torch.nn.Sequential(Attention())) == []


def compiled_logits(model, ids):
    step = torch.compile(model.__call__, options=fused.compile_options(cuda_graphs=False))
    with torch.no_grad(), fused.fused_projections(model):
        return step(input_ids=ids).logits


def test_the_compiled_forward_follows_a_weight_update(tiny):
    ids = torch.randint(1, 100, (2, 3))
    fused.install(tiny)
    with torch.no_grad():
        tiny.model.layers[0].mlp.up_proj.weight.mul_(-2.0)  # an optimizer step between two generations
        expected = tiny(input_ids=ids).logits
    torch.testing.assert_close(compiled_logits(tiny, ids), expected, atol=1e-5, rtol=1e-5)


def test_the_fused_weights_follow_the_model_to_another_dtype(tiny):
    ids = torch.randint(1, 100, (2, 3))
    fused.install(tiny)
    tiny.to(torch.float64)
    with torch.no_grad():
        expected = tiny(input_ids=ids).logits
    logits = compiled_logits(tiny, ids)
    assert logits.dtype == torch.float64
    torch.testing.assert_close(logits, expected)


def test_a_projection_copied_after_install_computes_with_its_own_weight(tiny):
    ids = torch.randint(1, 100, (2, 3))
    fused.install(tiny)
    attn = tiny.model.layers[0].self_attn
    attn.q_proj = copy.deepcopy(attn.q_proj)  # e.g. peft's modules_to_save; its copied group is never refreshed
    with torch.no_grad():
        attn.q_proj.weight.add_(0.5)
        expected = tiny(input_ids=ids).logits
    torch.testing.assert_close(compiled_logits(tiny, ids), expected, atol=1e-5, rtol=1e-5)


def test_a_forward_with_gradients_is_not_fused(tiny):
    fused.install(tiny)
    q = tiny.model.layers[0].self_attn.q_proj
    x = torch.randn(2, 3, 64)
    step = torch.compile(q, options=fused.compile_options(cuda_graphs=False))
    with fused.fused_projections(tiny):
        step(x).sum().backward()  # unfused: the gradient reaches q's own weight, not the fused copy
    assert q.weight.grad is not None


def test_static_sampling_draws_the_same_tokens_with_and_without_fused_projections():
    from kevin.core.policy.engine.decoding import sample_static

    tok = build_tiny_tokenizer()
    ids = torch.randint(1, 100, (2, 5))
    runs = []
    for fuse in (False, True):
        model = build_tiny_model(tok, seed=3).eval()
        torch.manual_seed(7)
        runs.append(sample_static(model, ids, torch.ones_like(ids), max_new_tokens=6, cache_length=16, compile=True,
                                  compile_prefill=False, fuse_projections=fuse))
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    torch.testing.assert_close(runs[0].logprobs, runs[1].logprobs, atol=1e-5, rtol=1e-5)
