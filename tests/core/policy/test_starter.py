"""The starter policy's pieces on a tiny config (one task, no refinements, a 2-layer hidden-64 Qwen2): the tokenizer,
the examples' labels, determinism, the sharpened logits, the caller's random state, and the cache."""

import dataclasses
import json

import pytest
import torch

from kevin.core.policy import starter
from kevin.core.policy.starter import StarterConfig

TINY = StarterConfig(model_shape="test", tasks="ReLU", per_task=2, refinement_share=0.0, vocab_size=512, epochs=1,
                     batch_size=2, warmup_steps=0)


@pytest.fixture(scope="module")
def examples():
    return starter.corpus_examples(TINY)


@pytest.fixture(scope="module")
def tokenizer(examples):
    return starter.build_starter_tokenizer([t for e in examples for t in (e.messages[0]["content"], e.answer)],
                                           vocab_size=TINY.vocab_size)


def _weights(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_tokenizer_keeps_tiny_specials_and_template_and_round_trips_any_text(tokenizer):
    assert (tokenizer.eos_token, tokenizer.pad_token, tokenizer.padding_side) == ("<|im_end|>", "<|endoftext|>", "left")
    text = "x = a , b  # naïve\n\tπ ≈ 3.14 <think> ok </think>\n"
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                             add_generation_prompt=True)
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"


def test_merges_span_whole_lines_so_a_frequent_line_is_one_token():
    line = "    const int64_t n = x.numel();\n"
    tok = starter.build_starter_tokenizer([line * 3 + "return y;\n", line + "x = 1\n"], vocab_size=300)
    assert len(tok(line, add_special_tokens=False)["input_ids"]) == 1
    assert len(tok(line + line, add_special_tokens=False)["input_ids"]) == 2  # never across a line end


def test_an_example_trains_on_its_answer_only_and_its_prompt_is_the_policys(tokenizer, examples):
    from kevin.core.policy import TransformersPolicy

    ex = examples[0]
    row = starter.tokenize_example(tokenizer, ex)
    prompt = TransformersPolicy(torch.nn.Linear(1, 1), tokenizer).encode_conversation(ex.messages)
    n = len(prompt)
    assert row["input_ids"][:n] == prompt and row["labels"][:n] == [-100] * n
    assert row["labels"][n:] == row["input_ids"][n:] and row["input_ids"][-1] == tokenizer.eos_token_id
    # the generation prompt already opened the thought: the answer is trained from inside it
    assert tokenizer.decode(row["input_ids"][n:-1]) == ex.answer.removeprefix("<think>\n")


def test_the_same_config_gives_the_same_weights_and_another_seed_others():
    model, tok, stats = starter.train_starter(TINY, progress=False, device="cpu")
    again, tok2, _ = starter.train_starter(TINY, progress=False, device="cpu")
    assert _same(_weights(model), _weights(again))
    assert tok.backend_tokenizer.to_str() == tok2.backend_tokenizer.to_str()
    assert stats["examples"] == 2 and stats["steps"] == 1 and stats["answer_tokens"] > 0
    other, _, _ = starter.train_starter(dataclasses.replace(TINY, seed=1), progress=False, device="cpu")
    assert not _same(_weights(model), _weights(other))


def test_sharpening_multiplies_the_logits_and_nothing_else(tokenizer):
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(starter.starter_model_config(tokenizer, "test")).eval()
    ids = torch.tensor([[5, 17, 300, 2]])
    with torch.no_grad():
        before = model(ids).logits
        sharp = starter.sharpen_logits(model, 1.5)(ids).logits
    assert torch.allclose(sharp, 1.5 * before, rtol=1e-5, atol=1e-6)
    assert sharp.argmax(-1).equal(before.argmax(-1))  # the same ranking, only more confident


def test_training_leaves_the_callers_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    starter.train_starter(TINY, progress=False, device="cpu")
    assert torch.equal(torch.rand(3), expected)


def test_the_cache_trains_once_then_loads_the_saved_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("KEVIN_CACHE_DIR", str(tmp_path))
    calls = []
    real = starter.train_starter

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(starter, "train_starter", counting)
    path = starter.starter_path(config=TINY)
    assert path.parent == tmp_path / "starter" and path.name.startswith("cpu-test-") and not path.exists()
    model, tok = starter.load_starter(config=TINY, progress=False)
    assert len(calls) == 1 and {"model.safetensors", "tokenizer.json", "starter.json"} <= {p.name for p in path.iterdir()}
    again, tok2 = starter.load_starter(config=TINY, progress=False)
    assert len(calls) == 1  # the second load found it
    assert _same(_weights(model), _weights(again)) and tok2.chat_template == tok.chat_template
    trained, _, _ = real(TINY, progress=False, device="cpu")
    assert _same(_weights(trained), _weights(again))  # what was saved is what training gives
    info = json.loads((path / "starter.json").read_text())
    assert info["key"] == path.name.rsplit("-", 1)[1] and info["config"]["model_shape"] == "test"
    # anything that changes the weights changes the directory
    assert starter.starter_path(config=dataclasses.replace(TINY, epochs=2)) != path


def test_load_model_names_the_starter_by_backend_and_shape_or_by_its_directory(monkeypatch, tmp_path):
    from kevin.core.policy import models
    from kevin.core.policy.tiny import build_tiny_model, build_tiny_tokenizer

    seen = []

    def fake(*where, shape=None, device="cpu", **_):
        seen.append((*where, shape))
        tok = build_tiny_tokenizer()
        return build_tiny_model(tok), tok

    monkeypatch.setattr(starter, "load_starter", fake)
    monkeypatch.setattr(starter, "load_starter_dir", fake)
    (tmp_path / "starter.json").write_text("{}")
    for name in ("starter", "starter:cuda", "starter:cpu:medium", str(tmp_path)):
        models.load_model(name, device=torch.device("cpu"))
    assert seen == [("cpu", None), ("cuda", None), ("cpu", "medium"), (str(tmp_path), None)]


def test_packing_stores_a_large_matrix_as_int8_rows_with_one_scale_each(monkeypatch):
    monkeypatch.setattr(starter, "INT8_MIN_ELEMENTS", 6)
    w = torch.tensor([[1.0, -0.5, 0.25], [2.0, 0.0, -2.0]])
    packed = starter.pack_state({"emb": w, "norm": torch.tensor([1.0, 3.0])})
    # row 0: s = 1/127, q = round(127, -63.5, 31.75) = (127, -64, 32) (half to even); row 1: s = 2/127, q = (127, 0, -127)
    assert packed["emb"].dtype == torch.int8 and packed["emb"].tolist() == [[127, -64, 32], [127, 0, -127]]
    assert torch.allclose(packed["emb.row_scale"], torch.tensor([[1 / 127], [2 / 127]]))
    assert packed["norm"].dtype == torch.bfloat16  # a small tensor: bf16


def test_unpacking_gives_fp32_within_half_a_step_of_each_row(monkeypatch):
    monkeypatch.setattr(starter, "INT8_MIN_ELEMENTS", 6)
    w = torch.tensor([[1.0, -0.5, 0.25], [2.0, 0.0, -2.0]])
    back = starter.unpack_state(starter.pack_state({"emb": w, "norm": torch.tensor([1.0, 3.0])}))
    assert set(back) == {"emb", "norm"} and back["emb"].dtype == back["norm"].dtype == torch.float32
    # row 0: -64/127 = -0.50394 and 32/127 = 0.25197, each within s/2 = 0.5/127 of the weight; row 1 exact
    assert torch.allclose(back["emb"], torch.tensor([[1.0, -64 / 127, 32 / 127], [2.0, 0.0, -2.0]]))
    assert (back["emb"] - w).abs().max() <= 0.5 / 127
    assert back["norm"].tolist() == [1.0, 3.0]  # exact in bf16


def test_a_shipped_starter_fills_the_cache_without_training(tmp_path, monkeypatch):
    monkeypatch.setenv("KEVIN_CACHE_DIR", str(tmp_path / "cache"))
    trained = tmp_path / "trained"
    starter.train_starter(TINY, trained, progress=False, device="cpu")
    name = starter.starter_path(config=TINY).name
    shipped = starter.ship_starter(trained, name, root=tmp_path / "package")
    assert shipped.name == name and (shipped / starter.PACKED).is_file() and not (shipped / "model.safetensors").exists()
    monkeypatch.setattr(starter, "SHIPPED", tmp_path / "package")
    monkeypatch.setattr(starter, "train_starter", lambda *a, **k: pytest.fail("trained although a copy is shipped"))
    model, _ = starter.load_starter(config=TINY, progress=False)
    original, _ = starter.load_starter_dir(trained)
    for (n, a), (_, b) in zip(model.state_dict().items(), original.state_dict().items()):
        assert torch.allclose(a, b, rtol=2**-8, atol=b.abs().max().item() / 254), n  # bf16, or half an int8 step


def test_shipping_again_replaces_the_stale_copy_of_that_backend_and_shape(tmp_path):
    trained = tmp_path / "trained"
    starter.train_starter(TINY, trained, progress=False, device="cpu")
    root = tmp_path / "package"
    starter.ship_starter(trained, "cpu-test-0000", root=root)
    starter.ship_starter(trained, "cuda-test-0000", root=root)
    starter.ship_starter(trained, "cpu-test-1111", root=root)
    assert sorted(p.name for p in root.iterdir()) == ["cpu-test-1111", "cuda-test-0000"]


def test_the_shipped_cpu_starter_is_the_one_the_default_config_trains_and_under_10_mb():
    # A change to the corpus or to StarterConfig changes the key: ship again (python recipes/warmstart.py --ship)
    path = starter.starter_path(config=StarterConfig())
    shipped = starter.SHIPPED / path.name
    assert (shipped / starter.PACKED).is_file(), sorted(p.name for p in starter.SHIPPED.iterdir())
    assert (shipped / starter.PACKED).stat().st_size <= 10 * 10**6


def test_a_field_added_later_enters_the_key_only_when_set():
    # deeper_refinements at its default 0 leaves the key of the starters trained before it; set, it changes the key
    small = StarterConfig(tasks="ReLU,Gemm_ReLU_Divide")
    assert starter.starter_key(small) == starter.starter_key(dataclasses.replace(small, deeper_refinements=0))
    assert starter.starter_key(small) != starter.starter_key(dataclasses.replace(small, deeper_refinements=0.5))


def test_a_starter_unpacked_from_a_shipped_copy_is_not_shipped_again(tmp_path, monkeypatch):
    monkeypatch.setenv("KEVIN_CACHE_DIR", str(tmp_path / "cache"))
    trained = tmp_path / "trained"
    starter.train_starter(TINY, trained, progress=False, device="cpu")
    name = starter.starter_path(config=TINY).name
    monkeypatch.setattr(starter, "SHIPPED", tmp_path / "package")
    starter.ship_starter(trained, name, root=tmp_path / "package")
    unpacked = starter.ensure_starter(TINY, progress=False)
    with pytest.raises(ValueError, match="unpacked from a shipped copy"):
        starter.ship_starter(unpacked, name, root=tmp_path / "package")


def test_packed_weights_over_the_limit_are_not_shipped(tmp_path, monkeypatch):
    trained = tmp_path / "trained"
    starter.train_starter(TINY, trained, progress=False, device="cpu")
    monkeypatch.setattr(starter, "SHIP_LIMIT_BYTES", 1000)  # the test model's packed weights take more
    with pytest.raises(ValueError, match="over the 1,000"):
        starter.ship_starter(trained, "cpu-test-0000", root=tmp_path / "package")
    assert not any((tmp_path / "package").iterdir())  # nothing left behind


def test_a_warm_start_whose_weights_went_nan_is_refused_with_the_epoch_and_advice():
    model = torch.nn.Linear(2, 2)
    history = [{"epoch": 5.1, "grad_norm": 1.2, "loss": 0.6}, {"epoch": 5.34, "grad_norm": float("nan"), "loss": 0.5}]
    starter.diverged(model, history, StarterConfig())  # finite weights: nothing to say
    with torch.no_grad():
        model.weight[0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match=r"epoch 5\.34.*--lr \(now 0\.001\)"):
        starter.diverged(model, history, StarterConfig())
