"""collate / micro-batches / response_logprobs: padding never changes a sample's log-probs or loss."""

import pytest
import torch

from kevin.core.batch import collate, loss_weight, micro_batches, response_logprobs, slice_batch
from kevin.core.loss import grpo_loss
from kevin.core.types import Sample


def _sample(prompt, response, adv=0.0, mask=None, old=None):
    return Sample(tuple(prompt), tuple(response), tuple(mask or [1] * len(response)), 0.0, adv, "t", 0, 0, 0, old)


def test_one_token_prompts_are_left_padded_and_responses_right_padded():
    b = collate([_sample([5, 6, 7], [8]), _sample([9], [10, 11, 12])], pad_id=0)
    # P = 3, L = 3: row 0 = 5 6 7 | 8 0 0 ; row 1 = 0 0 9 | 10 11 12
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 0, 0], [0, 0, 9, 10, 11, 12]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]]
    assert b.response_ids.tolist() == [[8, 0, 0], [10, 11, 12]]
    assert b.prompt_len == 3


def test_prompts_are_padded_before_their_last_token():
    b = collate([_sample([5, 6, 7, 8], [9]), _sample([1, 2], [3, 4])], pad_id=0)
    # P = 4: row 1 = 1 (pad pad) 2 | 3 4 -> its last prompt token is in column P-1 like row 0's
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9, 0], [1, 0, 0, 2, 3, 4]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [1, 0, 0, 1, 1, 1]]
    # positions count real tokens only: 1 -> 0, 2 -> 1, 3 -> 2, 4 -> 3
    assert b.position_ids[1].tolist() == [0, 0, 0, 1, 2, 3]


def test_no_padded_row_attends_to_nothing():
    # Under a causal mask, column c of a row attends to the real tokens in columns <= c. A row whose first
    # columns are all padding has empty attention rows there, which the CUDA attention backward turns into
    # NaN gradients. With a prompt of >= 2 tokens, every column has a real token at or before it.
    b = collate([_sample(range(1, 9), [9]), _sample([1, 2], [3]), _sample([4, 5, 6], [7, 8])], pad_id=0)
    assert (b.attention_mask.cumsum(-1) >= 1).all()


def test_position_ids_count_real_tokens_only():
    b = collate([_sample([5, 6, 7], [8]), _sample([9], [10, 11])], pad_id=0)
    # row 1 = pad pad 9 10 11 pad -> positions 0 0 0 1 2 (3 on the trailing pad, never attended)
    assert b.position_ids[1, 2:5].tolist() == [0, 1, 2]
    assert b.position_ids[0, :4].tolist() == [0, 1, 2, 3]


def test_loss_mask_of_a_sample_is_kept_and_padding_is_zero():
    b = collate([_sample([1], [2, 3], mask=[1, 0]), _sample([1], [4, 5, 6])], pad_id=0)
    assert b.mask.tolist() == [[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]


def test_old_logprobs_are_collated_only_when_every_sample_has_them():
    with_old = [_sample([1], [2], old=(-0.5,)), _sample([1], [3, 4], old=(-1.0, -2.0))]
    assert collate(with_old, 0).old_logprobs.tolist() == [[-0.5, 0.0], [-1.0, -2.0]]
    assert collate([with_old[0], _sample([1], [2])], 0).old_logprobs is None


def test_an_empty_list_is_an_error():
    with pytest.raises(ValueError):
        collate([], pad_id=0)


def test_a_slice_trims_the_padding_its_rows_do_not_use():
    b = collate([_sample([5, 6, 7], [8]), _sample([9], [10, 11, 12])], pad_id=0)
    s = slice_batch(b, 0, 1)  # row 0 alone: prompt 3 tokens, response 1 token
    assert s.input_ids.tolist() == [[5, 6, 7, 8]] and s.prompt_len == 3 and s.response_len == 1
    s = slice_batch(b, 1, 2)  # row 1 alone: the two leading pads go
    assert s.input_ids.tolist() == [[9, 10, 11, 12]] and s.prompt_len == 1


def test_a_slice_drops_the_inner_padding_its_rows_do_not_use():
    b = collate([_sample([5, 6, 7, 8], [9]), _sample([1, 2], [3, 4]), _sample([1, 3], [5])], pad_id=0)
    s = slice_batch(b, 1, 3)  # rows 1 and 2: both padded in columns 1 and 2, which go
    assert s.input_ids.tolist() == [[1, 2, 3, 4], [1, 3, 5, 0]] and s.prompt_len == 2
    assert s.position_ids.tolist() == [[0, 1, 2, 3], [0, 1, 2, 2]]


@pytest.fixture(scope="module")
def tiny():
    from kevin.core.policy.tiny import build_tiny_model, build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    return build_tiny_model(tok, seed=0), tok


def test_batched_logprobs_equal_each_sample_alone(tiny):
    model, tok = tiny
    samples = [_sample([11, 12, 13, 14, 15], [20, 21]), _sample([30], [40, 41, 42, 43]), _sample([7, 8], [9])]
    batch = collate(samples, tok.pad_token_id)
    with torch.no_grad():
        together = response_logprobs(model, batch)  # [3, 4]
        for i, s in enumerate(samples):
            alone = response_logprobs(model, collate([s], tok.pad_token_id))  # [1, r]
            r = len(s.response_ids)
            torch.testing.assert_close(together[i, :r], alone[0], rtol=1e-4, atol=1e-5)


def test_logprobs_match_a_plain_unpadded_forward(tiny):
    model, _ = tiny
    prompt, resp = [11, 12, 13], [20, 21]
    with torch.no_grad():
        logits = model(torch.tensor([prompt + resp])).logits[0]  # [5, V]
        expected = torch.log_softmax(logits[2:4].float() / 0.9, -1)[[0, 1], resp]
        got = response_logprobs(model, collate([_sample(prompt, resp)], 0), temperature=0.9)[0]
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("aggregation", ["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"])
def test_weighted_micro_batch_losses_sum_to_the_full_batch_loss(tiny, aggregation):
    model, tok = tiny
    samples = [_sample([11 + i] * (1 + i % 3), [20 + i] * (1 + i % 4), adv=float(i) - 2.0) for i in range(5)]
    full = collate(samples, tok.pad_token_id)
    kw = dict(aggregation=aggregation, max_response_len=8)
    with torch.no_grad():
        lp = response_logprobs(model, full)
        old = lp - 0.05 * torch.arange(5.0)[:, None]  # some ratios clip, some not
        whole, _ = grpo_loss(lp, old, full.advantages, full.mask, **kw)
        parts = 0.0
        for mb in micro_batches(full, 2, old_logprobs=old):
            mlp = response_logprobs(model, mb)
            loss, _ = grpo_loss(mlp, mb.old_logprobs, mb.advantages, mb.mask, **kw)
            parts += loss * loss_weight(mb, full, aggregation)
    torch.testing.assert_close(parts, whole, rtol=1e-4, atol=1e-6)


def test_token_mean_weights_over_two_processes_average_to_the_global_token_mean(tiny):
    # DDP averages the processes' gradients: (loss_a + loss_b) / 2 must be the token mean over a's and b's tokens,
    # though a holds 3 sequences of more tokens than b's 2
    model, tok = tiny
    samples = [_sample([11 + i] * (1 + i % 3), [20 + i] * (1 + 2 * i), adv=float(i) - 2.0) for i in range(5)]
    shards = [collate(samples[:3], tok.pad_token_id), collate(samples[3:], tok.pad_token_id)]
    everywhere = float(sum(b.mask.sum() for b in shards))  # 1 + 3 + 5 = 9 tokens on a, 7 + 9 = 16 on b
    with torch.no_grad():
        whole_batch = collate(samples, tok.pad_token_id)
        lp = response_logprobs(model, whole_batch)
        whole, _ = grpo_loss(lp, lp - 0.1, whole_batch.advantages, whole_batch.mask, aggregation="token-mean")
        per_process = []
        for full in shards:
            parts = 0.0
            for mb in micro_batches(full, 2):
                mlp = response_logprobs(model, mb)
                loss, _ = grpo_loss(mlp, mlp - 0.1, mb.advantages, mb.mask, aggregation="token-mean")
                parts += loss * loss_weight(mb, full, "token-mean", tokens_everywhere=everywhere, world=2)
            per_process.append(parts)
    torch.testing.assert_close(sum(per_process) / 2, whole, rtol=1e-4, atol=1e-6)


def test_token_mean_weight_over_processes_by_hand():
    micro = collate([_sample([1], [2, 3, 4])], pad_id=0)  # 3 tokens
    full = collate([_sample([1], [2, 3, 4]), _sample([1], [5])], pad_id=0)  # 4 tokens here, 4 on the other process
    assert loss_weight(micro, full, "token-mean", tokens_everywhere=8, world=2) == pytest.approx(2 * 3 / 8)
    assert loss_weight(micro, full, "token-mean") == pytest.approx(3 / 4)  # one process


def test_minibatches_partition_the_samples_in_near_equal_sizes():
    from kevin.core.batch import split_minibatches

    samples = [_sample([1] * (i + 1), [2]) for i in range(7)]
    minis = split_minibatches(samples, 2, seed=0)
    assert [len(m) for m in minis] == [4, 3]  # 7 = 4 + 3
    assert sorted(len(s.prompt_ids) for m in minis for s in m) == list(range(1, 8))


def test_minibatches_are_sorted_longest_first_and_depend_only_on_the_seed():
    from kevin.core.batch import split_minibatches

    samples = [_sample([1] * (i + 1), [2]) for i in range(8)]
    a, b = split_minibatches(samples, 2, seed=3), split_minibatches(samples, 2, seed=3)
    assert a == b
    for mini in a:
        lengths = [len(s.prompt_ids) for s in mini]
        assert lengths == sorted(lengths, reverse=True)
