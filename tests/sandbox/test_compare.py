"""compare: the trusted parent's error measure, on hand-computed cases."""

import math

import pytest

import torch

from kevin.sandbox.compare import Comparison, combine, compare_outputs, compare_tensor


def test_an_exact_match_passes_with_zero_error():
    ref = torch.tensor([1.0, -2.0, 3.0])
    c = compare_tensor(ref.clone(), ref, atol=1e-3, rtol=1e-3)
    assert c == Comparison(True, "", 0.0, 0.0)


def test_the_tolerance_is_scaled_by_the_reference_rms():
    # ref = [3, 4]: rms = sqrt((9 + 16) / 2) = 3.5355; tol = 1e-3 * 3.5355 + 1e-3 * |ref| = [0.006536, 0.007536]
    ref = torch.tensor([3.0, 4.0], dtype=torch.float64)
    assert compare_tensor(ref + torch.tensor([0.0065, 0.0075], dtype=torch.float64), ref, atol=1e-3, rtol=1e-3).ok
    c = compare_tensor(ref + torch.tensor([0.0, 0.01], dtype=torch.float64), ref, atol=1e-3, rtol=1e-3)
    assert not c.ok
    assert math.isclose(c.max_abs_error, 0.01, rel_tol=1e-9)
    assert math.isclose(c.max_rel_error, 0.01 / 4, rel_tol=1e-9)  # |d| / max(|ref|, rms) = 0.01 / 4


def test_zeros_fail_against_a_tiny_reference():
    # KernelBench's absolute atol = 1e-2 would pass zeros here; ours is relative to rms(ref) = 1e-9
    ref = torch.full((100,), 1e-9)
    assert not compare_tensor(torch.zeros(100), ref, atol=1e-3, rtol=1e-3).ok


def test_a_nan_where_the_reference_is_finite_fails():
    ref = torch.tensor([1.0, 2.0])
    c = compare_tensor(torch.tensor([1.0, float("nan")]), ref, atol=1e-3, rtol=1e-3)
    assert not c.ok and "NaN/inf in 1 of 2" in c.reason


def test_matching_nan_and_inf_patterns_pass():
    ref = torch.tensor([float("nan"), float("inf"), 1.0])
    assert compare_tensor(ref.clone(), ref, atol=1e-3, rtol=1e-3).ok


def test_an_inf_of_the_wrong_sign_fails():
    ref = torch.tensor([float("inf"), 1.0])
    assert not compare_tensor(torch.tensor([float("-inf"), 1.0]), ref, atol=1e-3, rtol=1e-3).ok


def test_a_wrong_dtype_fails_before_any_value_is_read():
    c = compare_tensor(torch.zeros(2, dtype=torch.float16), torch.zeros(2), atol=1, rtol=1)
    assert not c.ok and "dtype torch.float16" in c.reason


def test_a_wrong_shape_fails():
    c = compare_tensor(torch.zeros(2, 3), torch.zeros(3, 2), atol=1, rtol=1)
    assert not c.ok and "shape (2, 3)" in c.reason


def test_a_tensor_subclass_is_not_a_tensor():
    class Sub(torch.Tensor):
        pass

    out = torch.Tensor._make_subclass(Sub, torch.zeros(2))
    assert not compare_tensor(out, torch.zeros(2), atol=1, rtol=1).ok


def test_integer_outputs_must_match_exactly():
    ref = torch.tensor([1, 2, 3])
    assert compare_tensor(ref.clone(), ref, atol=1, rtol=1).ok
    assert not compare_tensor(torch.tensor([1, 2, 4]), ref, atol=1, rtol=1).ok


def test_integers_beyond_float64s_precision_must_match_exactly_too():
    ref = torch.tensor([2**53 + 1], dtype=torch.int64)  # as float64 it rounds to 2**53
    c = compare_tensor(torch.tensor([2**53], dtype=torch.int64), ref, atol=1, rtol=1)
    assert not c.ok and "differs from the reference in 1 of 1 elements" in c.reason


def test_a_missing_output_fails_the_list():
    c = compare_outputs([torch.zeros(1)], [torch.zeros(1), torch.zeros(1)], atol=1e-3, rtol=1e-3)
    assert not c.ok and "returned 1 outputs, expected 2" in c.reason


def test_combine_needs_every_set_and_keeps_the_worst_errors():
    c = combine([Comparison(True, "", 0.1, 0.2), Comparison(False, "set 1 wrong", 0.5, 0.05)])
    assert c == Comparison(False, "set 1 wrong", 0.5, 0.2)
    assert not combine([]).ok


def test_a_complex_output_with_its_imaginary_part_dropped_is_wrong():
    # casting complex to float64 keeps only the real part; the comparison must see both
    ref = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    assert not compare_tensor(ref.real.to(torch.complex64), ref, atol=1e-3, rtol=1e-3).ok


def test_the_reason_for_zeros_does_not_give_a_scalars_value_back():
    ref = torch.tensor(2.0037)
    c = compare_tensor(torch.zeros(()), ref, atol=1e-3, rtol=1e-3)
    # zeros: error |0 - 2.0037| / max(|ref|, rms) = 1, all the reason says; the value stays in the result's field
    assert c.reason == ("output differs from the reference in 1 of 1 elements: max rel error 1 "
                        "(tolerance 0.001 x rms(ref) + 0.001 x |ref|)")
    assert c.max_abs_error == pytest.approx(2.0037)


def test_a_cumulative_product_cut_short_fails_though_its_small_elements_are_under_atol():
    torch.manual_seed(0)
    ref = torch.cumprod(torch.randn(128, 4000), 1)  # 96 % exactly 0; the rest decays below 1e-3 x rms in columns
    cut = ref.clone()
    cut[:, 64:] = 0  # passes |d| <= atol x rms + rtol x |ref| everywhere
    c = compare_tensor(cut, ref, atol=1e-3, rtol=1e-3)
    assert not c.ok and "is off by more than half of the reference" in c.reason


def test_a_cumulative_product_computed_more_accurately_passes():
    torch.manual_seed(0)
    x = torch.randn(128, 4000)
    assert compare_tensor(torch.cumprod(x.double(), 1).float(), torch.cumprod(x, 1), atol=1e-3, rtol=1e-3).ok


def test_one_percent_of_the_nonzero_elements_may_be_off_by_more_than_half():
    ref = torch.ones(1000)
    out = ref.clone()
    out[:10] = 1.6  # off by 0.6: within atol x rms + rtol x |ref| = 1 + 1 = 2, over half of |ref|; 10 of 1000 = 1 %
    assert compare_tensor(out, ref, atol=1.0, rtol=1.0).ok
    out[10] = 1.6  # 11 of 1000
    assert not compare_tensor(out, ref, atol=1.0, rtol=1.0).ok


def test_a_tensor_compared_in_chunks_uses_the_whole_tensors_rms(monkeypatch):
    # one element per chunk; ref = [0, 100]: rms = sqrt((0 + 10000) / 2) = 70.71, so element 0's tolerance is
    # 1e-3 * 70.71 = 0.0707 and 0.05 passes; the rms of its own chunk alone (0) would fail it
    monkeypatch.setattr("kevin.sandbox.compare.CHUNK", 1)
    ref = torch.tensor([0.0, 100.0], dtype=torch.float64)
    c = compare_tensor(torch.tensor([0.05, 100.0], dtype=torch.float64), ref, atol=1e-3, rtol=1e-3)
    assert c.ok
    assert math.isclose(c.max_rel_error, 0.05 / 70.71068, rel_tol=1e-6)  # |d| / max(|ref|, rms)


def test_a_nan_in_a_later_chunk_fails(monkeypatch):
    # chunks [1, 2] and [3, 4]; the NaN in the second chunk still counts
    monkeypatch.setattr("kevin.sandbox.compare.CHUNK", 2)
    ref = torch.tensor([1.0, 2.0, 3.0, 4.0])
    c = compare_tensor(torch.tensor([1.0, 2.0, 3.0, float("nan")]), ref, atol=1e-3, rtol=1e-3)
    assert not c.ok and "NaN/inf in 1 of 4" in c.reason
