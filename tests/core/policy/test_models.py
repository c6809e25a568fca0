"""kevin.core.policy.models: one name to a (model, tokenizer), on the CPU."""

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
