import pytest

from kevin.core.run.memory import ARCHITECTURES, GIB, footprint, fused_copy_parameters, lora_parameters, n_parameters

QWEN7B, QWQ32B = ARCHITECTURES["qwen2.5-7b"], ARCHITECTURES["qwq-32b"]


def test_the_7b_parameter_count_is_the_published_one():
    # 28 layers x 233,057,792 + 2 x 152,064 x 3,584 (untied embeddings) + 3,584 (final norm)
    assert n_parameters(QWEN7B) == 28 * 233_057_792 + 2 * 152_064 * 3_584 + 3_584 == 7_615_616_512


def test_lora_adapters_count_rank_times_in_plus_out_of_every_linear():
    # per layer: q 3584+3584, k 3584+512, v 3584+512, o 3584+3584, gate and up 3584+18944, down 18944+3584 = 90,112
    assert lora_parameters(QWEN7B, 32) == 28 * 32 * 90_112


def test_the_32b_fused_copy_is_38_gib_in_bf16():
    # per layer 5120 x (5120 + 1024 + 1024 + 27648 + 27648) = 319,815,680; x 64 layers x 2 bytes = 38.125 GiB
    assert fused_copy_parameters(QWQ32B) * 2 / GIB == 64 * 319_815_680 * 2 / GIB == 38.125


def test_the_kv_cache_is_rows_times_tokens_times_bytes_per_token():
    # 16 rows x (8,192 + 16,384) tokens x 2 x 64 layers x 8 KV heads x 128 x 2 bytes = 16 x 24,576 x 262,144 = 96 GiB
    assert footprint(QWQ32B, lora_rank=32).kv_cache == 96.0


def test_a_cache_budget_caps_the_kv_cache():
    assert footprint(QWQ32B, lora_rank=32, cache_budget_gib=24).kv_cache == 24.0


def test_full_fine_tuning_state_is_divided_by_the_gpus_and_gathered_whole_to_sample():
    one, eight = footprint(QWEN7B, gpus=1), footprint(QWEN7B, gpus=8)
    p = n_parameters(QWEN7B)
    # fp32 weights and two AdamW moments: 12 bytes a parameter, over 8 GPUs; fp32 gradients 4 bytes, over 8
    assert eight.state == pytest.approx(12 * p / 8 / GIB) and eight.gradients == pytest.approx(4 * p / 8 / GIB)
    assert one.state == pytest.approx(8 * eight.state)
    # sampling gathers the whole model on every GPU in bf16 (2 p), plus the engine's bf16 fused copy
    assert eight.sampler_copy == pytest.approx((2 * p + 2 * fused_copy_parameters(QWEN7B)) / GIB)


def test_vllm_sampling_of_a_full_fine_tune_holds_one_bf16_copy():
    fp = footprint(QWEN7B, gpus=8, sampler="vllm")
    assert fp.sampler_copy == pytest.approx(2 * n_parameters(QWEN7B) / GIB)


def test_an_unknown_sampler_is_refused():
    with pytest.raises(ValueError, match="sampler"):
        footprint(QWEN7B, sampler="sglang")


def test_cpu_offload_puts_sixteen_bytes_a_parameter_in_host_memory():
    # Qwen2.5-7B: 7,615,616,512 parameters x 16 bytes = 121,849,864,192 bytes = 113.48 GiB, and no GPU state
    fp = footprint(QWEN7B, offload=True)
    assert round(fp.host, 2) == 113.48
    assert fp.state == 0 and footprint(QWEN7B).host == 0
