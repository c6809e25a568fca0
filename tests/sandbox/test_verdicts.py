"""Verdict reuse: a byte-identical candidate of the same task gets the first copy's verdict (`_Verdicts`)."""

import threading
import time

import pytest

from kevin.sandbox import EvalResult, Sandbox, SandboxConfig
from kevin.sandbox import _resolve
from kevin.sandbox.sandbox import _Cancelled, _Entry, _JobState, _Verdicts
from sandbox_cases import LINEAR_RELU_TASK, RELU_TASK, _config, load_candidate

CORRECT = EvalResult("correct", "Correct; speedup 2.00x.", runtime_ms=0.5, baseline_ms=1.0,
                     details={"compile_seconds": 3.0}, baselines_ms={"eager": 1.0})


def test_the_first_claim_of_a_program_judges_it_and_a_second_waits():
    memo = _Verdicts()
    first, _ = memo.claim("k")
    second, entry = memo.claim("k")
    assert first and not second
    assert not entry.done.is_set()


def test_a_published_verdict_is_handed_to_the_waiting_twin():
    memo = _Verdicts()
    _, mine = memo.claim("k")
    _, theirs = memo.claim("k")
    memo.publish("k", mine, CORRECT)
    assert theirs.done.is_set() and theirs.result is CORRECT


@pytest.mark.parametrize("status", ["timeout", "runtime_error", "format_error", "incorrect"])
def test_every_verdict_of_the_program_is_reused_not_only_favourable_ones(status):
    memo = _Verdicts()
    _, mine = memo.claim("k")
    memo.publish("k", mine, EvalResult(status, "x"))
    first, entry = memo.claim("k")
    assert not first and entry.result.status == status  # no re-judging until "correct" comes up


@pytest.mark.parametrize("fault", ["internal_error", "golden_error", "batch_deadline"])
def test_a_programs_first_verdict_the_harness_may_have_caused_is_dropped(fault):
    memo = _Verdicts()
    _, mine = memo.claim("k")
    _, theirs = memo.claim("k")
    memo.publish("k", mine, EvalResult("runtime_error", "x", details={fault: True}))
    assert theirs.done.is_set() and theirs.result is None  # the waiting twin is judged itself
    assert memo.claim("k")[0]  # and the next copy claims the program again


def test_a_programs_second_harness_fault_is_kept_so_faults_are_no_endless_redraw():
    memo = _Verdicts()
    for _ in range(2):
        _, mine = memo.claim("k")
        memo.publish("k", mine, EvalResult("timeout", "x", details={"batch_deadline": True}))
    first, entry = memo.claim("k")
    assert not first and entry.result.status == "timeout"


def test_an_abandoned_judging_hands_nothing_on_even_after_a_dropped_fault():
    # a dropped fault makes the program's next verdict final; an interrupted judging must not become that verdict
    memo = _Verdicts()
    _, mine = memo.claim("k")
    memo.publish("k", mine, EvalResult("runtime_error", "x", details={"internal_error": "bug"}))
    _, mine = memo.claim("k")
    _, theirs = memo.claim("k")
    memo.abandon("k", mine)
    assert theirs.done.is_set() and theirs.result is None
    assert memo.claim("k")[0]


def test_publishing_twice_keeps_the_first_decision():
    memo = _Verdicts()
    _, mine = memo.claim("k")
    memo.publish("k", mine, CORRECT)
    memo.publish("k", mine, EvalResult("incorrect", "x"))  # e.g. a judging cancelled and then returning
    assert mine.result is CORRECT


def test_past_capacity_the_least_recently_used_decided_program_is_forgotten():
    memo = _Verdicts(capacity=2)
    for key in ("a", "b"):
        _, entry = memo.claim(key)
        memo.publish(key, entry, CORRECT)
    memo.claim("a")  # a used again: b is now the older
    memo.claim("c")  # three entries, capacity 2: b goes
    assert not memo.claim("a")[0]  # still known
    assert memo.claim("b")[0]  # forgotten: judged again


def test_a_program_being_judged_is_never_forgotten_and_the_memo_stays_bounded():
    memo = _Verdicts(capacity=2)
    memo.claim("slow")  # never decided
    for key in "abcdef":
        _, entry = memo.claim(key)
        memo.publish(key, entry, CORRECT)
    assert not memo.claim("slow")[0]
    assert len(memo._entries) <= 3  # capacity 2, plus the program in judging that is older than all


def test_a_twin_gets_the_verdict_marked_reused_without_the_first_runs_details():
    entry = _Entry()
    entry.result = CORRECT
    entry.done.set()
    r = Sandbox._twin(entry, _JobState(float("inf")))
    assert r.status == "correct" and r.runtime_ms == 0.5 and r.details["reused"] is True
    assert "compile_seconds" not in r.details  # the twin compiled nothing
    assert r.baselines_ms == CORRECT.baselines_ms and r.baselines_ms is not CORRECT.baselines_ms


def test_a_twin_waiting_past_the_batch_deadline_is_cancelled():
    with pytest.raises(_Cancelled):
        Sandbox._twin(_Entry(), _JobState(time.monotonic() + 0.1))


# ------------------------------------------------------------------ Sandbox._pipeline with a stand-in judging


@pytest.fixture
def stub(tmp_path):
    """A CPU Sandbox whose judging is a stand-in: each call takes the next verdict of ``verdicts``, after
    ``gate`` (an Event) is set; ``calls`` counts the judgings."""
    sandbox = Sandbox("cpu", SandboxConfig(cache_dir=str(tmp_path), workers=2))
    sandbox.verdicts, sandbox.calls, sandbox.gate = [], [], threading.Event()
    sandbox.gate.set()

    def stages(task_src, src, state):
        sandbox.calls.append(src)
        sandbox.gate.wait(10)
        verdict = sandbox.verdicts.pop(0)
        if isinstance(verdict, BaseException):
            raise verdict
        return verdict

    sandbox._stages = stages
    return sandbox


def test_a_kernel_correct_one_time_in_two_keeps_its_first_verdict_a_crash(stub):
    stub.verdicts = [EvalResult("runtime_error", "crashed"), CORRECT]
    results = [stub.evaluate(RELU_TASK, "flaky") for _ in range(3)]
    assert [r.status for r in results] == ["runtime_error"] * 3  # not judged again until it comes up correct
    assert stub.calls == ["flaky"]


def test_the_same_program_for_another_task_is_judged_again(stub):
    stub.verdicts = [CORRECT, EvalResult("incorrect", "wrong")]
    assert stub.evaluate(RELU_TASK, "same").status == "correct"
    assert stub.evaluate(LINEAR_RELU_TASK, "same").status == "incorrect"


def test_after_forget_verdicts_a_program_is_judged_again(stub):
    stub.verdicts = [CORRECT, EvalResult("incorrect", "wrong")]
    stub.evaluate(RELU_TASK, "k")
    stub.forget_verdicts()
    assert stub.evaluate(RELU_TASK, "k").status == "incorrect" and len(stub.calls) == 2


def test_a_timeout_past_the_batch_deadline_is_not_handed_on(stub):
    stub.verdicts = [EvalResult("timeout", "too slow")]  # the candidate's own limit, but past the batch's deadline
    stub._pipeline(RELU_TASK.source_for("cpu"), "k", _JobState(time.monotonic() - 0.01))
    assert stub._verdicts.claim(_resolve.sha256(RELU_TASK.source_for("cpu"), "k"))[0]  # dropped, not kept


def test_a_judging_abandoned_at_its_deadline_frees_its_twins_at_once(stub):
    release = threading.Event()

    def stages(task_src, src, state):
        stub.calls.append(src)
        if len(stub.calls) == 1:  # the first judging blocks past its batch's deadline
            release.wait(20)
        return CORRECT

    stub._stages = stages
    assert stub.evaluate_many([(RELU_TASK, "k")], deadline_s=0.5)[0].status == "timeout"
    t = time.monotonic()
    later = stub.evaluate(RELU_TASK, "k")  # its first copy's thread is still blocked
    release.set()
    assert later.status == "correct" and time.monotonic() - t < 5


def test_a_second_harness_fault_of_a_program_is_handed_on(stub):
    stub.verdicts = [RuntimeError("harness bug"), RuntimeError("harness bug"), CORRECT]
    [stub.evaluate(RELU_TASK, "k") for _ in range(2)]
    third = stub.evaluate(RELU_TASK, "k")
    assert "internal_error" in third.details and third.details.get("reused") and len(stub.calls) == 2


def test_a_judging_interrupted_after_a_dropped_fault_is_no_verdict_for_later_copies(stub):
    stub.verdicts = [RuntimeError("harness bug"), KeyboardInterrupt(), CORRECT]
    stub.evaluate(RELU_TASK, "k")  # dropped: the program's next verdict is final
    with pytest.raises(KeyboardInterrupt):
        stub._pipeline(RELU_TASK.source_for("cpu"), "k")
    later = stub.evaluate(RELU_TASK, "k")
    assert later.status == "correct" and "reused" not in later.details and len(stub.calls) == 3


def test_a_twin_of_a_judging_that_failed_in_the_harness_is_judged_itself(stub):
    stub.verdicts = [RuntimeError("harness bug"), CORRECT]
    first = stub.evaluate(RELU_TASK, "k")
    second = stub.evaluate(RELU_TASK, "k")
    assert "internal_error" in first.details
    assert second.status == "correct" and "reused" not in second.details


def test_two_copies_in_one_batch_are_judged_once(stub):
    stub.verdicts = [CORRECT]
    stub.gate.clear()  # the first judging holds until the second copy is waiting for it
    threading.Timer(1.0, stub.gate.set).start()
    results = stub.evaluate_many([(RELU_TASK, "k"), (RELU_TASK, "k")])
    assert [r.status for r in results] == ["correct", "correct"] and stub.calls == ["k"]
    assert sorted(bool(r.details.get("reused")) for r in results) == [False, True]


def test_a_verdict_cut_short_by_the_batch_deadline_is_not_handed_on(stub):
    stub.verdicts = [CORRECT, EvalResult("incorrect", "wrong")]
    stub.gate.clear()  # the first judging outlasts its batch's 0.5 s deadline, then returns "correct"
    threading.Timer(2.0, stub.gate.set).start()
    assert stub.evaluate_many([(RELU_TASK, "k")], deadline_s=0.5)[0].status == "timeout"
    time.sleep(2.5)  # the abandoned judging has returned its verdict meanwhile
    later = stub.evaluate(RELU_TASK, "k")
    assert later.status == "incorrect" and "reused" not in later.details


def test_a_source_that_utf8_cannot_encode_gets_a_verdict_not_an_exception(stub):
    stub.verdicts = [CORRECT]
    assert stub.evaluate(RELU_TASK, "\ud800").status == "correct"


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
