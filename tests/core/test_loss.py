import math

import pytest
import torch

from kevin.core import grpo_loss, token_logprobs

E = math.e


def _lp(ratios):
    """log-probs [1, L] whose ratio to old log-probs 0 are the given ratios."""
    return torch.log(torch.tensor([ratios], dtype=torch.float64))


def _loss(ratios, adv, mask=None, **kw):
    lp = _lp(ratios)
    mask = torch.ones_like(lp) if mask is None else torch.tensor([mask], dtype=torch.float64)
    return grpo_loss(lp, torch.zeros_like(lp), torch.tensor([adv], dtype=torch.float64), mask, **kw)


# --- clip bounds, both advantage signs ------------------------------------------------------------


def test_positive_advantage_is_clipped_at_the_high_bound():
    # ratio e = 2.718 > 1.28, A = +1: l = max(-2.718, -1.28) = -1.28
    loss, stats = _loss([E], 1.0)
    assert loss.item() == pytest.approx(-1.28)
    assert stats["clip/high_frac"].item() == 1.0 and stats["clip/low_frac"].item() == 0.0


def test_positive_advantage_with_low_ratio_is_not_clipped():
    # ratio 0.5 < 0.8, A = +1: l = max(-0.5, -0.8) = -0.5 (pessimistic: the unclipped term)
    loss, stats = _loss([0.5], 1.0)
    assert loss.item() == pytest.approx(-0.5)
    assert stats["clip/low_frac"].item() == 0.0


def test_negative_advantage_is_clipped_at_the_low_bound():
    # ratio 0.5 < 0.8, A = -1: l = max(0.5, 0.8) = 0.8
    loss, stats = _loss([0.5], -1.0)
    assert loss.item() == pytest.approx(0.8)
    assert stats["clip/low_frac"].item() == 1.0 and stats["clip/high_frac"].item() == 0.0


def test_negative_advantage_with_high_ratio_is_not_clipped_and_there_is_no_dual_clip():
    # ratio e^2 = 7.389, A = -2: l = max(14.778, 2 * 1.28 = 2.56) = 14.778. verl's dual clip (c = 3)
    # would cap it at 6; we do not.
    loss, _ = _loss([E**2], -2.0)
    assert loss.item() == pytest.approx(2 * E**2)


def test_clip_higher_bounds_are_separate():
    # A = +1, ratio 1.25: inside [0.8, 1.28] -> -1.25 ; with symmetric 0.2 it would be clipped to -1.2
    assert _loss([1.25], 1.0)[0].item() == pytest.approx(-1.25)
    assert _loss([1.25], 1.0, clip_high=0.2)[0].item() == pytest.approx(-1.2)


# --- aggregations --------------------------------------------------------------------------------


def _two_seqs():
    # seq 0: 2 tokens, ratio 1, A = 1 -> l = -1, -1 ; seq 1: 1 valid token, ratio 1, A = -3 -> l = 3 (+ pad)
    lp = torch.zeros(2, 2, dtype=torch.float64)
    adv = torch.tensor([1.0, -3.0], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    return lp, lp.clone(), adv, mask


def test_seq_mean_token_mean_is_paper_eq_1():
    # mean(mean(-1, -1), mean(3)) = (-1 + 3) / 2 = 1
    loss, _ = grpo_loss(*_two_seqs(), aggregation="seq-mean-token-mean")
    assert loss.item() == pytest.approx(1.0)


def test_token_mean_divides_by_all_valid_tokens():
    # (-1 - 1 + 3) / 3 = 1/3
    loss, _ = grpo_loss(*_two_seqs(), aggregation="token-mean")
    assert loss.item() == pytest.approx(1 / 3)


def test_seq_mean_token_sum_norm_divides_by_batch_times_constant():
    # (-1 - 1 + 3) / (B=2 * 8) = 1/16
    loss, _ = grpo_loss(*_two_seqs(), aggregation="seq-mean-token-sum-norm", max_response_len=8)
    assert loss.item() == pytest.approx(1 / 16)
    # default constant is L = 2: 1 / (2 * 2) = 0.25
    loss, _ = grpo_loss(*_two_seqs(), aggregation="seq-mean-token-sum-norm")
    assert loss.item() == pytest.approx(0.25)


def test_unknown_aggregation_raises():
    with pytest.raises(ValueError):
        grpo_loss(*_two_seqs(), aggregation="mean")


# --- KL -------------------------------------------------------------------------------------------


def test_k3_kl_is_added_with_its_coefficient():
    # lp = 0, ref = log 2: d = 0.693147, k3 = e^d - d - 1 = 2 - 0.693147 - 1 = 0.306853
    # policy term at ratio 1, A = 0: 0 ; loss = 0.1 * 0.306853
    lp = torch.zeros(1, 1, dtype=torch.float64)
    ref = torch.full((1, 1), math.log(2), dtype=torch.float64)
    loss, stats = grpo_loss(lp, lp, torch.zeros(1, dtype=torch.float64), torch.ones(1, 1), kl_coef=0.1, ref_logprobs=ref)
    assert loss.item() == pytest.approx(0.0306853, abs=1e-7)
    assert stats["loss/kl"].item() == pytest.approx(0.306853, abs=1e-6)


def test_kl_without_reference_raises():
    lp = torch.zeros(1, 1)
    with pytest.raises(ValueError):
        grpo_loss(lp, lp, torch.zeros(1), torch.ones(1, 1), kl_coef=0.1)


# --- gradients ------------------------------------------------------------------------------------


def test_clipped_and_masked_tokens_get_zero_gradient():
    # token 0: ratio 2 > 1.28 with A > 0 -> clipped -> zero grad
    # token 1: ratio 1 -> unclipped -> d/dlp(-A * e^lp) / 3 valid tokens = -1/3
    # token 2: ratio 1 but mask 0 -> zero grad ; token 3: ratio 0.5 with A > 0 -> unclipped
    lp = torch.log(torch.tensor([[2.0, 1.0, 1.0, 0.5]])).requires_grad_()
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0]])
    loss, _ = grpo_loss(lp, torch.zeros(1, 4), torch.tensor([1.0]), mask, aggregation="token-mean")
    loss.backward()
    # d l_t / d lp_t = -A * ratio_t / 3 : token 1 -> -1/3, token 3 -> -0.5/3
    torch.testing.assert_close(lp.grad, torch.tensor([[0.0, -1 / 3, 0.0, -0.5 / 3]]))


def test_negative_advantage_clipped_token_gets_zero_gradient():
    lp = torch.log(torch.tensor([[0.5, 1.0]])).requires_grad_()
    loss, _ = grpo_loss(lp, torch.zeros(1, 2), torch.tensor([-1.0]), torch.ones(1, 2), aggregation="token-mean")
    loss.backward()
    # token 0 clipped (ratio 0.5 < 0.8, A < 0) ; token 1: d(+1 * e^lp)/dlp / 2 = 0.5
    torch.testing.assert_close(lp.grad, torch.tensor([[0.0, 0.5]]))


def test_stats_are_detached():
    lp = torch.zeros(1, 2, requires_grad=True)
    _, stats = grpo_loss(lp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2))
    assert all(not v.requires_grad for v in stats.values())
    assert stats["tokens"].item() == 2 and stats["ratio/mean"].item() == pytest.approx(1.0)


def test_approx_kl_to_old_policy_is_k3_of_the_ratio():
    # ratio e: (e - 1) - 1 = 0.718282 ; mean over one token
    _, stats = _loss([E], 1.0)
    assert stats["kl/approx_old"].item() == pytest.approx(E - 2)


# --- token_logprobs -------------------------------------------------------------------------------


def test_token_logprobs_hand_case():
    # logits (0, log 3): softmax (1/4, 3/4) -> log-probs of ids 1, 0: log 0.75 = -0.287682, log 0.25 = -1.386294
    logits = torch.tensor([[[0.0, math.log(3)], [0.0, math.log(3)]]])
    out = token_logprobs(logits, torch.tensor([[1, 0]]))
    torch.testing.assert_close(out, torch.tensor([[-0.287682, -1.386294]]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 10_000])
def test_chunked_token_logprobs_equal_the_naive_computation(chunk_size):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 11, 257, generator=g) * 4
    ids = torch.randint(0, 257, (3, 11), generator=g)
    naive = logits.float().log_softmax(-1).gather(-1, ids[..., None])[..., 0]
    torch.testing.assert_close(token_logprobs(logits, ids, chunk_size=chunk_size), naive, rtol=0, atol=1e-5)


def test_token_logprobs_from_bf16_are_float32_and_match_naive():
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(2, 5, 1000, generator=g) * 3).bfloat16()
    ids = torch.randint(0, 1000, (2, 5), generator=g)
    out = token_logprobs(logits, ids, chunk_size=3)
    naive = logits.float().log_softmax(-1).gather(-1, ids[..., None])[..., 0]
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, naive, rtol=0, atol=1e-5)


def test_token_logprobs_with_temperature():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(1, 4, 50, generator=g)
    ids = torch.randint(0, 50, (1, 4), generator=g)
    naive = (logits / 0.9).log_softmax(-1).gather(-1, ids[..., None])[..., 0]
    torch.testing.assert_close(token_logprobs(logits, ids, temperature=0.9), naive, rtol=0, atol=1e-6)


def test_token_logprobs_gradient_equals_naive_gradient():
    g = torch.Generator().manual_seed(3)
    a = torch.randn(2, 3, 40, generator=g, requires_grad=True)
    b = a.detach().clone().requires_grad_()
    ids = torch.randint(0, 40, (2, 3), generator=g)
    token_logprobs(a, ids, chunk_size=2).sum().backward()
    b.log_softmax(-1).gather(-1, ids[..., None]).sum().backward()
    torch.testing.assert_close(a.grad, b.grad)


def test_token_logprobs_never_builds_a_full_float32_vocab_tensor():
    # bf16 logits [1, 64, 4096] with chunk 8: every float32 block that reaches logsumexp is [<=8, 4096],
    # never [64, 4096]. We spy on torch.logsumexp to see each block.
    seen = []
    orig = torch.logsumexp

    def spy(x, dim):
        seen.append(tuple(x.shape))
        return orig(x, dim)

    logits = torch.randn(1, 64, 4096).bfloat16()
    ids = torch.zeros(1, 64, dtype=torch.long)
    torch.logsumexp = spy
    try:
        token_logprobs(logits, ids, chunk_size=8)
    finally:
        torch.logsumexp = orig
    assert seen and all(shape[0] <= 8 for shape in seen)


# --- truncated importance sampling (a generator other than the trainer sampled the tokens) --------


def test_truncated_is_weights_are_the_capped_probability_ratio():
    from kevin.core.loss import truncated_is_weights

    # old - sampler = [1, -1, 0.5]: exp -> [2.718, 0.368, 1.649]; cap 2 -> [2, 0.368, 1.649]
    w = truncated_is_weights(torch.tensor([[0.0, -2.0, -0.5]]), torch.tensor([[-1.0, -1.0, -1.0]]), cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[2.0, math.exp(-1), math.exp(0.5)]]), rtol=0, atol=1e-6)


def test_truncated_is_weights_need_a_positive_cap():
    from kevin.core.loss import truncated_is_weights

    with pytest.raises(ValueError, match="cap"):
        truncated_is_weights(torch.zeros(1, 1), torch.zeros(1, 1), cap=0.0)


def test_is_weights_multiply_the_policy_term_per_token():
    # ratios [1, 1], A = +1: l = [-1, -1]; weights [2, 0.5] -> [-2, -0.5]; seq-mean-token-mean: -2.5 / 2 = -1.25
    loss, stats = _loss([1.0, 1.0], 1.0, is_weights=torch.tensor([[2.0, 0.5]], dtype=torch.float64))
    assert loss.item() == pytest.approx(-1.25)
    assert stats["tis/weight_mean"].item() == pytest.approx(1.25)  # (2 + 0.5) / 2


def test_is_weights_scale_the_gradient_and_carry_none():
    # l = -w * exp(lp - old) at lp = old: d l / d lp = -w = -3; the weights themselves get no gradient
    lp = torch.zeros(1, 1, dtype=torch.float64, requires_grad=True)
    w = torch.tensor([[3.0]], dtype=torch.float64, requires_grad=True)
    loss, _ = grpo_loss(lp, torch.zeros(1, 1, dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64),
                        torch.ones(1, 1, dtype=torch.float64), is_weights=w)
    loss.backward()
    assert lp.grad.item() == pytest.approx(-3.0) and w.grad is None


def test_logprob_mismatch_is_the_mean_absolute_difference_over_sampled_tokens():
    from kevin.core.loss import logprob_mismatch

    # |[-1, -2, -3] - [-1.5, -2, -9]| = [0.5, 0, 6]; the third token is padding: (0.5 + 0) / 2 = 0.25
    got = logprob_mismatch(torch.tensor([[-1.0, -2.0, -3.0]]), torch.tensor([[-1.5, -2.0, -9.0]]),
                           torch.tensor([[1.0, 1.0, 0.0]]))
    assert got.item() == pytest.approx(0.25)
