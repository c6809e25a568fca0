"""`kevin.rewards.telemetry.rejection_shares`: each rule family's share of a step's samples, from structured fields.

The verdicts are built by hand with the ``details`` each sandbox path records (kevin/sandbox/sandbox.py,
kevin/sandbox/_judge.py, kevin/core/rollout.py).
"""

import pytest

from kevin.data.parse import NO_CODE_ERROR, UNCLOSED_THINK_ERROR
from kevin.rewards.telemetry import ANY_KEY, PARSE_KEYS, RULE_KEYS, rejection_keys, rejection_shares
from kevin.sandbox.result import EvalResult

CORRECT = EvalResult("correct", "Correct; speedup 2.00x.", runtime_ms=0.5, baseline_ms=1.0,
                     details={"symbol_check": {"libraries": ["ext.so"], "nm": True}, "timing": {"samples_ms": [0.5]},
                              "wall_check": {"ok": True}, "per_set": [{"ok": True}]})
STATIC = EvalResult("format_error", "Format error: ...", details={"violations": ["try/except at line 3: ..."],
                                                                  "phase_seconds": {"queue": 0.0}})
SYMBOLS = EvalResult("format_error", "Format error: your compiled extension was rejected.",
                     details={"compile_seconds": 1.0, "symbol_check": {"libraries": ["ext.so"], "nm": True},
                              "violations": ["imports at::matmul"]})
INVENTORY = EvalResult("format_error", "Format error: your forward called PyTorch operators (aten.mm)",
                       details={"symbol_check": {"libraries": [], "nm": True}, "torch_ops": {"mm": 1}})
CHECKED = EvalResult("incorrect", "Incorrect: input set 0: the kernel modified its input(s) [0] in place",
                     details={"violations": ["input set 0: the kernel modified its input(s) [0] in place"]})
TIMED = EvalResult("incorrect", "Incorrect: ...", details={"timing": {"samples_ms": [0.1]},
                                                           "violations": ["timed call 3: numerics flag changed"]})
WALL = EvalResult("incorrect", "Incorrect: ...", details={"timing": {"samples_ms": [0.1]},
                                                          "wall_check": {"ok": False, "reason": "forged timer"}})
WRONG = EvalResult("incorrect", "Incorrect: max abs error 1.0", max_abs_error=1.0,
                   details={"per_set": [{"ok": False, "max_abs_error": 1.0, "max_rel_error": 1.0}]})


def parse_failure(error, truncated=False):
    details = {"truncated": True, "parse_error": error or None} if truncated else {"parse_error": error}
    return EvalResult("format_error", "Your response could not be parsed.", details=details)


def test_no_verdicts_give_no_keys():
    assert rejection_shares([]) == {}


def test_every_key_is_present_and_zero_when_nothing_was_rejected():
    shares = rejection_shares([CORRECT, WRONG])
    assert set(shares) == {*PARSE_KEYS, *RULE_KEYS, ANY_KEY}
    assert all(v == 0.0 for v in shares.values())


def test_a_static_format_rejection_is_its_share_of_the_samples():
    # 1 static rejection among 4 samples: 1/4
    assert rejection_shares([STATIC, CORRECT, WRONG, CORRECT])["reject/format/static"] == 0.25


def test_the_symbol_check_is_told_from_the_static_check_by_its_symbol_check_record():
    shares = rejection_shares([SYMBOLS, CORRECT])  # 1 of 2 samples: 1/2
    assert shares["reject/format/symbols"] == 0.5 and shares["reject/format/static"] == 0.0


def test_the_operator_inventory_is_its_own_family_although_the_symbols_were_checked_too():
    shares = rejection_shares([INVENTORY, CORRECT, CORRECT])  # 1 of 3 samples: 1/3
    assert shares["reject/dynamic/operator_inventory"] == pytest.approx(1 / 3)
    assert shares["reject/format/symbols"] == 0.0


def test_worker_violations_split_at_the_timing_record():
    shares = rejection_shares([CHECKED, CHECKED, TIMED, CORRECT])  # 2 of 4 before timing: 1/2; 1 of 4 after: 1/4
    assert shares["reject/dynamic/checked_calls"] == 0.5
    assert shares["reject/dynamic/timed_calls"] == 0.25


def test_a_failed_wall_check_counts_and_a_passed_one_does_not():
    # WALL fails it, CORRECT passes it: 1 of 2
    assert rejection_shares([WALL, CORRECT])["reject/dynamic/wall_check"] == 0.5


def test_errors_and_wrong_values_are_no_rule_rejections():
    plain = [WRONG, EvalResult("compile_error", "Compilation failed", details={"compile_log": "error"}),
             EvalResult("runtime_error", "Runtime error", details={"traceback": "..."}),
             EvalResult("timeout", "Timeout", details={"batch_deadline": True})]
    assert all(rejection_keys(r) == set() for r in plain)


def test_the_feedback_text_is_never_read():
    lookalike = EvalResult("incorrect", "Incorrect: input set 0: output 0 shares memory with an input (tripwire)")
    assert rejection_keys(lookalike) == set()


def test_parse_failures_are_split_by_their_recorded_reason():
    shares = rejection_shares([parse_failure(NO_CODE_ERROR), parse_failure(NO_CODE_ERROR),
                               parse_failure(UNCLOSED_THINK_ERROR), parse_failure("custom parser: empty"),
                               parse_failure(UNCLOSED_THINK_ERROR, truncated=True)])
    # 5 samples: 2 without code (2/5), 1 unclosed (1/5), 1 other (1/5), 1 truncated (1/5, its reason not counted)
    assert (shares["reject/parse/no_code"], shares["reject/parse/unclosed_think"], shares["reject/parse/other"],
            shares["reject/parse/truncated"]) == (0.4, 0.2, 0.2, 0.2)


def test_parse_failures_are_not_rule_rejections():
    assert rejection_shares([parse_failure(NO_CODE_ERROR), STATIC])[ANY_KEY] == 0.5  # only STATIC: 1 of 2


def test_any_counts_a_sample_once_whatever_its_families():
    both = EvalResult("incorrect", "...", details={"timing": {}, "violations": ["x"], "wall_check": {"ok": False}})
    shares = rejection_shares([both, STATIC, CORRECT, CORRECT])
    # both is in 2 families and counts once: {both, STATIC} of 4 = 1/2
    assert shares[ANY_KEY] == 0.5
    assert shares["reject/dynamic/timed_calls"] == shares["reject/dynamic/wall_check"] == 0.25


def test_named_rules_add_their_own_keys_once_per_sample():
    named = EvalResult("format_error", "...", details={"violations": ["a", "b", "c"],
                                                       "rules": ["format/try_except", "format/try_except",
                                                                 "format/streams"]})
    shares = rejection_shares([named, CORRECT, CORRECT, CORRECT])
    # try/except named twice in one sample: still 1 sample of 4
    assert shares["reject/format/try_except"] == 0.25 and shares["reject/format/streams"] == 0.25
    assert shares["reject/format/static"] == 0.25 and shares[ANY_KEY] == 0.25


def test_named_rules_outside_the_format_and_dynamic_layers_are_ignored():
    odd = EvalResult("incorrect", "...", details={"rules": ["Tripwire!", "parse/no_code", 3, "dynamic/tripwire"]})
    assert rejection_keys(odd) == {"reject/dynamic/tripwire", ANY_KEY}


def test_verdicts_read_back_from_a_saved_rollout_give_the_same_shares():
    results = [STATIC, SYMBOLS, INVENTORY, CHECKED, TIMED, WALL, WRONG, CORRECT, parse_failure(NO_CODE_ERROR)]
    again = [EvalResult.from_dict(r.to_dict()) for r in results]
    assert rejection_shares(again) == rejection_shares(results)
