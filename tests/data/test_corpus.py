"""The warm-start corpus: answers in the paper's format, the mix of the corpus, and the sandbox's real verdicts."""

from __future__ import annotations

import os
import re

import pytest

from kevin.data.builtin import builtin_tasks
from kevin.data.corpus import (
    CORRECT_KINDS,
    EXPECTED_STATUS,
    FLAWED_KINDS,
    KINDS,
    Mix,
    build_corpus,
    coverage,
    kernel_answers,
    refinement_examples,
)
from kevin.data.parse import parse_response
from kevin.sandbox import STATUSES, Sandbox, SandboxConfig, check_format

ALL = builtin_tasks()
# one task per template family, both levels
FAMILIES = ["ReLU", "LeakyReLU", "Sum", "Argmax", "Softmax", "Cumsum", "LayerNorm", "BatchNorm2d", "MaxPool2d",
            "Square_matmul", "Matmul_transposed_B", "Batched_matmul", "Lower_triangular_matmul", "Diagonal_matmul",
            "Conv2d", "ConvTranspose2d", "MSELoss", "CrossEntropyLoss", "Gemm_ReLU_Divide", "BMM_Divide_Softmax",
            "Conv2d_LayerNorm_GELU_ResidualAdd", "Matmul_AvgPool_GELU_Scaling_Max", "ConvTranspose3d_Tanh_Multiply_Sum"]
SOME = builtin_tasks(names=FAMILIES)


def _answers(tasks, backend):
    return [(t, a) for t in tasks for a in kernel_answers(t, backend)]


def test_the_expected_statuses_are_the_sandboxs_own():
    assert set(EXPECTED_STATUS) == set(KINDS)
    assert set(EXPECTED_STATUS.values()) <= set(STATUSES)
    assert {EXPECTED_STATUS[k] for k in CORRECT_KINDS} == {"correct"}
    assert "correct" not in {EXPECTED_STATUS[k] for k in FLAWED_KINDS}


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_every_builtin_task_has_a_slow_and_a_fast_correct_answer(backend):
    info = coverage(ALL)[backend]
    assert info["without_answers"] == []
    for t in ALL:
        kinds = [a.kind for a in kernel_answers(t, backend)]
        assert kinds[:2] == ["slow", "fast"], t.task_id
        assert len(kinds) == len(set(kinds)) and set(kinds) <= set(KINDS)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_every_answer_parses_to_one_program_defining_model_new_with_a_thought_and_a_summary(backend):
    for task, a in _answers(ALL, backend):
        r = parse_response(a.text)
        assert r.ok, (task.task_id, a.kind, r.error)
        assert r.code == a.code and r.summary == a.summary
        assert len(re.findall(r"^class ModelNew\b", r.code, re.MULTILINE)) == 1
        assert r.thought and len(r.thought) > 80
        assert ("cuda_sources=" in r.code) == (backend == "cuda")
        assert "load_inline(" in r.code and "cpp_sources=" in r.code


def test_cuda_answers_launch_a_global_kernel_and_cpu_answers_loop():
    for task, a in _answers(SOME, "cuda"):
        assert "__global__ void" in a.code and "<<<" in a.code, (task.task_id, a.kind)
    for task, a in _answers(SOME, "cpu"):
        assert "for (" in a.code and "__global__" not in a.code, (task.task_id, a.kind)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_the_static_rules_reject_exactly_the_format_errors(backend):
    # a sample of every template family here; tests below take the whole suite (slow)
    for task, a in _answers(SOME, backend):
        violations = check_format(a.code, backend=backend)
        assert bool(violations) == (a.kind == "format_error"), (task.task_id, a.kind, violations)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_the_static_rules_reject_exactly_the_format_errors_over_the_whole_suite(backend):
    wrong = [(task.task_id, a.kind) for task, a in _answers(ALL, backend)
             if bool(check_format(a.code, backend=backend)) != (a.kind == "format_error")]
    assert wrong == []


def test_answers_are_deterministic():
    task = builtin_tasks(names=["Gemm_Subtract_Mish_MaxPool_BiasAdd_Min"])[0]
    assert kernel_answers(task, "cpu") == kernel_answers(task, "cpu")
    assert kernel_answers(task, "cuda") == kernel_answers(task, "cuda")


def test_build_corpus_is_deterministic_for_a_seed_and_varies_with_it():
    first = build_corpus(SOME, "cpu", seed=7)
    assert first == build_corpus(SOME, "cpu", seed=7)
    assert first != build_corpus(SOME, "cpu", seed=8)


def test_the_first_turns_are_well_below_perfect_and_the_refinements_mostly_fix():
    mix = Mix()
    examples = build_corpus(ALL, "cpu", seed=0, mix=mix, per_task=4)
    first = [e for e in examples if e.turn == 1]
    refine = [e for e in examples if e.turn == 2]
    assert len(first) == 4 * len(ALL)
    correct = sum(e.expected == "correct" for e in first) / len(first)
    assert correct == pytest.approx(mix.correct_share, abs=0.01)  # 0.45
    assert 0.33 <= correct <= 0.5
    assert len(refine) / len(examples) == pytest.approx(mix.refinement_share, abs=0.01)
    assert all(e.expected == "correct" for e in refine)  # a fix, or the fast version of a slow attempt
    fixes = sum(e.kind.startswith("fix_") for e in refine) / len(refine)
    assert fixes == pytest.approx(1 - mix.refinement_speedup, abs=0.02)
    flawed_kinds = {e.kind for e in first if e.expected != "correct"}
    assert flawed_kinds == set(FLAWED_KINDS)


def test_a_mix_without_flawed_kinds_gives_only_correct_first_turns():
    mix = Mix(first_turn={"slow": 1.0, "fast": 1.0}, refinement_share=0.0)
    examples = build_corpus(SOME[:5], "cuda", seed=1, mix=mix, per_task=2)
    assert len(examples) == 10 and {e.expected for e in examples} == {"correct"} and {e.turn for e in examples} == {1}


def test_first_turn_prompts_carry_the_worked_example_and_refinements_the_attempt_and_its_feedback():
    task = builtin_tasks(names=["Gemm_ReLU_Divide"])[0]
    examples = build_corpus([task], "cpu", seed=0, per_task=4)
    for e in examples:
        (msg,) = e.messages
        assert msg["role"] == "user"
        assert ("Here is an example" in msg["content"]) == (e.turn == 1)
        assert ("Here are your previous attempts:" in msg["content"]) == (e.turn == 2)
    refs = refinement_examples(task, "cpu")
    assert {e.kind for e in refs} == {"fix_" + k for k in FLAWED_KINDS} | {"speedup"}
    answers = {a.kind: a for a in kernel_answers(task, "cpu")}
    for e in refs:
        prompt = e.messages[0]["content"]
        attempt = answers[e.kind[len("fix_"):]] if e.kind.startswith("fix_") else answers["slow"]
        assert attempt.code.strip() in prompt  # the earlier kernel is shown ...
        assert parse_response(e.answer).code != attempt.code  # ... and the answer is a different program
        assert parse_response(e.answer).code in (answers["slow"].code, answers["fast"].code)
    feedback = {e.kind: e.messages[0]["content"].split("Feedback:\n", 1)[1] for e in refs}
    assert feedback["fix_format_error"].startswith("Format error: your program was rejected before compiling.\n- ")
    assert feedback["fix_compile_error"].startswith("Compilation failed. The first errors:\ncpp_sources line ")
    assert re.match(r"Incorrect: input set 0 \(task\): output has NaN/inf in \d+ of \d+ elements", feedback["fix_off_by_one"])
    assert re.match(r"Incorrect: input set 0 \(task\): output differs from the reference in [1-9]\d* of \d+",
                    feedback["fix_missing_op"])
    assert re.match(r"Correct\. Your kernel took [\d.]+ ms against [\d.]+ ms .* a speedup of 0\.\d\dx\.", feedback["speedup"])


def test_a_missing_operator_changes_the_reference_output():
    # the refinement's feedback comes from running the reference without the dropped line: it must differ
    for task in ALL:
        for e in refinement_examples(task, "cpu"):
            if e.kind == "fix_missing_op":
                m = re.search(r"differs from the reference in (\d+) of (\d+)", e.messages[0]["content"])
                assert m and int(m.group(1)) > 0, task.task_id


# ---------------------------------------------------------------------------------------------------
# The real sandbox on the CPU backend: each answer gets the status it claims


VERDICT_CASES = [  # (task, kind); 7 distinct compiled sources, the format errors never compile
    ("ReLU", "fast"), ("ReLU", "off_by_one"), ("ReLU", "compile_error"), ("ReLU", "format_error"),
    ("Sum", "slow"), ("Sum", "format_error"),
    ("Square_matmul", "fast"), ("Square_matmul", "format_error"),
    ("Gemm_ReLU_Divide", "fast"), ("Gemm_ReLU_Divide", "missing_op"), ("Gemm_ReLU_Divide", "format_error"),
    ("Matmul_BatchNorm_Add_ReLU", "slow"),
]


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    cache = os.environ.get("KEVIN_TEST_CACHE_DIR") or str(tmp_path_factory.mktemp("kevin-corpus-cache"))
    config = SandboxConfig(cache_dir=cache, measure_speed=False, run_timeout_s=120.0, compile_timeout_s=400.0,
                           workers=2, seed=None)
    jobs = []
    for name, kind in VERDICT_CASES:
        task = builtin_tasks(names=[name])[0]
        (answer,) = [a for a in kernel_answers(task, "cpu") if a.kind == kind]
        jobs.append((name, answer, task))
    results = Sandbox("cpu", config).evaluate_many([(task, a.code) for _, a, task in jobs])
    return [(name, a, r) for (name, a, _), r in zip(jobs, results)]


@pytest.mark.slow
def test_the_sandbox_gives_every_answer_the_status_it_claims(verdicts):
    wrong = [f"{name} {a.kind}: expected {a.expected}, got {r.status}: {r.feedback[:300]}"
             for name, a, r in verdicts if r.status != a.expected]
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_the_refinement_feedback_reads_like_the_sandboxs(verdicts):
    # the corpus writes its feedback without running anything; the real messages start the same way
    for name, a, r in verdicts:
        if a.kind in FLAWED_KINDS:
            (example,) = [e for e in refinement_examples(builtin_tasks(names=[name])[0], "cpu")
                          if e.kind == "fix_" + a.kind]
            written = example.messages[0]["content"].split("Feedback:\n", 1)[1]
            assert written.split(":")[0] == r.feedback.split(":")[0], (written, r.feedback)


def test_docstring_examples_run():
    import doctest

    import kevin.data.corpus as corpus

    result = doctest.testmod(corpus, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
