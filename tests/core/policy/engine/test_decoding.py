"""kevin.core.policy.engine.decoding: exact sampling from the tempered nucleus, and the static-cache loop's stopping."""

import pytest
import torch

from kevin.core.policy.engine.decoding import sample_logits, sample_static, top_p_filter
from kevin.core.policy.tiny import build_tiny_model, build_tiny_tokenizer


def test_top_p_keeps_the_smallest_set_whose_mass_reaches_top_p():
    # probs 0.5, 0.3, 0.15, 0.05; ascending cumulative mass 0.05, 0.20, 0.50, 1.00;
    # drop where it is <= 1 - 0.75 = 0.25: the 0.05 and 0.15 tokens. Kept mass 0.8 >= 0.75.
    scores = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    kept = torch.isfinite(top_p_filter(scores, 0.75))
    assert kept.tolist() == [[True, True, False, False]]


def test_top_p_always_keeps_the_most_likely_token():
    scores = torch.tensor([[0.9, 0.1]]).log()  # cumulative ascending 0.1, 1.0; 1 - 0.01 = 0.99 drops only the 0.1
    assert torch.isfinite(top_p_filter(scores, 0.01)).tolist() == [[True, False]]


def test_sampled_frequencies_match_the_tempered_softmax():
    torch.manual_seed(0)
    logits = torch.tensor([2.0, 1.0, 0.0]).repeat(200_000, 1)  # 200k independent rows
    tokens, logprobs = sample_logits(logits, temperature=2.0, top_p=1.0)
    # softmax([1.0, 0.5, 0.0]) = e^1, e^0.5, 1 over 2.718 + 1.649 + 1 = 5.367 -> 0.5065, 0.3072, 0.1863
    expected = torch.tensor([0.5065, 0.3072, 0.1863])
    freq = torch.bincount(tokens, minlength=3).float() / len(tokens)
    assert torch.allclose(freq, expected, atol=0.005)  # binomial sd <= 0.0012 at n = 200k
    torch.testing.assert_close(logprobs, expected.log()[tokens], atol=1e-3, rtol=0)


def test_a_token_outside_the_nucleus_is_never_drawn():
    torch.manual_seed(1)
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log().repeat(50_000, 1)
    tokens, logprobs = sample_logits(logits, temperature=1.0, top_p=0.75)
    assert set(tokens.tolist()) == {0, 1}
    # renormalised over the kept 0.8: 0.5 / 0.8 = 0.625, 0.3 / 0.8 = 0.375
    torch.testing.assert_close(logprobs, torch.tensor([0.625, 0.375]).log()[tokens], atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def tiny():
    tok = build_tiny_tokenizer()
    return build_tiny_model(tok, seed=3).eval()


def test_the_loop_stops_once_every_row_has_sampled_a_stop_token(tiny):
    ids = torch.randint(1, 100, (2, 5))
    mask = torch.ones_like(ids)
    every_token = range(tiny.config.vocab_size)  # any first token stops its row
    out = sample_static(tiny, ids, mask, max_new_tokens=20, cache_length=32, stop_token_ids=every_token, check_every=4)
    assert out.tokens.shape == (2, 4)  # stopped at the first check, after 4 steps, not 20


def test_a_cache_too_short_for_prompt_and_response_is_a_value_error(tiny):
    ids = torch.ones(1, 10, dtype=torch.long)
    with pytest.raises(ValueError, match="too short"):
        sample_static(tiny, ids, torch.ones_like(ids), max_new_tokens=8, cache_length=16)


@pytest.mark.gpu
def test_the_compiled_sampler_on_cuda_draws_from_the_tempered_nucleus():
    from kevin.core.policy.engine.decoding import compiled_sampler

    torch.manual_seed(2)
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05], device="cuda").log().repeat(200_000, 1)
    tokens, logprobs = compiled_sampler()(logits, 1.0, 0.75)
    # the nucleus {0.5, 0.3} renormalised: 0.625, 0.375; binomial sd 0.0011 at n = 200k
    freq = torch.bincount(tokens, minlength=4).float().cpu() / len(tokens)
    assert torch.allclose(freq, torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=0.005)
    torch.testing.assert_close(logprobs.cpu(), torch.tensor([0.625, 0.375]).log()[tokens.cpu()], atol=1e-5, rtol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("top_p", [1.0, 0.95])
def test_the_compiled_sampler_on_cuda_handles_a_real_vocabulary(top_p):
    from kevin.core.policy.engine.decoding import compiled_sampler, top_p_filter

    torch.manual_seed(3)
    logits = (torch.randn(128, 152064, device="cuda") * 3).to(torch.bfloat16)  # Qwen2.5's vocabulary
    tokens, logprobs = compiled_sampler()(logits, 0.9, top_p)
    # the drawn token's log-prob under the tempered nucleus, computed eagerly
    ref = torch.log_softmax(top_p_filter(logits.float() / 0.9, top_p), -1).gather(-1, tokens[:, None]).squeeze(-1)
    assert torch.isfinite(ref).all()  # every drawn token lies in the nucleus
    torch.testing.assert_close(logprobs, ref, atol=1e-4, rtol=0)


@pytest.mark.parametrize("pad", [0, 3])
def test_sampled_logprobs_equal_a_teacher_forced_forward_with_and_without_padding(tiny, pad):
    from kevin.core.policy.engine.attention import register
    from kevin.core.policy.hf import _attention_implementation

    torch.manual_seed(4)
    ids = torch.randint(1, 100, (2, 9))
    mask = torch.ones_like(ids)
    mask[0, :pad] = 0  # pad = 0: no row padded, the prefill attends without a mask
    with _attention_implementation(tiny, register("grouped")):
        out = sample_static(tiny, ids, mask, max_new_tokens=5, cache_length=16, temperature=0.8)
    full, full_mask = torch.cat([ids, out.tokens], 1), torch.cat([mask, torch.ones_like(out.tokens)], 1)
    positions = (full_mask.cumsum(-1) - 1).clamp_min(0)
    logits = tiny(input_ids=full, attention_mask=full_mask, position_ids=positions).logits[:, 8:-1].float() / 0.8
    ref = torch.log_softmax(logits, -1).gather(-1, out.tokens[..., None]).squeeze(-1)  # [2, 5]
    torch.testing.assert_close(out.logprobs, ref, atol=1e-4, rtol=1e-4)


def test_an_unpadded_prefill_keeps_the_sliding_window_mask():
    from transformers import MistralConfig, MistralForCausalLM

    from kevin.core.policy.engine.attention import register
    from kevin.core.policy.hf import _attention_implementation

    torch.manual_seed(0)
    config = MistralConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=4, max_position_embeddings=256)
    model = MistralForCausalLM(config).eval()
    model.set_attn_implementation("sdpa")
    ids = torch.randint(1, 100, (2, 12))  # 12 prompt tokens > the window of 4, no padding
    mask = torch.ones_like(ids)
    with _attention_implementation(model, register("grouped")):
        out = sample_static(model, ids, mask, max_new_tokens=4, cache_length=32, temperature=0.8)
    full = torch.cat([ids, out.tokens], 1)
    logits = model(input_ids=full, attention_mask=torch.ones_like(full)).logits[:, 11:-1].float() / 0.8
    ref = torch.log_softmax(logits, -1).gather(-1, out.tokens[..., None]).squeeze(-1)
    torch.testing.assert_close(out.logprobs, ref, atol=1e-4, rtol=1e-4)


def test_the_models_cache_follows_a_change_of_dtype(tiny):
    import copy

    model = copy.deepcopy(tiny)
    ids = torch.randint(1, 100, (2, 5))
    sample_static(model, ids, torch.ones_like(ids), max_new_tokens=2, cache_length=16)
    model.to(torch.bfloat16)  # the held fp32 cache would fail index_copy_ with bf16 keys
    out = sample_static(model, ids, torch.ones_like(ids), max_new_tokens=2, cache_length=16)
    assert out.tokens.shape == (2, 2)


def test_a_deepcopy_of_the_model_gets_its_own_compiled_prefill(tiny):
    import copy

    from kevin.core.policy.engine.decoding import compiled_prefill

    first = compiled_prefill(tiny)  # torch.compile is lazy: nothing is compiled here
    twin = copy.deepcopy(tiny)
    assert compiled_prefill(twin) is not first and compiled_prefill(tiny) is first


def test_nan_logits_are_an_error_not_a_silent_token(tiny):
    import copy

    model = copy.deepcopy(tiny)
    with torch.no_grad():
        model.lm_head.weight.fill_(float("nan"))
    ids = torch.randint(1, 100, (1, 5))
    with pytest.raises(RuntimeError, match="NaN or infinite"):
        sample_static(model, ids, torch.ones_like(ids), max_new_tokens=3, cache_length=16)


def test_each_decoding_step_tells_the_triton_attention_how_many_cache_slots_are_written(tiny, monkeypatch):
    from kevin.core.policy.engine import attention
    from kevin.core.policy.hf import _attention_implementation

    seen = []
    real = attention._FUNCTIONS["triton"]  # on the CPU it falls back to the grouped attention

    def spy(module, query, *args, **kwargs):
        if module.layer_idx == 0 and query.shape[2] == 1:
            seen.append(int(kwargs[attention.LIVE_SLOTS]))
        return real(module, query, *args, **kwargs)

    monkeypatch.setitem(attention._FUNCTIONS, "triton", spy)
    ids = torch.randint(1, 100, (2, 6))
    try:
        with _attention_implementation(tiny, attention.register("triton")):
            sample_static(tiny, ids, torch.ones_like(ids), max_new_tokens=4, cache_length=16)
    finally:
        monkeypatch.undo()
        attention.register("triton")  # transformers' registry gets the real function back
    # prompt in slots 0..5; step t writes slot 6 + t and may attend to slots 0..6 + t: 7, 8, 9 written slots
    assert seen == [7, 8, 9]


def test_an_fp32_model_under_bf16_autocast_samples_in_its_own_dtype(tiny):
    # a full fine-tune kept in fp32 under bf16 mixed precision (the recipe on CUDA): the fp32 static cache got
    # bf16 values and index_copy_ raised
    ids = torch.randint(1, 100, (2, 6))
    torch.manual_seed(4)
    plain = sample_static(tiny, ids, torch.ones_like(ids), max_new_tokens=5, cache_length=16)
    torch.manual_seed(4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = sample_static(tiny, ids, torch.ones_like(ids), max_new_tokens=5, cache_length=16)
    assert torch.equal(plain.tokens, mixed.tokens) and torch.equal(plain.logprobs, mixed.logprobs)


def test_a_model_prepared_by_accelerate_for_bf16_samples_in_its_own_dtype():
    accelerate = pytest.importorskip("accelerate")
    tok = build_tiny_tokenizer()
    model = build_tiny_model(tok, seed=3)
    model = accelerate.Accelerator(cpu=True, mixed_precision="bf16").prepare(model)  # wraps forward in autocast
    wrapped = model.forward
    ids = torch.randint(1, 100, (2, 6))
    out = sample_static(model.eval(), ids, torch.ones_like(ids), max_new_tokens=5, cache_length=16)
    assert out.tokens.shape == (2, 5) and torch.isfinite(out.logprobs).all()
    assert model.forward is wrapped  # the training forward keeps its autocast


def test_the_compiled_step_survives_more_cache_lengths_than_the_recompile_limit(tiny):
    # each cache length compiles one more decoding step; past the limit Dynamo silently ran it eagerly.
    # (config.patch, not monkeypatch: monkeypatch's undo left the config entry hidden for later tests)
    # The prefill stays eager: the claim is about the decoding step, and compiling the prefill too only adds time.
    torch._dynamo.reset()
    ids = torch.randint(1, 100, (2, 4))
    with torch._dynamo.config.patch(recompile_limit=1, fail_on_recompile_limit_hit=True):  # raise, not fall back
        for length in (16, 24):  # two cache lengths, two decoding steps to compile, limit 1
            sample_static(tiny, ids, torch.ones_like(ids), max_new_tokens=2, cache_length=length, compile=True,
                          compile_prefill=False)


def test_the_cuda_graph_rerecord_limit_is_raised_while_sampling_and_restored_after(tiny, monkeypatch):
    # torch 2.11 stops using CUDA graphs for a step recorded more than 128 times; each release moves its inputs
    import torch._inductor.config as inductor

    from kevin.core.policy.engine import decoding

    seen = []
    sampler = decoding.sample_logits
    monkeypatch.setattr(decoding, "sample_logits", lambda *a: seen.append(
        inductor.triton.cudagraph_unexpected_rerecord_limit) or sampler(*a))
    before = inductor.triton.cudagraph_unexpected_rerecord_limit
    ids = torch.randint(1, 100, (2, 4))
    sample_static(tiny, ids, torch.ones_like(ids), max_new_tokens=2, cache_length=16)
    assert set(seen) == {max(before, decoding.RERECORD_LIMIT)}
    assert inductor.triton.cudagraph_unexpected_rerecord_limit == before


def test_the_decoding_loop_sets_the_blas_preference_on_cuda_only_and_restores_it(monkeypatch):
    # the preference is process-wide: set inside the block, the caller's value back after, also after an error
    from kevin.core.policy.engine import decoding

    calls = []

    def preference(library=None):
        if library is not None:
            calls.append(library)
        return "caller's choice"

    monkeypatch.setattr(torch.backends.cuda, "preferred_blas_library", preference)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    with pytest.raises(RuntimeError):
        with decoding._blas_preference(torch.device("cuda"), "cublaslt"):
            assert calls == ["cublaslt"]
            raise RuntimeError("a step failed")
    assert calls == ["cublaslt", "caller's choice"]
    with decoding._blas_preference(torch.device("cpu"), "cublaslt"):
        pass
    assert calls == ["cublaslt", "caller's choice"]  # the CPU leaves it alone


@pytest.mark.gpu
def test_static_sampling_on_cuda_leaves_the_blas_preference_as_it_found_it():
    model = build_tiny_model(build_tiny_tokenizer()).to("cuda")
    before = torch.backends.cuda.preferred_blas_library()
    ids = torch.randint(1, 100, (2, 4), device="cuda")
    sample_static(model, ids, torch.ones_like(ids), max_new_tokens=3, cache_length=16)
    assert torch.backends.cuda.preferred_blas_library() == before


def test_padding_rows_do_not_hold_back_the_early_stop(tiny, monkeypatch):
    # a sampler that makes rows 0-1 emit the stop token 7 and rows 2-3 (batch padding) token 8 at every step:
    # waiting for rows 0-1 only, the loop stops at its first check (4 steps); waiting for all rows, it runs 20
    from kevin.core.policy.engine import decoding

    def scripted(logits, temperature, top_p):
        tokens = torch.tensor([7, 7, 8, 8])
        return tokens, torch.zeros(4)

    monkeypatch.setattr(decoding, "sample_logits", scripted)
    ids = torch.randint(1, 100, (4, 5))
    run = dict(max_new_tokens=20, cache_length=32, stop_token_ids=[7], check_every=4, compile=False)
    assert sample_static(tiny, ids, torch.ones_like(ids), wait_rows=2, **run).tokens.shape == (4, 4)
    assert sample_static(tiny, ids, torch.ones_like(ids), **run).tokens.shape == (4, 20)


def _input_lengths(module):
    """Record the position count (dim 1) of every input ``module`` sees; returns the list and the hook handle."""
    seen = []
    handle = module.register_forward_pre_hook(lambda m, args: seen.append(args[0].shape[1]))
    return seen, handle


def _hooked_tiny():
    """A fresh tiny model whose last-position hooks are installed (so that a spy registered now runs after them)."""
    from kevin.core.policy.engine.decoding import _install_last_position_hooks

    model = build_tiny_model(build_tiny_tokenizer(), seed=3).eval()
    assert _install_last_position_hooks(model)
    return model


def test_the_prefill_runs_the_last_layers_mlp_on_the_last_position_only():
    model = _hooked_tiny()
    ids = torch.randint(1, 100, (2, 9))
    first, _ = _input_lengths(model.model.layers[0].mlp)
    last, _ = _input_lengths(model.model.layers[-1].mlp)
    sample_static(model, ids, torch.ones_like(ids), max_new_tokens=3, cache_length=16)
    # the prefill (9 positions), then 2 decoding steps (1 each); the last layer's prefill is cut to 1 position
    assert first == [9, 1, 1]
    assert last == [1, 1, 1]


def test_the_prefill_runs_the_last_layers_o_proj_on_the_last_position_only():
    model = _hooked_tiny()
    ids = torch.randint(1, 100, (2, 9))
    first, _ = _input_lengths(model.model.layers[0].self_attn.o_proj)
    last, _ = _input_lengths(model.model.layers[-1].self_attn.o_proj)
    sample_static(model, ids, torch.ones_like(ids), max_new_tokens=2, cache_length=16)
    assert first == [9, 1] and last == [1, 1]


def test_hooks_follow_the_last_layer_when_layers_are_removed():
    from kevin.core.policy.engine.decoding import _install_last_position_hooks, _keep_last_position

    model = _hooked_tiny()
    old_last = model.model.layers[-1]
    del model.model.layers[-1]  # layer 0 is now the last
    model.config.num_hidden_layers = 1
    assert _install_last_position_hooks(model)
    assert _keep_last_position not in old_last.mlp._forward_pre_hooks.values()
    assert _keep_last_position in model.model.layers[0].mlp._forward_pre_hooks.values()


def test_a_forward_outside_the_prefill_keeps_every_position_of_the_last_layer(tiny):
    import copy

    model = copy.deepcopy(tiny)
    ids = torch.randint(1, 100, (2, 9))
    before = model(input_ids=ids).logits
    sample_static(model, ids, torch.ones_like(ids), max_new_tokens=2, cache_length=16)  # installs the hooks
    assert model.__dict__["_kevin_last_position_hooks"]
    torch.testing.assert_close(model(input_ids=ids).logits, before, atol=0, rtol=0)  # [2, 9, V]: all positions


def test_an_unknown_architecture_keeps_its_last_layer_whole():
    from transformers import GPT2Config, GPT2LMHeadModel

    from kevin.core.policy.engine.decoding import _install_last_position_hooks

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    assert _install_last_position_hooks(model) is False
    assert not any(m._forward_pre_hooks for m in model.modules())


@pytest.mark.parametrize("compile_prefill", [False, True])
def test_the_trimmed_prefill_gives_the_logits_of_the_whole_one(tiny, compile_prefill, fresh_dynamo):
    import copy

    from kevin.core.policy.engine.decoding import _install_last_position_hooks, _last_position_prefill

    model = copy.deepcopy(tiny)
    ids = torch.randint(1, 100, (3, 11))
    whole = model(input_ids=ids, logits_to_keep=1).logits  # [3, 1, V]
    assert _install_last_position_hooks(model)
    forward = torch.compile(model.__call__, dynamic=True) if compile_prefill else model
    with torch.no_grad(), _last_position_prefill():
        cut = forward(input_ids=ids, logits_to_keep=1).logits
    # one position through the last layer's MLP instead of 11: the same sums, up to the matmul's blocking
    torch.testing.assert_close(cut, whole, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("compile_prefill", [False, True])
def test_inside_the_trimmed_prefill_only_the_last_position_is_the_models(tiny, compile_prefill, fresh_dynamo):
    import copy

    from kevin.core.policy.engine.decoding import _install_last_position_hooks, _last_position_prefill

    model = copy.deepcopy(tiny)
    ids = torch.randint(1, 100, (2, 7))
    whole = model(input_ids=ids).logits  # [2, 7, V], every position
    assert _install_last_position_hooks(model)
    forward = torch.compile(model.__call__, dynamic=True) if compile_prefill else model
    with torch.no_grad(), _last_position_prefill():
        cut = forward(input_ids=ids).logits  # every position kept: the filler shows
    assert not torch.allclose(cut[:, 0], whole[:, 0], atol=1e-3)  # the first position went through filler
    torch.testing.assert_close(cut[:, -1], whole[:, -1], atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(forward(input_ids=ids).logits, whole, atol=1e-5, rtol=1e-5)  # flag off: whole


@pytest.mark.parametrize("prefill_rotary", [False, True])
def test_a_compiled_prefill_samples_the_logprobs_of_a_teacher_forced_forward(prefill_rotary, fresh_dynamo):
    from kevin.core.policy.engine.attention import _PREFILL_ROTARY

    tok = build_tiny_tokenizer()
    model = build_tiny_model(tok, seed=3).eval()  # its own: the rotary operator, once installed, stays
    torch.manual_seed(5)
    ids = torch.randint(1, 100, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # one row padded: positions 0..6 after two pads
    out = sample_static(model, ids, mask, max_new_tokens=4, cache_length=16, temperature=0.8, compile=False,
                        compile_prefill=True, prefill_rotary=prefill_rotary)
    assert (type(model.model.rotary_emb) in _PREFILL_ROTARY.values()) == prefill_rotary
    full, full_mask = torch.cat([ids, out.tokens], 1), torch.cat([mask, torch.ones_like(out.tokens)], 1)
    positions = (full_mask.cumsum(-1) - 1).clamp_min(0)
    logits = model(input_ids=full, attention_mask=full_mask, position_ids=positions).logits[:, 8:-1].float() / 0.8
    ref = torch.log_softmax(logits, -1).gather(-1, out.tokens[..., None]).squeeze(-1)  # [2, 4]
    torch.testing.assert_close(out.logprobs, ref, atol=1e-4, rtol=1e-4)


def _teacher_forced_logprobs(model, ids, mask, out, temperature):
    full, full_mask = torch.cat([ids, out.tokens], 1), torch.cat([mask, torch.ones_like(out.tokens)], 1)
    positions = (full_mask.cumsum(-1) - 1).clamp_min(0)
    p = ids.shape[1]
    logits = model(input_ids=full, attention_mask=full_mask, position_ids=positions).logits[:, p - 1:-1].float()
    return torch.log_softmax(logits / temperature, -1).gather(-1, out.tokens[..., None]).squeeze(-1)


def test_release_frees_the_static_cache_and_the_fused_weights(fresh_dynamo):
    from kevin.core.policy.engine.decoding import release_static_memory

    model = build_tiny_model(build_tiny_tokenizer(), seed=3).eval()
    ids = torch.randint(1, 100, (2, 9))
    sample_static(model, ids, torch.ones_like(ids), max_new_tokens=4, cache_length=16, compile=True)
    groups = model.__dict__["_kevin_fused_groups"]
    # fp32 tiny Qwen2: 2 layers, 2 KV heads of 16, hidden 64, MLP 128.
    # cache: 2 layers x (keys + values) x [2 rows, 2 heads, 16 slots, 16] x 4 B = 16,384 B
    # fused q|k|v: [64 + 32 + 32, 64] + bias [128], gate|up: [256, 64]: (8,192 + 128 + 16,384) x 4 B x 2 layers
    #   = 197,632 B
    assert release_static_memory(model) == 16_384 + 197_632
    assert "_kevin_static_cache" not in model.__dict__ and all(g.weight is None for g in groups)
    assert release_static_memory(model) == 0  # nothing left to free


def test_after_a_release_the_next_call_samples_the_current_weights_exactly(fresh_dynamo):
    from kevin.core.policy.engine.decoding import release_static_memory

    model = build_tiny_model(build_tiny_tokenizer(), seed=3).eval()
    torch.manual_seed(6)
    ids = torch.randint(1, 100, (2, 9))
    mask = torch.ones_like(ids)
    sample_static(model, ids, mask, max_new_tokens=4, cache_length=16, compile=True, temperature=0.8)
    release_static_memory(model)
    with torch.no_grad():  # a training phase moved the fused projections' weights
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.add_(0.05)
            layer.mlp.up_proj.weight.mul_(1.5)
    out = sample_static(model, ids, mask, max_new_tokens=4, cache_length=16, compile=True, temperature=0.8)
    torch.testing.assert_close(out.logprobs, _teacher_forced_logprobs(model, ids, mask, out, 0.8), atol=1e-4, rtol=1e-4)
