"""kevin.core.policy.models: one name to a (model, tokenizer), on the CPU."""

import pytest
import torch

from kevin.core.policy.models import load_model


def test_the_tiny_model_is_fp32_and_its_weights_follow_the_seed():
    a, tok = load_model("tiny", device=torch.device("cpu"), seed=3)
    b, _ = load_model("tiny", device=torch.device("cpu"), seed=3)
    assert next(a.parameters()).dtype == torch.float32 and tok.pad_token is not None
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_a_lora_rank_wraps_the_model_and_trains_only_the_adapters():
    model, _ = load_model("tiny", device=torch.device("cpu"), lora_rank=4)
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n for n in trained)


def test_disable_dropout_zeroes_dropout_modules_and_attention_dropout_floats():
    from torch import nn

    from kevin.core.policy.models import disable_dropout

    net = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.3), nn.Dropout(0.0))
    net[0].attention_dropout = 0.1  # as transformers' attention modules hold it
    assert disable_dropout(net) == 2  # the 0.3 module and the 0.1 float; the 0.0 one was already off
    assert net[1].p == 0.0 and net[0].attention_dropout == 0.0


def test_a_hub_model_with_attention_dropout_loads_without_it(tmp_path):
    # saved with attention_dropout 0.5: in training mode (the loss's forward) two passes would differ
    from kevin.core.policy.tiny import build_tiny_model, build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    saved = build_tiny_model(tok, seed=0)
    saved.config.attention_dropout = 0.5
    saved.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    model, _ = load_model(str(tmp_path), device=torch.device("cpu"), bf16=False)
    model.train()
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, model(ids).logits)


def test_a_mistyped_local_path_is_named_not_sent_to_the_hub(tmp_path, monkeypatch):
    import pytest

    from kevin.core.policy.models import ModelNameError, check_model_name

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "tiny" / "checkpoints").mkdir(parents=True)
    with pytest.raises(ModelNameError, match="holds training runs"):
        check_model_name("runs/nonexistent")  # runs/ holds runs here: a path, not the hub id "runs/nonexistent"
    with pytest.raises(ModelNameError, match="no such local directory"):
        check_model_name("./model")
    check_model_name("Qwen/QwQ-32B")  # no local Qwen/: left to the hub
    (tmp_path / "Qwen" / "Qwen2.5-7B-Instruct").mkdir(parents=True)  # a download folder, not runs
    check_model_name("Qwen/QwQ-32B")  # still left to the hub


def test_a_training_runs_directory_is_not_a_model(tmp_path):
    import pytest

    from kevin.core.policy.models import ModelNameError, check_model_name

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelNameError, match="--resume latest"):
        check_model_name(str(tmp_path))


def test_disable_dropout_zeroes_the_configs_dropout_fields():
    from kevin.core.policy.models import disable_dropout
    from kevin.core.policy.tiny import build_tiny_model, build_tiny_tokenizer

    model = build_tiny_model(build_tiny_tokenizer(), seed=0)
    model.config.attention_dropout = 0.25  # read again by nothing built yet: the config alone
    disable_dropout(model)
    assert model.config.attention_dropout == 0.0


def test_an_empty_hub_model_reads_no_weights_but_keeps_its_shapes_buffers_tie_and_generation_config(tmp_path):
    from kevin.core.policy.tiny import build_tiny_model, build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    saved = build_tiny_model(tok, seed=0)
    saved.generation_config.eos_token_id = [tok.eos_token_id, 7]
    saved.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()  # nothing to read: a load that reads weights fails
    model, _ = load_model(str(tmp_path), device=torch.device("cpu"), bf16=False, empty=True)
    assert {p.device.type for p in model.parameters()} == {"meta"}
    assert {n: p.shape for n, p in model.named_parameters()} == {n: p.shape for n, p in saved.named_parameters()}
    assert all(b.device.type == "cpu" for b in model.buffers())  # rotary frequencies: not in the weights broadcast
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.generation_config.eos_token_id == [tok.eos_token_id, 7]


def _small_architecture(monkeypatch):
    """A Qwen2 layout small enough for the CPU, registered as "random:small" for these tests."""
    from kevin.core.policy import tiny

    monkeypatch.setitem(tiny.REAL_ARCHITECTURES, "small", dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=512, tie_word_embeddings=False))


def test_a_random_models_weights_follow_the_seed_whatever_was_drawn_before(monkeypatch):
    from kevin.core.policy.models import weights_fingerprint

    _small_architecture(monkeypatch)
    cpu = torch.device("cpu")
    a, _ = load_model("random:small", device=cpu, seed=5)
    torch.rand(1000)  # the global generator moved on: a second process would be elsewhere in it
    b, _ = load_model("random:small", device=cpu, seed=5)
    c, _ = load_model("random:small", device=cpu, seed=6)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert weights_fingerprint(a) == weights_fingerprint(b) != weights_fingerprint(c)


def test_the_fingerprint_changes_with_a_sampled_weight_and_with_a_name():
    from torch import nn

    from kevin.core.policy.models import weights_fingerprint

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    before = weights_fingerprint(net)
    with torch.no_grad():
        net[1].bias[1] += 1.0  # a 2-entry tensor: every entry is sampled
    assert weights_fingerprint(net) != before
    renamed = nn.Sequential(nn.Identity(), *net)  # the same tensors under other names
    assert weights_fingerprint(renamed) != weights_fingerprint(net)


def test_the_fingerprint_reads_the_last_entry_of_a_tensor_too_long_for_float_indices():
    # 2**25 + 3 entries: the last index, 2**25 + 2, is no float32 (spacing 4 there), so a float linspace of indices
    # rounds it to 2**25 + 4, past the end; the fingerprint picks exact integer indices, the last one included
    from torch import nn

    from kevin.core.policy.models import weights_fingerprint

    net = nn.Module()
    net.w = nn.Parameter(torch.zeros(2**25 + 3))
    before = weights_fingerprint(net)
    with torch.no_grad():
        net.w[-1] = 1.0
    assert weights_fingerprint(net) != before
