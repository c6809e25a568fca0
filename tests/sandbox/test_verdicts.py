"""Verdict reuse: a byte-identical candidate of the same task gets the first copy's verdict (`_Verdicts`)."""

import threading
import time

import pytest

from kevin.sandbox import EvalResult, Sandbox
from kevin.sandbox.sandbox import _Cancelled, _JobState, _Verdicts
from sandbox_cases import RELU_TASK, _config, load_candidate

CORRECT = EvalResult("correct", "Correct; speedup 2.00x.", runtime_ms=0.5, baseline_ms=1.0)


def test_the_first_claim_of_a_source_judges_it_and_a_second_waits():
    memo = _Verdicts()
    first, _, _ = memo.claim("k")
    second, done, box = memo.claim("k")
    assert first and not second
    assert not done.is_set() and box == []


def test_a_published_correct_verdict_is_handed_to_the_waiting_twin():
    memo = _Verdicts()
    memo.claim("k")
    _, done, box = memo.claim("k")
    memo.publish("k", CORRECT)
    assert done.is_set() and box == [CORRECT]


@pytest.mark.parametrize("status", ["timeout", "runtime_error"])
def test_a_verdict_that_can_come_from_the_moment_is_not_reused(status):
    memo = _Verdicts()
    memo.claim("k")
    _, done, box = memo.claim("k")
    memo.publish("k", EvalResult(status, "x"))
    assert done.is_set() and box == []  # the waiting twin is judged itself
    assert memo.claim("k")[0]  # and so is the next copy


def test_a_verdict_cut_by_the_batch_deadline_is_not_reused():
    memo = _Verdicts()
    memo.claim("k")
    memo.publish("k", EvalResult("correct", "x", details={"batch_deadline": True}))
    assert memo.claim("k")[0]


def test_past_capacity_the_least_recently_used_judged_source_is_forgotten():
    memo = _Verdicts(capacity=2)
    for key in ("a", "b"):
        memo.claim(key)
        memo.publish(key, CORRECT)
    memo.claim("a")  # a used again: b is now the older
    memo.claim("c")  # three entries, capacity 2: b goes
    assert not memo.claim("a")[0]  # still judged
    assert memo.claim("b")[0]  # forgotten: judged again


def test_a_twin_gets_the_verdict_marked_reused():
    done, box = threading.Event(), [CORRECT]
    done.set()
    r = Sandbox._twin(done, box, _JobState(float("inf")))
    assert r.status == "correct" and r.runtime_ms == 0.5 and r.details["reused"] is True


def test_a_twin_of_a_verdict_not_reused_is_judged_itself():
    done = threading.Event()
    done.set()
    assert Sandbox._twin(done, [], _JobState(float("inf"))) is None


def test_a_twin_waiting_past_the_batch_deadline_is_cancelled():
    with pytest.raises(_Cancelled):
        Sandbox._twin(threading.Event(), [], _JobState(time.monotonic() + 0.1))


# ------------------------------------------------------------------ through a real CPU Sandbox


@pytest.fixture(scope="module")
def twins(cache_dir, warm_builds):
    """Two identical honest ReLU kernels in one batch, then a third copy and a copy with an extra comment later."""
    sandbox = Sandbox("cpu", _config(cache_dir, reuse_verdicts=True))
    src = load_candidate("honest_relu_cpu")
    batch = sandbox.evaluate_many([(RELU_TASK, src), (RELU_TASK, src)])
    later = sandbox.evaluate(RELU_TASK, src)
    commented = sandbox.evaluate(RELU_TASK, "# another program around the same kernel\n" + src)
    return batch, later, commented


def test_one_of_two_identical_kernels_in_a_batch_is_judged_and_the_other_reuses_its_verdict(twins):
    batch, _, _ = twins
    assert [r.status for r in batch] == ["correct", "correct"]
    assert sorted(bool(r.details.get("reused")) for r in batch) == [False, True]
    assert batch[0].runtime_ms == batch[1].runtime_ms  # one timing, not two draws of the noise


def test_a_later_identical_kernel_reuses_the_verdict(twins):
    batch, later, _ = twins
    assert later.details.get("reused") is True and later.runtime_ms == batch[0].runtime_ms


def test_a_kernel_that_differs_by_one_comment_is_judged_afresh(twins):
    _, _, commented = twins
    assert commented.status == "correct" and "reused" not in commented.details


def test_with_reuse_off_an_identical_kernel_is_judged_again(cache_dir, warm_builds):
    sandbox = Sandbox("cpu", _config(cache_dir, reuse_verdicts=False))
    src = load_candidate("honest_relu_cpu")
    results = sandbox.evaluate_many([(RELU_TASK, src), (RELU_TASK, src)])
    assert [r.status for r in results] == ["correct", "correct"]
    assert not any(r.details.get("reused") for r in results)
