import dataclasses
import logging
import sys
import time
from types import SimpleNamespace

import pytest
from core_fakes import ScriptedPolicy, VerdictSandbox, char_ids, response

from kevin.core.policy import Generation
from kevin.core.rollout import TRUNCATED_FEEDBACK, format_error_result, overlap_seconds, rollout, share
from kevin.core.split import split_trajectories
from kevin.core.types import Turn
from kevin.data.task import Task
from kevin.sandbox import SandboxConfig
from kevin.sandbox.result import EvalResult
from kevin.sandbox.sandbox import DeviceGate, Sandbox, _Cancelled, device_gate

CODE = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass  # KERNEL-MARK-{i}\n"


def _tasks(n):
    return [Task(f"t{b}", f"import torch\n\nclass Model(torch.nn.Module):\n    pass  # task {b}\n") for b in range(n)]


def _incorrect(task, code):
    return EvalResult("incorrect", f"FEEDBACK for {task.task_id}: max error 0.5", max_abs_error=0.5)


def _user_text(conversation):
    return "\n".join(m["content"] for m in conversation)


def _run(policy, n_tasks=1, g=2, t=2, verdict=_incorrect, **kw):
    sandbox = VerdictSandbox(verdict)
    trajs = rollout(policy, _tasks(n_tasks), sandbox, n_trajectories=g, n_turns=t, backend="cpu", progress=False, **kw)
    return trajs, sandbox


# --- prompts across turns -----------------------------------------------------------------------------


def test_turn_two_prompt_holds_turn_one_kernel_summary_and_feedback_but_not_its_thought():
    first = response("THOUGHT-SECRET reasoning", CODE.format(i=1), "SUMMARY-ONE: used a loop.")
    policy = ScriptedPolicy([first, first])
    _run(policy, g=1, t=2)
    turn1, turn2 = _user_text(policy.calls[0][0]), _user_text(policy.calls[1][0])
    assert "KERNEL-MARK-1" not in turn1 and "FEEDBACK for t0" not in turn1
    assert "KERNEL-MARK-1" in turn2
    assert "SUMMARY-ONE: used a loop." in turn2
    assert "FEEDBACK for t0: max error 0.5" in turn2
    assert "THOUGHT-SECRET" not in turn2


def test_every_earlier_turn_appears_in_order_in_the_last_prompt():
    policy = ScriptedPolicy([response("t", CODE.format(i=k), f"SUMMARY-{k}") for k in range(3)])
    _run(policy, g=1, t=3)
    last = _user_text(policy.calls[2][0])
    assert last.index("KERNEL-MARK-0") < last.index("KERNEL-MARK-1")
    assert "KERNEL-MARK-2" not in last  # turn 3's own kernel is what it is about to write


def test_the_prompt_budget_drops_the_earliest_attempts_first():
    policy = ScriptedPolicy([response("t", CODE.format(i=k), f"SUMMARY-{k}") for k in range(3)])
    _run(policy, g=1, t=3)
    full = _user_text(policy.calls[2][0])
    budget = len(full) - 10  # ScriptedPolicy counts one token per character: one attempt must go
    policy2 = ScriptedPolicy([response("t", CODE.format(i=k), f"SUMMARY-{k}") for k in range(3)])
    _run(policy2, g=1, t=3, max_prompt_tokens=budget)
    last = _user_text(policy2.calls[2][0])
    assert "KERNEL-MARK-0" not in last and "KERNEL-MARK-1" in last


# --- batching -----------------------------------------------------------------------------------------


def test_each_turn_is_one_generate_call_and_one_evaluate_many_call_over_all_trajectories():
    policy = ScriptedPolicy([response("t", CODE.format(i=0), "s")])
    trajs, sandbox = _run(policy, n_tasks=2, g=3, t=2)
    assert [len(c) for c in policy.calls] == [6, 6]  # B * G = 2 * 3 conversations per turn
    assert [len(b) for b in sandbox.batches] == [6, 6]
    assert len(trajs) == 6 and all(len(tr.turns) == 2 for tr in trajs)


def test_output_is_task_major_then_trajectory_index():
    trajs, _ = _run(ScriptedPolicy([response("t", CODE.format(i=0), "s")]), n_tasks=2, g=3, t=1)
    assert [(tr.task_id, tr.task_index, tr.trajectory_index) for tr in trajs] == [
        ("t0", 0, 0), ("t0", 0, 1), ("t0", 0, 2), ("t1", 1, 0), ("t1", 1, 1), ("t1", 1, 2)
    ]


def test_trajectories_of_a_task_are_sent_their_own_tasks_source():
    trajs, sandbox = _run(ScriptedPolicy([response("t", CODE.format(i=0), "s")]), n_tasks=2, g=2, t=1)
    assert [task.task_id for task, _ in sandbox.batches[0]] == ["t0", "t0", "t1", "t1"]


# --- failures -----------------------------------------------------------------------------------------


def test_a_parse_failure_is_a_format_error_with_the_parsers_message_and_no_sandbox_call():
    policy = ScriptedPolicy([lambda i: "no code here" if i == 0 else response("t", CODE.format(i=i), "s")])
    trajs, sandbox = _run(policy, g=2, t=1)
    r = trajs[0].turns[0].result
    assert r.status == "format_error" and "no code block defining ModelNew" in r.feedback
    assert len(sandbox.batches[0]) == 1  # only trajectory 1's kernel was evaluated
    assert trajs[1].turns[0].result.status == "incorrect"


def test_code_drafted_in_a_thought_that_never_closes_is_not_submitted():
    # the prompt opened <think>; the response stops (not truncated) without </think>: everything was thought
    draft = f"Okay, a first draft:\n```python\n{CODE.format(i=0)}```\nHmm, that is wrong."
    trajs, sandbox = _run(ScriptedPolicy([draft], in_thought=True), g=1, t=1)
    turn = trajs[0].turns[0]
    assert turn.result.status == "format_error" and "no closing </think>" in turn.result.feedback
    assert turn.code is None and turn.thought.startswith("Okay, a first draft")
    assert sandbox.batches == []
    assert turn.response_text == draft  # the text as sampled; only the parser saw the tag put back


def test_a_summary_that_quotes_the_think_tag_keeps_its_answer():
    text = response("Okay, go.", CODE.format(i=0), "I kept the <think> tags out of the kernel.")
    trajs, sandbox = _run(ScriptedPolicy([text], in_thought=True), g=1, t=1)
    turn = trajs[0].turns[0]
    assert turn.code == CODE.format(i=0) and turn.thought == "Okay, go." and len(sandbox.batches[0]) == 1


def test_a_closed_thought_after_an_opened_prompt_parses_as_before():
    trajs, sandbox = _run(ScriptedPolicy([response("Okay, go.", CODE.format(i=0), "s")], in_thought=True), g=1, t=1)
    turn = trajs[0].turns[0]
    assert turn.thought == "Okay, go." and turn.code == CODE.format(i=0) and len(sandbox.batches[0]) == 1


def test_a_failed_turn_does_not_stop_the_trajectory_and_its_feedback_reaches_the_next_prompt():
    policy = ScriptedPolicy(["no code here", response("t", CODE.format(i=2), "s")])
    trajs, _ = _run(policy, g=1, t=3)
    assert [t.result.status for t in trajs[0].turns] == ["format_error", "incorrect", "incorrect"]
    assert "no code block defining ModelNew" in _user_text(policy.calls[1][0])


def test_a_truncated_response_fails_without_reaching_the_sandbox_and_the_trajectory_goes_on():
    ok = response("t", CODE.format(i=0), "s")
    policy = ScriptedPolicy([ok], truncate=lambda turn, i: turn == 0)
    trajs, sandbox = _run(policy, g=1, t=2)
    first, second = trajs[0].turns
    assert first.truncated and first.result.status == "format_error" and first.result.feedback == TRUNCATED_FEEDBACK
    assert [len(b) for b in sandbox.batches] == [1]  # turn 1 sent nothing (no call at all), turn 2 one kernel
    assert second.result.status == "incorrect"


def test_format_error_result_quotes_the_parser():
    assert format_error_result("bad fence").feedback == "Your response could not be parsed: bad fence."


# --- what a turn keeps --------------------------------------------------------------------------------


def test_a_turn_keeps_sampled_ids_logprobs_and_parsed_parts_as_generated():
    text = response("THINK", CODE.format(i=0), "SUM")
    trajs, _ = _run(ScriptedPolicy([text]), g=1, t=1)
    turn = trajs[0].turns[0]
    assert turn.response_ids == char_ids(text) and turn.response_text == text
    assert turn.response_logprobs == (-0.5,) * len(text)
    assert (turn.thought, turn.code, turn.summary) == ("THINK", CODE.format(i=0), "SUM")
    assert turn.result.status == "incorrect"


def test_the_loss_mask_covers_exactly_the_sampled_tokens():
    text = response("THINK", CODE.format(i=0), "SUM")
    trajs, _ = _run(ScriptedPolicy([text]), g=2, t=2)
    n = sum(len(tr.turns) for tr in trajs)
    samples = split_trajectories(trajs, [0.0] * n, [0.0] * n)
    for s, turn in zip(samples, [t for tr in trajs for t in tr.turns]):
        assert s.response_ids == turn.response_ids == char_ids(text)
        assert s.loss_mask == (1,) * len(text)
        assert s.prompt_ids == turn.prompt_ids and len(s.prompt_ids) > 0  # prompt kept apart, never masked in


def test_generation_seconds_are_shared_by_tokens_and_evaluation_seconds_evenly():
    class SlowPolicy(ScriptedPolicy):
        def generate(self, conversations):
            time.sleep(0.05)
            return super().generate(conversations)

    short, long = response("a", CODE.format(i=0), "s"), response("a" * 200, CODE.format(i=0), "s")
    trajs, _ = _run(SlowPolicy([lambda i: short if i == 0 else long]), g=2, t=1)
    a, b = trajs[0].turns[0], trajs[1].turns[0]
    assert a.generation_s + b.generation_s >= 0.05
    assert a.generation_s / b.generation_s == pytest.approx(len(short) / len(long))
    assert a.evaluation_s == pytest.approx(b.evaluation_s)


def test_an_api_policys_reported_token_counts_reach_the_turn_and_share_its_seconds():
    class ApiPolicy(ScriptedPolicy):  # no token ids, as OpenAIPolicy; usage counts 30 and 10 generated tokens
        def generate(self, conversations):
            time.sleep(0.05)
            gens = super().generate(conversations)
            return [Generation((), (), None, g.text, False, reported_prompt_tokens=500,
                               reported_generated_tokens=30 if i == 0 else 10) for i, g in enumerate(gens)]

    trajs, _ = _run(ApiPolicy([response("a", CODE.format(i=0), "s")]), g=2, t=1)
    a, b = trajs[0].turns[0], trajs[1].turns[0]
    assert (a.prompt_tokens, a.generated_tokens, b.generated_tokens) == (500, 30, 10)
    assert a.generation_s / b.generation_s == pytest.approx(30 / 10)  # shared by the reported counts


def test_generation_seconds_are_shared_by_characters_when_some_response_has_no_token_count():
    from kevin.core.rollout import _generation_weights

    counted = Generation((), (), None, "abcd", False, reported_generated_tokens=1)
    uncounted = Generation((), (), None, "abcdefgh", False)
    # one unit for the batch: 4 and 8 characters, not 1 token against 8 characters
    assert _generation_weights([counted, uncounted]) == [4.0, 8.0]
    assert _generation_weights([counted, counted]) == [1.0, 1.0]


def test_a_rollout_with_a_bar_leaves_the_callers_logging_alone(caplog, capfd):
    # the caller logs through the root logger: each line reaches it once, and none is added on stderr
    caplog.set_level(logging.INFO, logger="kevin")
    sandbox = VerdictSandbox(_incorrect)
    rollout(ScriptedPolicy([response("a", CODE.format(i=0), "s")]), _tasks(1), sandbox, n_trajectories=1,
            n_turns=1, backend="cpu", progress=True)
    assert sum("turn 1/1:" in r.getMessage() for r in caplog.records) == 1
    assert "turn 1/1:" not in capfd.readouterr().err


def test_a_rollout_with_a_bar_prints_log_to_stderrs_lines_once_above_it(capfd):
    from kevin.core.run.cli import log_to_stderr

    log = logging.getLogger("kevin")
    saved = log.level, list(log.handlers)
    try:
        log_to_stderr()
        rollout(ScriptedPolicy([response("a", CODE.format(i=0), "s")]), _tasks(1), VerdictSandbox(_incorrect),
                n_trajectories=1, n_turns=1, backend="cpu", progress=True)
        err = capfd.readouterr().err
    finally:
        log.setLevel(saved[0])
        log.handlers[:] = saved[1]
    assert err.count("kevin.core.rollout: turn 1/1:") == 1
    assert log.handlers == saved[1]  # the redirect put the handler back


def test_share_splits_in_proportion():
    # 6 * 1/6, 6 * 2/6, 6 * 3/6; all-zero weights split evenly
    assert share(6.0, [1, 2, 3]) == [1.0, 2.0, 3.0]
    assert share(1.0, [0, 0]) == [0.5, 0.5]


def test_invalid_counts_are_rejected():
    with pytest.raises(ValueError):
        _run(ScriptedPolicy(["x"]), g=0, t=1)


def test_invalid_counts_are_rejected_even_without_tasks():
    with pytest.raises(ValueError, match="n_turns >= 1"):
        rollout(ScriptedPolicy(["x"]), [], VerdictSandbox(_incorrect), n_trajectories=1, n_turns=0, progress=False)


def _backend_of_the_prompt(sandbox_backend, **kw):
    sandbox = VerdictSandbox(_incorrect)
    if sandbox_backend is not None:
        sandbox.backend = sandbox_backend
    seen = []

    def build(task, attempts, *, backend, **rest):
        seen.append(backend)
        return [{"role": "user", "content": "write a kernel"}]

    rollout(ScriptedPolicy(["x"]), _tasks(1), sandbox, n_trajectories=1, n_turns=1, build_messages=build,
            progress=False, **kw)
    return seen


class _FailsOnCall:
    """A scripted policy whose ``generate`` raises on call ``n`` (1-based)."""

    def __init__(self, text, n):
        self.inner, self.n, self.calls = ScriptedPolicy([text] * 8), n, 0

    def count_tokens(self, text):
        return self.inner.count_tokens(text)

    def generate(self, conversations):
        self.calls += 1
        if self.calls == self.n:
            raise ConnectionError("the server went away")
        return self.inner.generate(conversations)


def test_an_exception_after_some_turns_carries_the_turns_finished():
    policy = _FailsOnCall(response("think", CODE.format(i=1), "sum"), n=3)
    with pytest.raises(ConnectionError) as info:
        _run(policy, n_tasks=2, g=2, t=4)
    partial = info.value.trajectories
    assert len(partial) == 4  # B * G = 2 * 2, task-major
    assert [len(tr.turns) for tr in partial] == [2, 2, 2, 2]  # turns 1 and 2 finished, turn 3 failed
    assert [(tr.task_id, tr.trajectory_index) for tr in partial] == [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)]


def test_an_exception_in_the_first_turn_carries_nothing():
    policy = _FailsOnCall("x", n=1)
    with pytest.raises(ConnectionError) as info:
        _run(policy, g=1, t=2)
    assert not hasattr(info.value, "trajectories")


def test_the_prompts_backend_follows_the_sandboxs_when_unset():
    assert _backend_of_the_prompt("cpu") == ["cpu"]


def test_the_prompts_backend_is_cuda_for_a_sandbox_that_names_none():
    assert _backend_of_the_prompt(None) == ["cuda"]


def test_a_backend_that_differs_from_the_sandboxs_is_an_error():
    with pytest.raises(ValueError, match="sandbox judges 'cpu'"):
        _backend_of_the_prompt("cpu", backend="cuda")


def test_a_custom_environment_can_replace_prompts_and_parser():
    seen = []

    def build(task, attempts, **kw):
        seen.append(len(attempts))
        return [{"role": "user", "content": f"solve {task.task_id}"}]

    class P:
        def __init__(self, text):
            self.thought, self.code, self.summary, self.error = None, text, None, None

    trajs, sandbox = _run(ScriptedPolicy(["42"]), g=1, t=2, build_messages=build, parse_response=P)
    assert seen == [0, 1] and [code for _, code in sandbox.batches[0]] == ["42"]


def test_a_custom_parser_gets_the_text_as_sampled_even_when_the_prompt_opened_the_thought():
    class P:
        def __init__(self, text):
            self.thought, self.code, self.summary, self.error = None, text, None, None

    _, sandbox = _run(ScriptedPolicy(["42"], in_thought=True), g=1, t=1, parse_response=P)
    assert [code for _, code in sandbox.batches[0]] == ["42"]


# --- the real CPU sandbox -----------------------------------------------------------------------------


def test_real_sandbox_accepts_the_honest_kernel_and_its_feedback_reaches_the_next_prompt(real_rollout):
    policy, trajs = real_rollout
    t0 = trajs[0].turns[0]
    assert t0.result.status == "correct", t0.result.feedback
    assert t0.evaluation_s > 0
    assert t0.result.feedback in _user_text(policy.calls[1][0])


def test_real_sandbox_rollout_goes_on_after_a_parse_failure(real_rollout):
    _, trajs = real_rollout
    assert [t.result.status for t in trajs[1].turns] == ["format_error", "correct"]
    assert trajs[1].turns[0].evaluation_s == 0.0


def test_real_sandbox_pipelined_gives_the_lockstep_verdicts(real_rollout, add_task, cpu_sandbox):
    # the real_rollout's script in two groups (one per trajectory): each kernel its own call, from two threads
    from kevin.data.prompts import EXAMPLE_CPU

    _, lockstep = real_rollout
    honest = response("Okay, a plain loop.", EXAMPLE_CPU, "A scalar C++ loop adds the inputs.")
    junk = "Okay, I will think about it later."
    policy = ScriptedPolicy([lambda i: honest if i == 0 else junk, honest])
    pipelined = rollout(policy, [add_task], cpu_sandbox, n_trajectories=2, n_turns=2, progress=False, chunks=2)
    assert [[t.result.status for t in tr.turns] for tr in pipelined] == [["correct", "correct"],
                                                                          ["format_error", "correct"]]
    assert [[t.response_text for t in tr.turns] for tr in pipelined] == [
        [t.response_text for t in tr.turns] for tr in lockstep]


def test_tiny_policy_rollout_of_two_tasks_two_trajectories_two_turns_runs_end_to_end(add_task, cpu_sandbox):
    from kevin.core.policy.tiny import tiny_policy

    other = Task("add2", add_task.source, sizes={"cpu": {"N": 1024}})
    policy = tiny_policy(seed=0, max_new_tokens=24)
    trajs = rollout(policy, [add_task, other], cpu_sandbox, n_trajectories=2, n_turns=2, backend="cpu", progress=True)
    assert [(tr.task_id, tr.trajectory_index, len(tr.turns)) for tr in trajs] == [
        ("add", 0, 2), ("add", 1, 2), ("add2", 0, 2), ("add2", 1, 2)
    ]
    for tr in trajs:
        for turn in tr.turns:
            assert 1 <= len(turn.response_ids) <= 24
            assert len(turn.response_logprobs) == len(turn.response_ids)
            assert turn.result.status in ("format_error", "compile_error", "runtime_error", "incorrect", "correct")
        turn2_prompt = policy.tokenizer.decode(list(tr.turns[1].prompt_ids))
        assert "Here are your previous attempts:" in turn2_prompt
        assert tr.turns[0].result.feedback.strip() in turn2_prompt


# --- beam search: resample ----------------------------------------------------------------------------


def _marked(turn):
    """Turn ``turn``'s script: slot i answers a kernel marked ``KERNEL-MARK-{turn}{i}``."""
    return lambda i: response("t", CODE.format(i=f"{turn}{i}"), "s")


def _fast_if(*marks):
    """A verdict: correct at 2x for the kernels marked ``marks``, else incorrect."""
    def verdict(task, code):
        if any(f"KERNEL-MARK-{m}\n" in code for m in marks):
            return EvalResult("correct", "ok", runtime_ms=0.5, baseline_ms=1.0)
        return _incorrect(task, code)
    return verdict


def _beam(n_tasks=1, g=2, t=2, keep=1, every=1, verdict=_incorrect):
    from kevin.core.eval.beam import beam_resampler

    policy = ScriptedPolicy([_marked(turn) for turn in range(t)])
    trajs, _ = _run(policy, n_tasks=n_tasks, g=g, t=t, verdict=verdict, resample=beam_resampler(g, keep, every))
    return policy, trajs


def _texts(turns):
    return [turn.response_text for turn in turns]


def test_a_replaced_slot_continues_a_replica_of_its_parents_history():
    # G = 2, keep 1: after turn 1 slot 1 (correct) survives and slot 0 continues it
    _, (first, second) = _beam(verdict=_fast_if("01"))
    assert _texts(first.turns) == [second.turns[0].response_text, _marked(1)(0)]
    assert [turn.replica for turn in first.turns] == [True, False]
    assert not any(turn.replica for turn in second.turns)


def test_a_replaced_slots_own_turns_are_kept_in_pruned_with_their_positions():
    _, (first, second) = _beam(verdict=_fast_if("01"))
    assert [(i, turn.response_text) for i, turn in first.pruned] == [(0, _marked(0)(0))]
    assert second.pruned == ()


def test_the_next_prompt_of_a_replaced_slot_holds_its_parents_kernel_not_its_own():
    policy, _ = _beam(verdict=_fast_if("01"))
    prompt = _user_text(policy.calls[1][0])  # turn 2, slot 0
    assert "KERNEL-MARK-01\n" in prompt and "KERNEL-MARK-00\n" not in prompt


def test_every_generated_turn_is_exactly_once_a_non_replica_turn():
    # B 2, G 4, T 3, keep 2 every turn: B * G * T = 24 kernels, each on a path or in a pruned list, once
    _, trajs = _beam(n_tasks=2, g=4, t=3, keep=2, verdict=_fast_if("01", "03", "12", "16"))
    own = [turn.response_text for tr in trajs for turn in [*tr.turns, *(p for _, p in tr.pruned)] if not turn.replica]
    generated = [_marked(turn)(i) for turn in range(3) for i in range(8)]
    assert sorted(own) == sorted(generated) and len(own) == 24
    assert all(len(tr.pruned) > 0 for tr in trajs if tr.turns[0].replica)  # beam search did replace slots
    assert sum(tr.turns[-2].replica for tr in trajs) == 4  # after turn 2: 2 of 4 slots per task continue another


def test_resample_is_called_after_every_turn_but_the_last_with_every_history():
    seen = []

    def resample(t, histories):
        seen.append((t, [len(h) for h in histories]))

    _run(ScriptedPolicy([_marked(0)]), g=2, t=3, resample=resample)
    assert seen == [(0, [1, 1]), (1, [2, 2])]


def test_without_resample_nothing_is_a_replica_or_pruned():
    trajs, _ = _run(ScriptedPolicy([_marked(0)]), n_tasks=2, g=2, t=2)
    assert all(tr.pruned == () and not any(turn.replica for turn in tr.turns) for tr in trajs)


def test_a_parent_of_another_task_is_an_error():
    # slots 0, 1 are task 0; slot 2 is task 1
    with pytest.raises(ValueError, match="same task"):
        _run(ScriptedPolicy([_marked(0)]), n_tasks=2, g=2, t=2, resample=lambda t, h: [2, 1, 2, 3])


def _plain(text, replica=False):
    return Turn((), (), text, EvalResult("incorrect", ""), replica=replica)


def test_reparent_builds_every_new_history_from_the_old_ones():
    from kevin.core.rollout import reparent

    a, b = (_plain("a"),), (_plain("b"),)
    history, pruned = reparent([list(a), list(b)], [[], []], [1, 0], n_trajectories=2)  # a swap
    assert _texts(history[0]) == ["b"] and _texts(history[1]) == ["a"]
    assert [(i, t.response_text) for i, t in pruned[0]] == [(0, "a")]
    assert [(i, t.response_text) for i, t in pruned[1]] == [(0, "b")]


def test_reparent_drops_a_replaced_slots_replicas_and_keeps_its_earlier_pruned_turns():
    from kevin.core.rollout import reparent

    copy, own, other = _plain("copy", replica=True), _plain("own"), _plain("other")
    earlier = (0, _plain("earlier"))
    history, pruned = reparent([[copy, own], [copy, other]], [[earlier], []], [1, 1], n_trajectories=2)
    assert [(i, t.response_text) for i, t in pruned[0]] == [(0, "earlier"), (1, "own")]  # the copy is not kept
    assert [(t.response_text, t.replica) for t in history[0]] == [("copy", True), ("other", True)]  # a replica stays one


def test_reparent_refuses_parents_of_the_wrong_length():
    from kevin.core.rollout import reparent

    with pytest.raises(ValueError, match="1 parents for 2"):
        reparent([[], []], [[], []], [0], n_trajectories=2)


# --- the pipelined schedule ---------------------------------------------------------------------------


class _ByPromptPolicy:
    """Answers each conversation from its text alone, whatever shares the call: a kernel marked with a digest of the
    prompt and how many times that prompt was asked before (so a task's G identical first prompts get G kernels), or
    no code when ``junk(prompt)``. Sleeps ``sleep_s``, then calls ``during()``, per call; ``calls`` keeps every call's
    conversations, ``spans`` its (start, end)."""

    def __init__(self, sleep_s=0.0, during=None, junk=lambda text: False):
        self.sleep_s, self.during, self.junk = sleep_s, during, junk
        self.calls, self.spans, self.seen = [], [], {}

    def count_tokens(self, text):
        return len(text)

    def generate(self, conversations):
        import hashlib

        start = time.perf_counter()
        time.sleep(self.sleep_s)
        if self.during is not None:
            self.during()
        self.calls.append([list(c) for c in conversations])
        out = []
        for messages in conversations:
            text = _user_text(messages)
            k = self.seen[text] = self.seen.get(text, -1) + 1
            mark = f"{hashlib.sha1(text.encode()).hexdigest()[:8]}{k}"
            reply = "no code" if self.junk(text) else response("t", CODE.format(i=mark), f"SUMMARY-{mark}")
            out.append(Generation(char_ids(text), char_ids(reply), tuple(-0.5 for _ in reply), reply, False))
        self.spans.append((start, time.perf_counter()))
        return out


def _mark(code):
    return code.split("KERNEL-MARK-")[1].split("\n")[0]


def _by_mark(task, code):
    """Correct at 2x for marks whose digest starts with a digit, else incorrect; the feedback names the mark."""
    mark = _mark(code)
    if mark[0].isdigit():
        return EvalResult("correct", f"FEEDBACK-{mark}: correct", runtime_ms=0.5, baseline_ms=1.0)
    return EvalResult("incorrect", f"FEEDBACK-{mark}: max error 0.5", max_abs_error=0.5)


class _SleepySandbox(VerdictSandbox):
    """``verdict`` per kernel after sleeping ``seconds(task, code)`` for each kernel of the call, then raising
    OSError if ``fail(task)``; counts the kernels in it (``inside``)."""

    def __init__(self, verdict=_by_mark, seconds=lambda task, code: 0.0, fail=lambda task: False):
        super().__init__(verdict)
        self.seconds, self.fail, self.inside = seconds, fail, 0

    def evaluate_many(self, jobs):
        self.inside += len(jobs)
        try:
            for task, code in jobs:
                time.sleep(self.seconds(task, code))
                if self.fail(task):
                    raise OSError("the sandbox's worker died")
            return super().evaluate_many(jobs)
        finally:
            self.inside -= len(jobs)


def _costless(trajectories):
    return [dataclasses.replace(tr, turns=tuple(dataclasses.replace(t, generation_s=0.0, evaluation_s=0.0)
                                                for t in tr.turns)) for tr in trajectories]


def test_the_pipelined_schedule_returns_what_lockstep_returns():
    # 3 tasks x 2 trajectories x 3 turns; task 0's kernels take longest, so groups finish out of order
    def run(chunks):
        sandbox = _SleepySandbox(seconds=lambda task, code: 0.005 * (3 - int(task.task_id[1])))
        return rollout(_ByPromptPolicy(), _tasks(3), sandbox, n_trajectories=2, n_turns=3, backend="cpu",
                       progress=False, chunks=chunks)

    lockstep, by_task, by_row = run(1), run(3), run(6)
    assert _costless(by_task) == _costless(lockstep) == _costless(by_row)
    assert len({t.response_text for tr in lockstep for t in tr.turns}) == 18  # 3 x 2 x 3 distinct kernels


def test_a_pipelined_trajectorys_next_prompt_holds_its_own_feedback_and_no_other():
    policy = _ByPromptPolicy()
    sandbox = _SleepySandbox(seconds=lambda task, code: 0.01 * (2 - int(task.task_id[1])))
    trajs = rollout(policy, _tasks(2), sandbox, n_trajectories=2, n_turns=2, backend="cpu", progress=False, chunks=2)
    for tr in trajs:
        first, second = tr.turns
        prompt = "".join(map(chr, second.prompt_ids))  # (one id per character)
        assert f"FEEDBACK-{_mark(first.code)}" in prompt
        others = [_mark(o.turns[0].code) for o in trajs if o is not tr]
        assert not any(f"FEEDBACK-{m}" in prompt for m in others)


def test_pipelined_generation_overlaps_a_busy_sandbox():
    # 3 tasks x 1 trajectory x 2 turns; a call to the policy sleeps 0.2 s, the sandbox judges one kernel at a time
    # (evaluation_slots=1) in 0.3 s each. Lockstep: per turn 0.2 + 3 * 0.3 = 1.1 s, so 2.2 s.
    # Pipelined: turn 1 of all [0, 0.2]; kernels k0 [0.2, 0.5], k1 [0.5, 0.8], k2 [0.8, 1.1]. At 0.5 group 0 is due
    # and group 1 due in 0.3 s >= a 0.2 s call: turn 2 of group 0 [0.5, 0.7], its kernel queued after k2 [1.1, 1.4];
    # group 1 at 0.8 (group 2 due in 0.3 s) [0.8, 1.0] -> [1.4, 1.7]; group 2 at 1.1 [1.1, 1.3] -> [1.7, 2.0].
    # Wall 2.0 s; the policy busy 4 * 0.2 = 0.8 s, the sandbox 6 * 0.3 = 1.8 s: both at once 0.8 + 1.8 - 2.0 = 0.6 s.
    policy = _ByPromptPolicy(sleep_s=0.2)
    sandbox = _SleepySandbox(seconds=lambda task, code: 0.3)
    start = time.perf_counter()
    trajs = rollout(policy, _tasks(3), sandbox, n_trajectories=1, n_turns=2, backend="cpu", progress=False,
                    chunks=3, evaluation_slots=1)
    wall = time.perf_counter() - start
    generation = sum(t.generation_s for tr in trajs for t in tr.turns)
    evaluation = sum(t.evaluation_s for tr in trajs for t in tr.turns)
    assert 1.99 <= wall < 2.15  # 2.0 s by the schedule above; lockstep would take 2.2 s
    assert generation == pytest.approx(0.8, abs=0.1) and evaluation == pytest.approx(1.8, abs=0.1)
    assert overlap_seconds(generation, evaluation, wall) == pytest.approx(0.6, abs=0.12)
    assert [len(c) for c in policy.calls] == [3, 1, 1, 1]


def test_with_a_sandbox_faster_than_a_call_the_pipelined_schedule_makes_locksteps_calls():
    # 2 tasks x 1 trajectory x 2 turns; a policy call takes 0.15 s, a kernel 0.03 s, one at a time. After turn 1,
    # group 0 is due at 0.18 s and group 1 in an estimated 0.03 s < a 0.15 s call: waiting for it (until 0.21 s)
    # spares a call, so 2 calls of 2 responses, not 3
    policy = _ByPromptPolicy(sleep_s=0.15)
    rollout(policy, _tasks(2), _SleepySandbox(seconds=lambda task, code: 0.03), n_trajectories=1, n_turns=2,
            backend="cpu", progress=False, chunks=2, evaluation_slots=1)
    assert [len(c) for c in policy.calls] == [2, 2]


def _tasks_of_calls(policy):
    """Each call's tasks, read from the task source in its prompts ("# task b")."""
    return [sorted({"t" + _user_text(c).split("# task ")[1][0] for c in call}) for call in policy.calls]


def test_a_due_group_waits_for_a_straggling_kernel_no_longer_than_a_call():
    # 2 tasks x 1 trajectory x 2 turns, a call sleeps 0.1 s; t1's kernel 0.01 s, t0's 1.0 s. After call 1 t1 is due
    # and t0's kernel is estimated due in 0.01 s (the mean of those judged), sooner than a call: t1 waits, but only a
    # call's 0.1 s, then goes alone, 0.9 s before t0's kernel is judged
    policy = _ByPromptPolicy(sleep_s=0.1)
    sandbox = _SleepySandbox(seconds=lambda task, code: 1.0 if task.task_id == "t0" else 0.01)
    rollout(policy, _tasks(2), sandbox, n_trajectories=1, n_turns=2, backend="cpu", progress=False, chunks=2)
    assert _tasks_of_calls(policy) == [["t0", "t1"], ["t1"], ["t0"]]
    assert policy.spans[1][0] - policy.spans[0][1] < 0.6  # (~0.11 s; 1.0 s when it waited the straggler out)


def test_a_staggered_rollout_starts_the_second_wave_while_the_first_waves_kernel_is_judged():
    # 2 tasks x 1 trajectory x 2 turns, stagger 2: a call sleeps 0.2 s, a kernel 0.3 s.
    # Wave t0 [0, 0.2] -> its kernel [0.2, 0.5]; wave t1 [0.2, 0.4], begun while t0's kernel is in the sandbox
    policy = _ByPromptPolicy(sleep_s=0.2)
    sandbox = _SleepySandbox(seconds=lambda task, code: 0.3)
    rollout(policy, _tasks(2), sandbox, n_trajectories=1, n_turns=2, backend="cpu", progress=False, chunks=2,
            stagger=2)
    assert _tasks_of_calls(policy)[:2] == [["t0"], ["t1"]]
    first_kernel_judged = policy.spans[0][1] + 0.3
    assert policy.spans[1][0] < first_kernel_judged


def test_a_due_wave_does_not_wait_for_another_wave_estimated_due_sooner_than_a_call():
    # 2 tasks x 1 trajectory x 3 turns, stagger 2: a call 0.2 s; t0's kernel 0.6 s, t1's 0.05 s.
    # t0 [0, 0.2] -> k0 [0.2, 0.8]; t1 [0.2, 0.4] -> k1 [0.4, 0.45]. At 0.45 t1 is due and t0 is estimated due in
    # 0.05 s (the mean latency so far), less than a call: unstaggered, generate_now would wait for t0 and generate
    # both at 0.8; t1's wave waits for its own groups only, so its second turn goes alone at 0.45
    policy = _ByPromptPolicy(sleep_s=0.2)
    sandbox = _SleepySandbox(seconds=lambda task, code: 0.6 if task.task_id == "t0" else 0.05)
    rollout(policy, _tasks(2), sandbox, n_trajectories=1, n_turns=3, backend="cpu", progress=False, chunks=2,
            stagger=2)
    assert _tasks_of_calls(policy)[:3] == [["t0"], ["t1"], ["t1"]]


def test_a_wave_due_beside_another_goes_while_the_other_waits_for_its_own_group():
    # 4 tasks x 1 trajectory x 2 turns, stagger 2: waves {t0, t1} and {t2, t3}; a call 0.2 s; t1's kernel 1 s, the
    # others' 0.05 s. t0 is due at 0.25 and waits for t1 (estimated due in 0.05 s, the mean latency so far, less
    # than a call); t2 and t3 are due at 0.45 beside it, and their wave has nothing in the sandbox: it goes at once,
    # not at 1.2 s with t0 and t1
    policy = _ByPromptPolicy(sleep_s=0.2)
    sandbox = _SleepySandbox(seconds=lambda task, code: 1.0 if task.task_id == "t1" else 0.05)
    rollout(policy, _tasks(4), sandbox, n_trajectories=1, n_turns=2, backend="cpu", progress=False, chunks=4,
            stagger=2)
    assert _tasks_of_calls(policy)[:3] == [["t0", "t1"], ["t2", "t3"], ["t2", "t3"]]


def test_a_staggered_rollout_returns_what_lockstep_returns():
    def run(chunks, stagger):
        sandbox = _SleepySandbox(seconds=lambda task, code: 0.005 * (3 - int(task.task_id[1])))
        return rollout(_ByPromptPolicy(), _tasks(3), sandbox, n_trajectories=2, n_turns=3, backend="cpu",
                       progress=False, chunks=chunks, stagger=stagger)

    assert _costless(run(3, 3)) == _costless(run(6, 2)) == _costless(run(1, 1))


def test_more_waves_than_groups_gives_each_group_its_own_wave():
    policy = _ByPromptPolicy()
    rollout(policy, _tasks(2), _SleepySandbox(), n_trajectories=1, n_turns=1, backend="cpu", progress=False,
            chunks=2, stagger=5)
    assert _tasks_of_calls(policy) == [["t0"], ["t1"]]


@pytest.mark.parametrize("kw", [dict(chunks=1), dict(resample=lambda t, histories: None)])
def test_stagger_in_lockstep_is_an_error(kw):
    with pytest.raises(ValueError, match="stagger=2 needs the pipelined schedule"):
        rollout(_ByPromptPolicy(), _tasks(2), _SleepySandbox(), n_trajectories=1, n_turns=1, backend="cpu",
                progress=False, stagger=2, **kw)


def test_stagger_below_one_is_an_error():
    with pytest.raises(ValueError, match="stagger >= 1"):
        rollout(_ByPromptPolicy(), _tasks(2), _SleepySandbox(), n_trajectories=1, n_turns=1, backend="cpu",
                progress=False, chunks=2, stagger=0)


def test_an_error_raised_in_the_sandboxs_thread_reaches_the_caller_without_waiting_for_other_kernels():
    # task t1's kernel raises after 0.1 s while task t0's takes 1 s: raised at about 0.1 s, not after 1 s
    sandbox = _SleepySandbox(seconds=lambda task, code: 1.0 if task.task_id == "t0" else 0.1,
                             fail=lambda task: task.task_id == "t1")
    start = time.perf_counter()
    with pytest.raises(OSError, match="worker died"):
        rollout(_ByPromptPolicy(), _tasks(2), sandbox, n_trajectories=1, n_turns=2, backend="cpu", progress=False,
                chunks=2)
    assert time.perf_counter() - start < 0.6


def test_an_exception_in_a_pipelined_rollout_carries_each_trajectorys_judged_turns():
    # task t1 never answers with code (no kernel: due at once), t0's kernel takes 0.5 s. Call 1: turn 1 of both;
    # t1 is due at once and an instant call is no reason to wait, so calls 2 and 3 are t1's turns 2 and 3 alone, and
    # call 3 fails: t1 carries its 2 judged turns, t0 none (its kernel was still in the sandbox)
    calls = []

    def third_fails():
        calls.append(1)
        if len(calls) == 3:
            raise ConnectionError("the server went away")

    policy = _ByPromptPolicy(during=third_fails, junk=lambda text: "# task 1" in text)
    sandbox = _SleepySandbox(seconds=lambda task, code: 0.5)
    with pytest.raises(ConnectionError) as info:
        rollout(policy, _tasks(2), sandbox, n_trajectories=1, n_turns=3, backend="cpu", progress=False, chunks=2)
    assert [len(tr.turns) for tr in info.value.trajectories] == [0, 2]


class _KevinSandbox(Sandbox):
    """Kevin's ``Sandbox`` on ``backend`` to the rollout's defaults, without its processes: ``evaluate_many`` goes to
    ``inner``; ``gate``: its one device's `DeviceGate`."""

    def __init__(self, inner, gate=None, backend="cuda"):  # (Sandbox.__init__ is not called: no cache, no folder)
        self.backend, self.inner = backend, inner
        self.config = SandboxConfig(workers=1)
        self._devices = SimpleNamespace(gates={"cpu": gate or DeviceGate()}, slots=["cpu"])

    def evaluate_many(self, jobs):
        return self.inner.evaluate_many(jobs)


def test_with_kevins_sandbox_on_cuda_the_default_is_pipelined_one_kernel_per_call():
    inner = _SleepySandbox()
    rollout(_ByPromptPolicy(), _tasks(2), _KevinSandbox(inner), n_trajectories=2, n_turns=2, progress=False)
    assert [len(b) for b in inner.batches] == [1] * 8  # 2 tasks x 2 trajectories x 2 turns, each its own call


def test_the_default_is_one_group_per_task_with_kevins_sandbox_on_cuda_else_lockstep():
    from kevin.core.rollout import default_chunks

    # 4 tasks x 8 trajectories: one group per task; 1 task: its two halves
    assert default_chunks(_KevinSandbox(_SleepySandbox()), 4, 8) == 4
    assert default_chunks(_KevinSandbox(_SleepySandbox()), 1, 8) == 2
    assert default_chunks(_KevinSandbox(_SleepySandbox(), backend="cpu"), 4, 8) == 1  # policy and compilers: 1 CPU
    assert default_chunks(_SleepySandbox(), 4, 8) == 1


def test_a_generate_call_made_while_kernels_are_in_the_sandbox_holds_its_device_gate():
    # one kernel at a time: t0's [0.01, 0.06], t1's [0.06, 0.21]; at 0.06 t1 is due in an estimated 0.05 s, more
    # than a 0.01 s call, so t0's turn 2 is generated while t1's kernel is in the sandbox
    gate, seen = DeviceGate(), []
    inner = _SleepySandbox(seconds=lambda task, code: 0.15 if task.task_id == "t1" else 0.05)
    policy = _ByPromptPolicy(sleep_s=0.01, during=lambda: seen.append((inner.inside, gate._shared)))
    rollout(policy, _tasks(2), _KevinSandbox(inner, gate), n_trajectories=1, n_turns=2, progress=False,
            evaluation_slots=1)
    assert seen[0] == (0, 0)  # turn 1: nothing in the sandbox, nothing held
    assert (1, 1) in seen and all(shared == 1 for inside, shared in seen if inside)
    assert gate._shared == 0  # released after each call


class _StreamingPolicy(_ByPromptPolicy):
    """`_ByPromptPolicy` whose ``generate`` takes ``on_done``: it hands over the responses ``early(i)`` picks, then
    sleeps ``sleep_s`` (its longer responses still being sampled) and records ``during()``."""

    def __init__(self, sleep_s=0.0, during=None, early=lambda i: True, junk=lambda text: False):
        super().__init__(junk=junk)
        self.rest_s, self.rest_during, self.early = sleep_s, during, early

    def generate(self, conversations, on_done=None):
        out = super().generate(conversations)
        for i, g in enumerate(out):
            if on_done is not None and self.early(i):
                on_done(i, g)
        time.sleep(self.rest_s)
        if self.rest_during is not None:
            self.rest_during()
        return out


def _stepping_aside(hold_s=0.0):
    """A rollout (1 task x 2 trajectories x 1 turn) whose policy, in its one call, waits for a timing to queue, then
    calls its ``between_steps`` hook; the timing holds the device ``hold_s``. (trajectories, log)"""
    import threading

    gate, log = DeviceGate(policy_patience_s=30.0, step_aside_after_s=0.0), []

    def timed():
        with gate.exclusive():
            time.sleep(hold_s)
            log.append("timing")

    class Yielding(_StreamingPolicy):
        def generate(self, conversations, on_done=None, between_steps=None):
            if not log:  # the first call: a timing queues behind it, then the policy reaches a step
                thread = threading.Thread(target=timed, daemon=True)
                thread.start()
                deadline = time.monotonic() + 10
                while not gate._waiting:
                    assert time.monotonic() < deadline, "the timing never queued"
                    time.sleep(0.01)
                between_steps(lambda: log.append("synced"))
                log.append("policy on")
                thread.join(5)
            return super().generate(conversations, on_done)

    out = rollout(Yielding(early=lambda i: False), _tasks(1), _KevinSandbox(_SleepySandbox(), gate), n_trajectories=2,
                  n_turns=1, progress=False)
    assert gate._shared == 0
    return out, log


def test_a_policy_taking_between_steps_gets_a_hook_that_steps_its_device_hold_aside_for_a_waiting_timing():
    _, log = _stepping_aside()
    assert log == ["synced", "timing", "policy on"]


def test_the_seconds_a_call_stepped_aside_are_not_counted_as_its_generation():
    # the timing holds the device 0.3 s inside the call, which is otherwise instant: its turns share under 0.3 s
    trajectories, _ = _stepping_aside(hold_s=0.3)
    assert sum(turn.generation_s for tr in trajectories for turn in tr.turns) < 0.3


def test_kernels_handed_over_during_a_generate_call_are_judged_before_it_returns():
    # 2 tasks x 2 trajectories; the call hands over its responses, then samples on for 0.3 s; a kernel takes 0.01 s
    seen = []
    inner = _SleepySandbox(seconds=lambda task, code: 0.01)
    policy = _StreamingPolicy(sleep_s=0.3, during=lambda: seen.append(len(inner.batches)))
    trajs = rollout(policy, _tasks(2), _KevinSandbox(inner), n_trajectories=2, n_turns=2, progress=False)
    assert seen[0] == 4  # all four turn-1 kernels judged while the first call still ran
    # each response's share of its call's seconds (at least 0.3 s a call, shared by 4), set after the call ended
    assert all(turn.generation_s >= 0.07 for tr in trajs for turn in tr.turns)


def test_a_streaming_policy_gives_the_trajectories_of_one_that_hands_nothing_over():
    # odd rows handed over early, even rows (and task 1's junk, a format error) only by the return
    def run(policy):
        sandbox = _KevinSandbox(_SleepySandbox(seconds=lambda task, code: 0.005 * (2 - int(task.task_id[1]))))
        return rollout(policy, _tasks(3), sandbox, n_trajectories=2, n_turns=3, progress=False)

    junk = lambda text: "# task 1" in text  # noqa: E731
    plain = run(_ByPromptPolicy(junk=junk))
    streamed = run(_StreamingPolicy(early=lambda i: i % 2 == 1, junk=junk))
    assert _costless(streamed) == _costless(plain)


def test_a_streaming_policys_first_call_holds_the_device_gate_with_nothing_yet_in_the_sandbox():
    # a kernel handed over during the call could otherwise be timed while the policy computes
    gate, seen = DeviceGate(), []
    policy = _StreamingPolicy(during=lambda: seen.append(gate._shared), early=lambda i: False)
    rollout(policy, _tasks(1), _KevinSandbox(_SleepySandbox(), gate), n_trajectories=2, n_turns=1, progress=False)
    assert seen == [1] and gate._shared == 0


def test_the_sandboxs_capacity_is_its_compile_workers_and_two_per_device(tmp_path):
    sandbox = Sandbox("cpu", SandboxConfig(workers=3, cache_dir=str(tmp_path)))  # (starts no process)
    assert sandbox.capacity == 3 + 2  # 3 compile workers, 2 more for the one device


def test_while_the_device_is_in_use_a_timing_waits_and_a_correctness_run_does_not(tmp_path):
    sandbox = Sandbox("cpu", SandboxConfig(workers=1, cache_dir=str(tmp_path)))
    gate = device_gate("cpu", "cpu")  # the process's one gate for these cores, the sandbox's too
    with sandbox.device_in_use():
        assert gate._shared == 1
        with gate.shared(timeout=0.1):  # a correctness run is admitted beside it
            pass
        with pytest.raises(_Cancelled):  # a timing is not: it waits until the hold ends
            with gate.exclusive(timeout=0.1):
                pass
    assert gate._shared == 0


def test_beam_search_with_kevins_sandbox_runs_in_lockstep():
    from kevin.core.eval.beam import beam_resampler

    policy = ScriptedPolicy([_marked(0), _marked(1)])
    inner = VerdictSandbox(_fast_if("01"))
    first, second = rollout(policy, _tasks(1), _KevinSandbox(inner), n_trajectories=2, n_turns=2, progress=False,
                            resample=beam_resampler(2, 1, 1))
    assert [len(c) for c in policy.calls] == [2, 2] and [len(b) for b in inner.batches] == [2, 2]
    assert [turn.replica for turn in first.turns] == [True, False]  # slot 0 continued slot 1 (correct)


def test_beam_search_refuses_groups():
    from kevin.core.eval.beam import beam_resampler

    with pytest.raises(ValueError, match="lockstep"):
        _run(ScriptedPolicy([_marked(0)]), g=2, t=2, resample=beam_resampler(2, 1, 1), chunks=2)


def test_busy_shares_sum_to_the_union_of_the_intervals():
    from kevin.core.rollout import busy_shares

    # [0, 1] a alone: 1; [1, 2] a, b: 0.5 each; [2, 3] a, b, c: 1/3 each; [3, 4] c alone: 1; [6, 7] d: 1
    shares = busy_shares([(0.0, 3.0), (1.0, 3.0), (2.0, 4.0), (6.0, 7.0)])
    assert shares == pytest.approx([1 + 0.5 + 1 / 3, 0.5 + 1 / 3, 1 / 3 + 1, 1.0])
    assert sum(shares) == pytest.approx(4.0 + 1.0)  # the union: [0, 4] and [6, 7]


def test_busy_shares_give_an_instant_nothing_and_a_nested_interval_half_of_its_time():
    from kevin.core.rollout import busy_shares

    # a = [0, 4] holds b = [1, 2] and the instant c = [3, 3]: a alone on [0, 1] and [2, 4] (3 s), half of [1, 2]
    assert busy_shares([(0.0, 4.0), (1.0, 2.0), (3.0, 3.0)]) == pytest.approx([3.5, 0.5, 0.0])


def test_a_rollout_starts_by_making_a_reusing_sandbox_forget_its_verdicts():
    class ForgetfulSandbox(VerdictSandbox):
        forgotten = 0

        def forget_verdicts(self):
            self.forgotten += 1

    sandbox = ForgetfulSandbox(_incorrect)
    for _ in range(2):
        rollout(ScriptedPolicy([response("a", CODE.format(i=0), "s")] * 2), _tasks(1), sandbox, n_trajectories=1,
                n_turns=2, backend="cpu", progress=False)
    assert sandbox.forgotten == 2  # one rollout's policy is fixed: a verdict is reused within it, never across


# --- continuing a stopped rollout (start_from, on_turn) -------------------------------------------------------------


def _continued(chunks, stop_after):
    """3 tasks x 2 trajectories x 3 turns by `_ByPromptPolicy`, unbroken, and again from the ``stop_after``-th
    snapshot that ``on_turn`` gave (with a new policy and sandbox, as a new process would); both without costs."""
    def run(**kw):
        sandbox = _SleepySandbox(seconds=lambda task, code: 0.004 * (3 - int(task.task_id[1])))
        return rollout(_ByPromptPolicy(), _tasks(3), sandbox, n_trajectories=2, n_turns=3, backend="cpu",
                       progress=False, chunks=chunks, **kw)

    snapshots = []
    unbroken = run(on_turn=snapshots.append)
    continued = run(start_from=snapshots[stop_after - 1])
    return _costless(unbroken), _costless(continued), snapshots


def test_a_lockstep_rollout_continued_from_its_turn_one_snapshot_returns_the_unbroken_ones_trajectories():
    unbroken, continued, snapshots = _continued(chunks=1, stop_after=1)
    assert [len(tr.turns) for tr in snapshots[0]] == [1] * 6  # lockstep: one snapshot per turn, all rows at once
    assert len(snapshots) == 3 and continued == unbroken


def test_a_pipelined_rollout_continued_from_a_snapshot_with_groups_at_different_turns_returns_the_same(monkeypatch):
    monkeypatch.setattr(sys.modules["kevin.core.rollout"], "TELL_EVERY_S", 0.0)  # a snapshot after every group's turn
    unbroken, continued, snapshots = _continued(chunks=3, stop_after=4)
    assert len(snapshots) == 9  # 3 groups x 3 turns, one snapshot per group's turn
    assert len({len(tr.turns) for tr in snapshots[3]}) >= 2  # task 2's kernels are fastest: its group ran ahead
    assert continued == unbroken


def test_rows_that_started_further_on_sit_out_until_the_others_catch_up():
    # 2 tasks x 1 trajectory, task 0 with 2 turns judged, task 1 with 1; lockstep to 3 turns: turn 2 is asked of
    # task 1 alone (a call of 1), turn 3 of both (a call of 2)
    snapshots = []
    rollout(_ByPromptPolicy(), _tasks(2), _SleepySandbox(), n_trajectories=1, n_turns=2, backend="cpu",
            progress=False, on_turn=snapshots.append)
    start = [snapshots[1][0], dataclasses.replace(snapshots[1][1], turns=snapshots[1][1].turns[:1])]
    policy = _ByPromptPolicy()
    trajs = rollout(policy, _tasks(2), _SleepySandbox(), n_trajectories=1, n_turns=3, backend="cpu", progress=False,
                    start_from=start)
    assert [len(c) for c in policy.calls] == [1, 2]
    assert [len(tr.turns) for tr in trajs] == [3, 3]
    assert trajs[0].turns[:2] == start[0].turns  # the judged turns are kept as they were


def test_a_pipelined_rollout_calls_on_turn_once_per_groups_turn_with_its_evaluation_seconds_settled(monkeypatch):
    # 2 tasks x 1 trajectory x 2 turns, one group each; the sandbox judges one kernel at a time, 0.05 s each. Task
    # 0's turn-1 kernel goes first, so its group closes first, alone: its 0.05 s in the sandbox are all its own
    monkeypatch.setattr(sys.modules["kevin.core.rollout"], "TELL_EVERY_S", 0.0)  # no interval between calls
    snapshots = []
    rollout(_ByPromptPolicy(), _tasks(2), _SleepySandbox(seconds=lambda task, code: 0.05), n_trajectories=1,
            n_turns=2, backend="cpu", progress=False, chunks=2, evaluation_slots=1, on_turn=snapshots.append)
    assert len(snapshots) == 4
    first = snapshots[0]
    assert len(first[0].turns) == 1 and len(first[1].turns) == 0
    assert 0.04 < first[0].turns[0].evaluation_s < 0.5  # settled (its 0.05 s, more on a loaded machine), not 0.0


def test_a_pipelined_rollout_tells_on_turn_at_most_every_interval_and_once_at_the_end(monkeypatch):
    # 2 tasks x 1 trajectory x 2 turns: 4 group turns judged within far less than the interval; the first is told
    # at once (nothing told before), the other three together at the end
    monkeypatch.setattr(sys.modules["kevin.core.rollout"], "TELL_EVERY_S", 60.0)
    snapshots = []
    rollout(_ByPromptPolicy(), _tasks(2), _SleepySandbox(seconds=lambda task, code: 0.01), n_trajectories=1,
            n_turns=2, backend="cpu", progress=False, chunks=2, on_turn=snapshots.append)
    assert len(snapshots) == 2
    assert [len(tr.turns) for tr in snapshots[-1]] == [2, 2]


def test_a_pipelined_rollout_stopped_by_an_error_still_tells_on_turn_its_last_judged_turns(monkeypatch):
    # the setup of the test above (t1 without code, t0's kernel 0.5 s, the third call fails): t1's turn 1 is told
    # at once, its turn 2 only when the error ends the rollout
    monkeypatch.setattr(sys.modules["kevin.core.rollout"], "TELL_EVERY_S", 60.0)
    calls, snapshots = [], []

    def third_fails():
        calls.append(1)
        if len(calls) == 3:
            raise ConnectionError("the server went away")

    policy = _ByPromptPolicy(during=third_fails, junk=lambda text: "# task 1" in text)
    with pytest.raises(ConnectionError):
        rollout(policy, _tasks(2), _SleepySandbox(seconds=lambda task, code: 0.5), n_trajectories=1, n_turns=3,
                backend="cpu", progress=False, chunks=2, on_turn=snapshots.append)
    assert [len(tr.turns) for tr in snapshots[-1]] == [0, 2]


def test_start_from_another_rollouts_trajectories_is_refused():
    snapshots = []
    _run(_ByPromptPolicy(), n_tasks=2, g=1, t=1, on_turn=snapshots.append)
    swapped = snapshots[0][::-1]  # task t1's trajectory where t0's belongs
    with pytest.raises(ValueError, match="not this rollout's"):
        _run(_ByPromptPolicy(), n_tasks=2, g=1, t=2, start_from=swapped)
    with pytest.raises(ValueError, match="has 2 trajectories"):
        _run(_ByPromptPolicy(), n_tasks=1, g=1, t=2, start_from=snapshots[0])
    with pytest.raises(ValueError, match="more than n_turns"):
        _run(_ByPromptPolicy(), n_tasks=2, g=1, t=1, start_from=[dataclasses.replace(
            tr, turns=tr.turns * 2) for tr in snapshots[0]])


def test_beam_search_cannot_continue_a_stopped_rollout():
    from kevin.core.eval.beam import beam_resampler

    snapshots = []
    _run(_ByPromptPolicy(), g=2, t=1, on_turn=snapshots.append)
    with pytest.raises(ValueError, match="beam search"):
        _run(_ByPromptPolicy(), g=2, t=2, resample=beam_resampler(2, 1, 1), start_from=snapshots[0])
