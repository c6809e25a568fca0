import torch

from kevin.core.policy import TransformersPolicy
from kevin.core.policy.tiny import EOS_TOKEN, PAD_TOKEN, build_tiny_model, build_tiny_tokenizer, tiny_policy


def test_tokenizer_round_trips_code_and_unicode_text_byte_for_byte():
    tok = build_tiny_tokenizer()
    text = '__global__ void k(float* x) {\n\tx[threadIdx.x] *= 2.0f; // ünïcode ✓\r\n}\n```python\n'
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_tokenizer_has_distinct_eos_and_pad_tokens():
    tok = build_tiny_tokenizer()
    assert (tok.eos_token, tok.pad_token) == (EOS_TOKEN, PAD_TOKEN)
    assert tok.eos_token_id != tok.pad_token_id


def test_tokenizer_vocabulary_is_small_byte_level_bpe():
    tok = build_tiny_tokenizer()
    # 256 byte symbols + 3 specials + 2 think tokens at least, plus learned merges, at most the target 1024
    assert 400 <= len(tok) <= 1024 + 2


def test_think_tags_are_single_tokens_kept_when_decoding():
    tok = build_tiny_tokenizer()
    ids = tok("<think>a</think>", add_special_tokens=False)["input_ids"]
    assert ids[0] == tok.convert_tokens_to_ids("<think>") and ids[-1] == tok.convert_tokens_to_ids("</think>")
    assert tok.decode(ids, skip_special_tokens=True) == "<think>a</think>"


def test_chat_template_opens_the_assistant_turn_inside_a_thought():
    tok = build_tiny_tokenizer()
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>\n"


def test_chat_template_without_thinking_opens_a_plain_assistant_turn():
    tok = build_tiny_tokenizer()
    text = tok.apply_chat_template([{"role": "user", "content": "U"}], tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert text.endswith("<|im_start|>assistant\n")


def test_same_seed_builds_the_same_weights_and_another_seed_does_not():
    tok = build_tiny_tokenizer()
    a, b, c = build_tiny_model(tok, seed=0), build_tiny_model(tok, seed=0), build_tiny_model(tok, seed=1)
    wa, wb, wc = (m.model.embed_tokens.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_building_the_model_leaves_the_global_rng_untouched():
    tok = build_tiny_tokenizer()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(tok, seed=7)
    assert torch.equal(torch.rand(3), expected)


def test_tiny_model_is_a_small_qwen2_sized_to_the_tokenizer():
    tok = build_tiny_tokenizer()
    cfg = build_tiny_model(tok).config
    assert (cfg.model_type, cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == ("qwen2", 64, 2, 4)
    assert cfg.vocab_size == len(tok)


def test_tiny_policy_generates_one_response_per_conversation():
    policy = tiny_policy(seed=0, max_new_tokens=4)
    assert isinstance(policy, TransformersPolicy)
    gens = policy.generate([[{"role": "user", "content": "hi"}]] * 2)
    assert len(gens) == 2 and all(1 <= len(g.token_ids) <= 4 for g in gens)


def test_random_real_architecture_has_the_real_shapes_and_rejects_unknown_names():
    import pytest
    import torch

    from kevin.core.policy.tiny import build_random_model, build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    with pytest.raises(ValueError, match="qwen2.5-1.5b"):
        build_random_model("qwen9", tok)
    # the meta device builds the 1.5B architecture without allocating it: 28 layers, hidden 1536, 151936 tokens
    model = build_random_model("qwen2.5-1.5b", tok, device="meta", dtype=torch.bfloat16)
    assert model.config.num_hidden_layers == 28 and model.config.hidden_size == 1536
    assert model.get_input_embeddings().weight.shape == (151936, 1536)
    assert 1.5e9 < sum(p.numel() for p in model.parameters()) < 1.6e9
