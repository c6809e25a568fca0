import json
import math
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import torch

from kevin.core.policy import (
    Generation,
    OpenAIError,
    OpenAIPolicy,
    Policy,
    TransformersPolicy,
    VLLMPolicy,
    cut_at_stop,
    left_pad,
    opens_thought,
    round_up,
)
from kevin.core.policy.tiny import build_tiny_model, build_tiny_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return build_tiny_model(tok, seed=0)


CONVERSATIONS = [
    [{"role": "user", "content": "Write a fused softmax kernel."}],
    [{"role": "system", "content": "You write kernels."}, {"role": "user", "content": "relu"}],
    [{"role": "user", "content": "Optimize the matmul with shared memory tiling and vectorized loads, please."}],
]


def reference_logprobs(model, gen: Generation, temperature: float, top_p: float) -> torch.Tensor:
    """Teacher-forced log-probs of the sampled ids, from an unpadded forward pass, under the sampling
    distribution: softmax(logits / T) restricted to the top-p nucleus and renormalised."""
    ids = torch.tensor([list(gen.prompt_ids) + list(gen.token_ids)], device=model.device)
    with torch.no_grad():
        logits = model(ids).logits[0, len(gen.prompt_ids) - 1 : -1].float() / temperature  # [n, V]
    logp = torch.log_softmax(logits, dim=-1)
    if top_p < 1.0:
        sorted_lp, order = logp.sort(dim=-1, descending=True)
        cum = sorted_lp.exp().cumsum(-1)
        keep_sorted = (cum - sorted_lp.exp()) < top_p  # a token is kept while the mass before it is < p
        keep = torch.zeros_like(keep_sorted).scatter(1, order, keep_sorted)
        logp = torch.log_softmax(logits.masked_fill(~keep, float("-inf")), dim=-1)
    return logp.gather(1, torch.tensor(gen.token_ids, device=logp.device)[:, None]).squeeze(1)


# --- pure helpers -------------------------------------------------------------------------------------


def test_cut_at_stop_keeps_the_first_stop_token_and_drops_the_padding_after_it():
    assert cut_at_stop([5, 7, 2, 0, 0], [-1.0, -2.0, -0.5, 0.0, 0.0], {2, 0}) == ((5, 7, 2), (-1.0, -2.0, -0.5), True)


def test_cut_at_stop_without_a_stop_token_keeps_everything_and_reports_not_stopped():
    assert cut_at_stop([5, 7], None, {2}) == ((5, 7), None, False)


def test_left_pad_puts_padding_on_the_left_with_a_zero_mask():
    assert left_pad([[7, 8], [9]], 3, 0) == ([[0, 7, 8], [0, 0, 9]], [[0, 1, 1], [0, 0, 1]])


def test_round_up_goes_to_the_next_multiple():
    # 1025 -> 5 * 256 = 1280; 1024 stays; 1 -> 256
    assert [round_up(1025, 256), round_up(1024, 256), round_up(1, 256)] == [1280, 1024, 256]


def test_generation_rejects_logprobs_of_another_length():
    with pytest.raises(ValueError):
        Generation((1,), (2, 3), (-1.0,), "x", False)


# --- transformers backend -----------------------------------------------------------------------------


def test_transformers_policy_satisfies_the_policy_protocol(tok, model):
    assert isinstance(TransformersPolicy(model, tok), Policy)


def test_auto_mode_is_plain_generate_on_the_cpu(tok, model):
    assert TransformersPolicy(model, tok).resolved_mode() == "generate"


def test_unknown_mode_and_non_positive_temperature_are_rejected(tok, model):
    with pytest.raises(ValueError):
        TransformersPolicy(model, tok, mode="fast")
    with pytest.raises(ValueError):
        TransformersPolicy(model, tok, temperature=0.0)


def test_a_zero_response_budget_is_rejected_when_the_policy_is_made(tok, model):
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        TransformersPolicy(model, tok, max_new_tokens=0)


def test_a_zero_batch_size_is_rejected_not_taken_for_all_at_once(tok, model):
    with pytest.raises(ValueError, match="batch_size must be >= 1 or None"):
        TransformersPolicy(model, tok, batch_size=0)


@pytest.mark.parametrize("mode", ["generate", "static"])
def test_sampling_logprobs_equal_teacher_forced_logprobs_of_the_tempered_nucleus(tok, model, mode):
    # Three prompts of different lengths share one left-padded batch; the reference runs each unpadded.
    policy = TransformersPolicy(model, tok, max_new_tokens=12, temperature=0.7, top_p=0.9, mode=mode, stop_token_ids=())
    torch.manual_seed(1)
    gens = policy.generate(CONVERSATIONS)
    assert len(gens) == 3
    for g in gens:
        assert len(g.token_ids) == 12 and g.truncated
        ref = reference_logprobs(model, g, temperature=0.7, top_p=0.9)
        torch.testing.assert_close(torch.tensor(g.logprobs), ref, atol=1e-4, rtol=1e-4)


# --- responses handed over as they finish (on_done) ---------------------------------------------------------

EVERY_TENTH = range(0, 2000, 10)  # stop ids: about one draw in ten ends a response of the random tiny model


def _handed_over(tok, model, mode, stop_token_ids=EVERY_TENTH, max_new_tokens=64, seed=0):
    """Six responses of the tiny model with ``on_done``: the returned generations, and each handed-over one with how
    many forward passes the model had made by then."""
    policy = TransformersPolicy(model, tok, max_new_tokens=max_new_tokens, mode=mode, stop_token_ids=stop_token_ids)
    passes, told = [], {}
    hook = model.register_forward_pre_hook(lambda module, args: passes.append(1))
    try:
        torch.manual_seed(seed)
        gens = policy.generate(CONVERSATIONS * 2, on_done=lambda i, g: told.setdefault(i, (g, len(passes))))
    finally:
        hook.remove()
    return gens, told, len(passes)


@pytest.mark.parametrize("mode", ["generate", "static"])
def test_a_response_handed_over_is_the_one_the_call_returns(tok, model, mode):
    gens, told, _ = _handed_over(tok, model, mode)
    assert told and all(told[i][0] == gens[i] for i in told)  # the same ids, log-probs, text and flags


@pytest.mark.parametrize("mode", ["generate", "static"])
def test_every_response_that_stopped_a_read_before_the_longest_is_handed_over(tok, model, mode):
    # the device is read every 8 steps (generate) or 16 (static): a response that stopped 16 or more tokens before
    # the longest one ended was read as stopped before the call returned
    gens, told, _ = _handed_over(tok, model, mode)
    longest = max(len(g.token_ids) for g in gens)
    early = {i for i, g in enumerate(gens) if not g.truncated and len(g.token_ids) <= longest - 16}
    assert early and early <= set(told)


@pytest.mark.parametrize("mode", ["generate", "static"])
def test_a_short_response_is_handed_over_while_a_longer_one_is_still_sampled(tok, model, mode):
    gens, told, passes = _handed_over(tok, model, mode)
    assert max(len(g.token_ids) for g in gens) > 16  # (seed 0: the call goes on past the first read of the device)
    shortest = min(told, key=lambda i: len(gens[i].token_ids))
    assert told[shortest][1] < passes  # told before the model's last forward pass of the call


@pytest.mark.parametrize("mode", ["generate", "static"])
def test_a_response_cut_at_the_token_limit_is_not_handed_over_beside_ones_that_stopped(tok, model, mode):
    # stop ids one in fifty: in 40 tokens some responses stop and others run to the limit
    gens, told, _ = _handed_over(tok, model, mode, stop_token_ids=range(0, 2000, 50), max_new_tokens=40)
    cut = {i for i, g in enumerate(gens) if g.truncated}
    assert cut and told  # (seed 0: both kinds in the batch)
    assert not cut & set(told)


@pytest.mark.parametrize("mode", ["generate", "static"])
def test_with_the_call_split_into_batches_each_batch_is_handed_over_when_it_ends(tok, model, mode):
    # 6 prompts, batch_size 2: three batches; the first two are told in full (cut or not) before the call returns
    policy = TransformersPolicy(model, tok, max_new_tokens=24, mode=mode, batch_size=2,
                                stop_token_ids=range(0, 2000, 50))
    told, passes = {}, []
    hook = model.register_forward_pre_hook(lambda module, args: passes.append(1))
    try:
        torch.manual_seed(0)
        gens = policy.generate(CONVERSATIONS * 2, on_done=lambda i, g: told.setdefault(i, (g, len(passes))))
    finally:
        hook.remove()
    assert {0, 1, 2, 3} <= set(told) and all(told[i][1] < len(passes) for i in (0, 1, 2, 3))
    assert all(told[i][0] == gens[i] for i in told)  # each at its own index (the batch's offset)


@pytest.mark.parametrize("mode", ["generate", "static"])
def test_between_steps_is_called_after_every_decoding_step_while_the_longest_response_goes_on(tok, model, mode):
    # at every step the policy may step aside for a timing, not only where it reads the device (every 8 steps with
    # generate, 16 with static)
    policy = TransformersPolicy(model, tok, max_new_tokens=64, mode=mode, stop_token_ids=EVERY_TENTH)
    passes, calls = [], []
    hook = model.register_forward_pre_hook(lambda module, args: passes.append(1))
    try:
        torch.manual_seed(0)
        gens = policy.generate(CONVERSATIONS * 2, on_done=lambda i, g: None,
                               between_steps=lambda sync: calls.append((len(passes), sync())))
    finally:
        hook.remove()
    longest, every = max(len(g.token_ids) for g in gens), 8 if mode == "generate" else 16
    counts = [n for n, _ in calls]  # forward passes made at each call
    # one call a step until the longest response stopped (its last step at most without one), reads among them
    assert longest > every and len(calls) >= longest - 2
    assert all(b - a == 1 for a, b in zip(counts, counts[1:])) and counts[0] < len(passes)


def test_a_timing_waiting_on_the_device_gate_runs_inside_a_generate_call_that_steps_aside(tok, model):
    from kevin.sandbox.sandbox import DeviceGate, DevicesInUse

    gate, passes, timed_at = DeviceGate(policy_patience_s=30.0, step_aside_after_s=0.0), [], []

    def timing():
        with gate.exclusive():
            timed_at.append(len(passes))  # forward passes the call had made when the timing ran

    policy = TransformersPolicy(model, tok, max_new_tokens=64, mode="generate", stop_token_ids=EVERY_TENTH)
    hook = model.register_forward_pre_hook(lambda module, args: passes.append(1))
    try:
        with gate.in_use():
            held, waiting = DevicesInUse([gate]), threading.Thread(target=timing, daemon=True)
            waiting.start()
            deadline = time.monotonic() + 10
            while not gate._waiting:
                assert time.monotonic() < deadline, "the timing never queued"
                time.sleep(0.01)
            torch.manual_seed(0)
            policy.generate(CONVERSATIONS * 2, on_done=lambda i, g: None, between_steps=held.step_aside)
    finally:
        hook.remove()
    waiting.join(5)
    assert timed_at and 0 < timed_at[0] < len(passes) and held.aside_s > 0  # mid-call, then the call went on


def test_prompt_ids_are_the_chat_template_with_the_generation_prompt(tok, model):
    policy = TransformersPolicy(model, tok, max_new_tokens=2)
    g = policy.generate(CONVERSATIONS[:1])[0]
    assert tok.decode(list(g.prompt_ids)) == (
        "<|im_start|>user\nWrite a fused softmax kernel.<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )


def test_a_generation_knows_whether_its_prompt_opened_the_thought(tok, model):
    # the tiny chat template ends the generation prompt with "<think>\n" unless enable_thinking=False
    thinking = TransformersPolicy(model, tok, max_new_tokens=2).generate(CONVERSATIONS[:1])[0]
    plain = TransformersPolicy(model, tok, max_new_tokens=2, chat_template_kwargs={"enable_thinking": False})
    assert thinking.in_thought and not plain.generate(CONVERSATIONS[:1])[0].in_thought


def test_opens_thought_reads_the_end_of_the_rendered_prompt():
    assert opens_thought("<|im_start|>assistant\n<think>\n")
    assert not opens_thought("<|im_start|>assistant\n") and not opens_thought("<think>a</think>\n")


def test_a_response_that_emits_a_stop_token_ends_with_it_and_is_not_truncated(tok, model):
    # Every token is a stop token, so the first sampled token ends the response.
    policy = TransformersPolicy(model, tok, max_new_tokens=8, stop_token_ids=range(len(tok)))
    g = policy.generate(CONVERSATIONS[:1])[0]
    assert len(g.token_ids) == 1 and len(g.logprobs) == 1
    assert not g.truncated
    assert g.text == ""  # the stop token itself is not part of the text


def test_a_response_without_a_stop_token_is_truncated_at_max_new_tokens(tok, model):
    policy = TransformersPolicy(model, tok, max_new_tokens=5, stop_token_ids=())
    g = policy.generate(CONVERSATIONS[:1])[0]
    assert len(g.token_ids) == 5 and g.truncated


def test_text_is_the_decoded_token_ids(tok, model):
    policy = TransformersPolicy(model, tok, max_new_tokens=10, stop_token_ids=())
    g = policy.generate(CONVERSATIONS[:1])[0]
    assert g.text == tok.decode(list(g.token_ids), skip_special_tokens=True)


def test_the_models_own_generation_defaults_add_no_warper(tok):
    # A Qwen checkpoint ships top_k=20 and a repetition penalty; the policy must sample from the plain
    # tempered distribution anyway. With top_k=1 left active every logprob would be 0.
    model = build_tiny_model(tok, seed=3)
    model.generation_config.top_k = 1
    model.generation_config.repetition_penalty = 1.3
    policy = TransformersPolicy(model, tok, max_new_tokens=6, temperature=1.0, stop_token_ids=())
    g = policy.generate(CONVERSATIONS[:1])[0]
    torch.testing.assert_close(torch.tensor(g.logprobs), reference_logprobs(model, g, 1.0, 1.0), atol=1e-4, rtol=1e-4)


def test_batch_size_splits_the_work_and_keeps_the_order(tok, model):
    policy = TransformersPolicy(model, tok, max_new_tokens=3, batch_size=2, stop_token_ids=())
    gens = policy.generate(CONVERSATIONS)
    assert [g.prompt_ids for g in gens] == [tuple(policy.encode_conversation(c)) for c in CONVERSATIONS]


@pytest.mark.parametrize("mode", ["generate", "static"])
def test_a_peft_lora_model_generates_with_exact_logprobs(tok, mode):
    peft = pytest.importorskip("peft")
    base = build_tiny_model(tok, seed=4)
    lora = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    lora.eval()
    policy = TransformersPolicy(lora, tok, max_new_tokens=6, temperature=0.8, stop_token_ids=(), mode=mode)
    g = policy.generate(CONVERSATIONS[:2])[1]
    assert len(g.token_ids) == 6
    torch.testing.assert_close(torch.tensor(g.logprobs), reference_logprobs(lora, g, 0.8, 1.0), atol=1e-4, rtol=1e-4)


def test_a_model_in_training_mode_samples_without_dropout_and_is_put_back_in_training_mode(tok):
    peft = pytest.importorskip("peft")
    base = build_tiny_model(tok, seed=8)
    lora = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_dropout=0.9, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    lora.train()
    g = TransformersPolicy(lora, tok, max_new_tokens=5, temperature=1.0, stop_token_ids=()).generate(CONVERSATIONS[:1])[0]
    assert lora.training
    lora.eval()  # the reference: the same model without dropout
    torch.testing.assert_close(torch.tensor(g.logprobs), reference_logprobs(lora, g, 1.0, 1.0), atol=1e-4, rtol=1e-4)


def test_count_tokens_counts_tokenizer_ids(tok, model):
    policy = TransformersPolicy(model, tok)
    assert policy.count_tokens("__global__ void") == len(tok("__global__ void", add_special_tokens=False)["input_ids"])


# --- vLLM ---------------------------------------------------------------------------------------------


def test_vllm_policy_checks_its_sampling_settings_before_loading_anything(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ValueError, match="max_new_tokens >= 1"):
        VLLMPolicy("any/model", max_new_tokens=0)


def test_vllm_policy_without_vllm_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ImportError, match="pip install vllm"):
        VLLMPolicy("any/model")


# --- OpenAI-compatible endpoint -----------------------------------------------------------------------


class _Server:
    """A local chat-completions server; ``plan`` is a list of (status, body[, headers]) replies (a bytes body is sent
    as it is), then 200s forever."""

    def __init__(self, plan=(), finish_reason="stop", reasoning=None):
        self.plan = list(plan)
        self.requests = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers["Content-Length"])
                body = json.loads(self.rfile.read(n))
                outer.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                headers = {}
                if outer.plan:
                    status, payload, *more = outer.plan.pop(0)
                    headers = more[0] if more else {}
                else:
                    last = body["messages"][-1]["content"]
                    message = {"role": "assistant", "content": f"echo: {last}"}
                    if reasoning is not None:
                        message["reasoning_content"] = reasoning
                    status, payload = 200, {"choices": [{"message": message, "finish_reason": finish_reason}]}
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_openai_policy_returns_the_completion_text_in_order_without_token_ids():
    with _Server() as server:
        policy = OpenAIPolicy("m", base_url=server.base_url, api_key="k", max_tokens=7, concurrency=2)
        gens = policy.generate([[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]])
    assert [g.text for g in gens] == ["echo: a", "echo: b"]
    assert all(g.token_ids == () and g.prompt_ids == () and g.logprobs is None and not g.truncated for g in gens)
    req = server.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer k"
    assert req["body"]["model"] == "m" and req["body"]["max_tokens"] == 7


def test_openai_policy_keeps_the_replys_usage_token_counts():
    reply = {"choices": [{"message": {"content": "k"}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 120, "completion_tokens": 37, "total_tokens": 157}}
    with _Server(plan=[(200, reply)]) as server:
        g = OpenAIPolicy("m", base_url=server.base_url).generate([[{"role": "user", "content": "x"}]])[0]
    assert (g.reported_prompt_tokens, g.reported_generated_tokens) == (120, 37)


def test_openai_policy_ignores_absent_or_malformed_usage():
    bad = {"choices": [{"message": {"content": "k"}, "finish_reason": "stop"}],
           "usage": {"prompt_tokens": "many", "completion_tokens": -3}}
    with _Server(plan=[(200, bad)]) as server:  # then the default reply, which has no usage at all
        policy = OpenAIPolicy("m", base_url=server.base_url, concurrency=1)
        gens = policy.generate([[{"role": "user", "content": "x"}], [{"role": "user", "content": "y"}]])
    assert [(g.reported_prompt_tokens, g.reported_generated_tokens) for g in gens] == [(None, None), (None, None)]


def test_openai_policy_retries_a_server_error_then_succeeds():
    with _Server(plan=[(500, {"error": "boom"})]) as server:
        policy = OpenAIPolicy("m", base_url=server.base_url, backoff_s=0.01, max_retries=2)
        g = policy.generate([[{"role": "user", "content": "x"}]])[0]
    assert g.text == "echo: x"
    assert len(server.requests) == 2  # the 500, then the success


def test_openai_policy_retries_a_rate_limit():
    with _Server(plan=[(429, {"error": "slow down"})]) as server:
        g = OpenAIPolicy("m", base_url=server.base_url, backoff_s=0.01).generate([[{"role": "user", "content": "y"}]])[0]
    assert g.text == "echo: y" and len(server.requests) == 2


def test_openai_policy_raises_on_a_client_error_without_retrying():
    with _Server(plan=[(400, {"error": {"message": "bad model name"}})]) as server:
        policy = OpenAIPolicy("m", base_url=server.base_url, backoff_s=0.01, max_retries=3)
        with pytest.raises(OpenAIError, match="HTTP 400.*bad model name"):
            policy.generate([[{"role": "user", "content": "x"}]])
    assert len(server.requests) == 1


def test_openai_policy_gives_up_after_max_retries():
    with _Server(plan=[(503, {})] * 3) as server:
        policy = OpenAIPolicy("m", base_url=server.base_url, backoff_s=0.01, max_retries=2)
        with pytest.raises(OpenAIError, match="gave up after 3 attempts"):
            policy.generate([[{"role": "user", "content": "x"}]])
    assert len(server.requests) == 3


def test_openai_policy_marks_a_length_cut_reply_truncated_and_restores_reasoning():
    with _Server(finish_reason="length", reasoning="Okay, tile it.") as server:
        g = OpenAIPolicy("m", base_url=server.base_url).generate([[{"role": "user", "content": "z"}]])[0]
    assert g.truncated
    assert g.text == "<think>\nOkay, tile it.\n</think>\necho: z"


def test_openai_policy_sends_a_reasoning_model_max_completion_tokens_and_no_temperature():
    with _Server() as server:
        OpenAIPolicy("o4-mini", base_url=server.base_url, max_tokens=9).generate([[{"role": "user", "content": "a"}]])
    body = server.requests[0]["body"]
    assert body["max_completion_tokens"] == 9
    assert "max_tokens" not in body and "temperature" not in body and "top_p" not in body


def test_openai_policy_sends_other_models_max_tokens_and_the_temperature():
    with _Server() as server:
        OpenAIPolicy("gpt-4o", base_url=server.base_url, max_new_tokens=9, temperature=0.5, top_p=0.9).generate(
            [[{"role": "user", "content": "a"}]])
    body = server.requests[0]["body"]
    assert (body["max_tokens"], body["temperature"], body["top_p"]) == (9, 0.5, 0.9)
    assert "max_completion_tokens" not in body


def test_openai_policy_rejects_a_base_url_without_a_scheme():
    with pytest.raises(ValueError, match="http:// or https://"):
        OpenAIPolicy("m", base_url="localhost:8000/v1")


def test_openai_policy_retries_a_reply_that_is_not_json():
    with _Server(plan=[(200, b"<html>502 Bad Gateway</html>")]) as server:
        g = OpenAIPolicy("m", base_url=server.base_url, backoff_s=0.01).generate([[{"role": "user", "content": "x"}]])[0]
    assert g.text == "echo: x" and len(server.requests) == 2


def test_openai_policy_says_what_the_last_reply_was_when_it_never_is_json():
    with _Server(plan=[(200, b"<html>oops</html>")] * 2) as server:
        policy = OpenAIPolicy("m", base_url=server.base_url, backoff_s=0.01, max_retries=1)
        with pytest.raises(OpenAIError, match="not JSON.*oops"):
            policy.generate([[{"role": "user", "content": "x"}]])


def test_openai_policy_turns_a_prompt_longer_than_the_context_into_an_empty_truncated_response():
    too_long = (400, {"error": {"code": "context_length_exceeded", "message": "maximum context length is 8 tokens"}})
    with _Server(plan=[too_long]) as server:
        policy = OpenAIPolicy("m", base_url=server.base_url, concurrency=1)
        gens = policy.generate([[{"role": "user", "content": "long"}], [{"role": "user", "content": "b"}]])
    assert (gens[0].text, gens[0].truncated) == ("", True)  # that turn scores 0; its trajectory goes on
    assert gens[1].text == "echo: b"


def test_openai_policy_raises_when_every_prompt_is_longer_than_the_context():
    too_long = (400, {"error": {"code": "context_length_exceeded", "message": "maximum context length is 8 tokens"}})
    with _Server(plan=[too_long] * 2) as server:
        policy = OpenAIPolicy("m", base_url=server.base_url, concurrency=1)
        with pytest.raises(OpenAIError, match="every prompt of the batch"):
            policy.generate([[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]])


def test_openai_policy_waits_at_most_max_retry_after_s(monkeypatch):
    from kevin.core.policy import openai as policy_module

    waits = []
    monkeypatch.setattr(policy_module.time, "sleep", waits.append)
    with _Server(plan=[(429, {"error": "slow down"}, {"Retry-After": "86400"})]) as server:
        OpenAIPolicy("m", base_url=server.base_url).generate([[{"role": "user", "content": "x"}]])
    assert waits == [policy_module.MAX_RETRY_AFTER_S]


def test_openai_policy_times_out_and_retries_on_an_unreachable_server():
    # Port 9 on localhost refuses connections: a connection error, retried, then OpenAIError.
    policy = OpenAIPolicy("m", base_url="http://127.0.0.1:9/v1", backoff_s=0.0, max_retries=1, timeout_s=2)
    with pytest.raises(OpenAIError, match="gave up after 2 attempts"):
        policy.generate([[{"role": "user", "content": "x"}]])


def test_release_memory_frees_the_static_cache_and_the_next_call_still_samples(tok):
    model = build_tiny_model(tok, seed=11)
    policy = TransformersPolicy(model, tok, max_new_tokens=4, mode="static", stop_token_ids=())
    policy.generate(CONVERSATIONS[:2])
    # On the CPU only the cache (no compiled step, so no fused weights): 2 layers x (keys + values) x
    # [8 rows (2 rounded up), 2 KV heads, 1,024 slots (one bucket), 16] x 4 B = 4,194,304 B
    assert policy.release_memory() == 4_194_304 and "_kevin_static_cache" not in model.__dict__
    assert [len(g.token_ids) for g in policy.generate(CONVERSATIONS[:2])] == [4, 4]


def test_openai_policy_counts_about_four_characters_per_token():
    # ceil(9 / 4) = 3
    assert OpenAIPolicy("m", base_url="http://127.0.0.1:9/v1").count_tokens("123456789") == 3


def test_openai_api_key_defaults_to_the_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    assert OpenAIPolicy("m").api_key == "from-env"


# --- GPU ----------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("decode_attention", ["grouped", "grouped_sdpa", "triton"])
def test_auto_mode_on_cuda_samples_with_exact_logprobs(tok, decode_attention):
    model = build_tiny_model(tok, seed=5).to("cuda")
    policy = TransformersPolicy(model, tok, max_new_tokens=16, temperature=0.9, top_p=0.95, stop_token_ids=(),
                                decode_attention=decode_attention)
    assert policy.resolved_mode() != "generate"
    # the second call reuses the cache and the compiled graphs; the third has shorter prompts (the dynamic
    # prefill graph, the same cache)
    gens = [g for convs in (CONVERSATIONS, CONVERSATIONS, CONVERSATIONS[:1]) for g in policy.generate(convs)]
    for g in gens:
        assert len(g.token_ids) == 16 and g.truncated
        ref = reference_logprobs(model, g, 0.9, 0.95).cpu()
        torch.testing.assert_close(torch.tensor(g.logprobs), ref, atol=2e-3, rtol=2e-3)


@pytest.mark.gpu
def test_static_mode_on_cuda_samples_an_fp32_model_under_bf16_autocast_exactly(tok):
    # train_multiturn's full fine-tune: fp32 weights, bf16 mixed precision (the static cache once crashed on it)
    model = build_tiny_model(tok, seed=8).to("cuda")
    policy = TransformersPolicy(model, tok, max_new_tokens=8, temperature=0.9, mode="static", stop_token_ids=())
    with torch.autocast("cuda", dtype=torch.bfloat16):
        gens = policy.generate(CONVERSATIONS)
    for g in gens:  # sampled in fp32: the log-probs are those of an fp32 teacher-forced pass
        assert len(g.token_ids) == 8
        torch.testing.assert_close(torch.tensor(g.logprobs), reference_logprobs(model, g, 0.9, 1.0).cpu(),
                                   atol=2e-3, rtol=2e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["generate", "static", "continuous"])
def test_every_mode_on_cuda_returns_one_generation_per_prompt_with_logprobs(tok, mode):
    model = build_tiny_model(tok, seed=6).to("cuda")
    policy = TransformersPolicy(model, tok, max_new_tokens=8, mode=mode, stop_token_ids=())
    gens = policy.generate(CONVERSATIONS)
    assert [g.prompt_ids for g in gens] == [tuple(policy.encode_conversation(c)) for c in CONVERSATIONS]
    assert all(len(g.token_ids) == 8 and len(g.logprobs) == 8 for g in gens)
    assert all(math.isfinite(x) and x <= 0 for g in gens for x in g.logprobs)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["generate", "static"])
def test_on_cuda_a_response_handed_over_early_is_the_one_the_call_returns(tok, mode):
    # static: the compiled decoding step and its CUDA graphs, read between replays
    model = build_tiny_model(tok, seed=6).to("cuda")
    policy = TransformersPolicy(model, tok, max_new_tokens=64, mode=mode, stop_token_ids=EVERY_TENTH)
    told = {}
    torch.manual_seed(0)
    gens = policy.generate(CONVERSATIONS * 3, on_done=lambda i, g: told.setdefault(i, g))
    assert told and all(told[i] == gens[i] for i in told)


# --- decode attention (kevin.core.policy.engine.attention) ----------------------------------------------------------


class _Module:
    num_key_value_groups = 3


def _decode_case(mask_kind):
    g = torch.Generator().manual_seed(0)
    b, h, hkv, s, d = 2, 6, 2, 7, 8
    q, k, v = torch.randn(b, h, 1, d, generator=g), torch.randn(b, hkv, s, d, generator=g), torch.randn(b, hkv, s, d, generator=g)
    keep = torch.ones(b, 1, 1, s, dtype=torch.bool)
    keep[0, :, :, :3] = False  # row 0: three left-padding positions
    mask = {"bool": keep, "float": torch.zeros(b, 1, 1, s).masked_fill(~keep, float("-inf")), "none": None}[mask_kind]
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1), attn_mask=mask, scale=0.3
    ).transpose(1, 2)  # transformers' sdpa path: K and V copied once per query head
    return q, k, v, mask, ref


@pytest.mark.parametrize("implementation", ["grouped", "grouped_sdpa", "triton"])
@pytest.mark.parametrize("mask_kind", ["bool", "float", "none"])
def test_decode_attention_equals_sdpa_over_repeated_kv_heads(implementation, mask_kind):
    from kevin.core.policy.engine import attention

    q, k, v, mask, ref = _decode_case(mask_kind)
    fn = {"grouped": attention.grouped_attention, "grouped_sdpa": attention.grouped_sdpa_attention,
          "triton": attention.triton_attention}[implementation]  # triton on CPU falls back to grouped
    out, _ = fn(_Module(), q, k, v, mask, scaling=0.3)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_prefill_attention_drops_cache_slots_no_query_may_attend():
    from kevin.core.policy.engine.attention import prefill_attention

    g = torch.Generator().manual_seed(1)
    b, h, hkv, q_len, s, d = 2, 6, 2, 4, 9, 8  # a static cache of 9 slots, a prefill of 4 tokens
    q = torch.randn(b, h, q_len, d, generator=g)
    k, v = torch.randn(b, hkv, s, d, generator=g), torch.randn(b, hkv, s, d, generator=g)
    keep = torch.ones(b, 1, q_len, s, dtype=torch.bool).tril()  # causal; slots 4..8 are future (all False)
    keep[1, :, :, :2] = False  # row 1: two left-padding tokens
    keep[1, :, :2, :2] = torch.eye(2, dtype=torch.bool)  # padding queries attend to themselves (never NaN)
    k[:, :, q_len:] = float("nan")  # an unwritten cache tail: any read of it would poison the output
    out, _ = prefill_attention(_Module(), q, k, v, keep, scaling=0.3)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k[:, :, :q_len].repeat_interleave(3, 1), v[:, :, :q_len].repeat_interleave(3, 1),
        attn_mask=keep[..., :q_len], scale=0.3).transpose(1, 2)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_unknown_decode_attention_is_rejected(tok, model):
    with pytest.raises(ValueError, match="decode_attention"):
        TransformersPolicy(model, tok, decode_attention="fast")


@pytest.mark.gpu
def test_release_memory_on_cuda_gives_the_memory_back_and_the_next_call_samples_the_new_weights_exactly(tok):
    model = build_tiny_model(tok, seed=9).to("cuda")
    policy = TransformersPolicy(model, tok, max_new_tokens=16, temperature=0.9, mode="static", stop_token_ids=())
    policy.generate(CONVERSATIONS)
    before = torch.cuda.memory_allocated()
    freed = policy.release_memory()
    assert freed > 0 and before - torch.cuda.memory_allocated() >= freed  # nothing else held the cache or weights
    # The freed blocks filled with NaN and the weights moved: CUDA graphs still reading the old addresses would
    # sample from NaN logits (an error) or from the old weights (other log-probs).
    junk = torch.full((freed // 4 + 4096,), float("nan"), device="cuda")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.add_(0.05)
            layer.mlp.up_proj.weight.mul_(1.5)
    gens = policy.generate(CONVERSATIONS)
    del junk
    for g in gens:
        assert len(g.token_ids) == 16
        torch.testing.assert_close(torch.tensor(g.logprobs), reference_logprobs(model, g, 0.9, 1.0).cpu(),
                                   atol=2e-3, rtol=2e-3)


@pytest.mark.gpu
def test_a_longer_cache_on_cuda_lets_the_shorter_one_go(tok):
    import gc
    import weakref

    model = build_tiny_model(tok, seed=10).to("cuda")
    policy = TransformersPolicy(model, tok, max_new_tokens=8, mode="static", stop_token_ids=(), cache_bucket=64)
    policy.generate(CONVERSATIONS[:1])
    old = weakref.ref(model.__dict__["_kevin_static_cache"][1].layers[0].keys)
    policy.generate([[{"role": "user", "content": "longer " * 40}]])  # a prompt past the first 64-slot bucket
    gc.collect()
    assert old() is None  # the compiled graphs did not keep the first cache alive


@pytest.mark.gpu
@pytest.mark.parametrize("live", ["none", "written", "beyond"])
@pytest.mark.parametrize("s, pad", [(3072, 1000), (200, 0)])
def test_triton_decode_matches_grouped_attention_on_cuda(s, pad, live):
    from kevin.core.policy.engine import attention

    assert attention.load_triton_kernels()
    g = torch.Generator(device="cuda").manual_seed(0)
    b, h, hkv, d = 8, 28, 4, 128
    n = s - s // 3  # written slots (200 -> 134, not a multiple of the block)
    q = torch.randn(b, h, 1, d, generator=g, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, hkv, s, d, generator=g, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, hkv, s, d, generator=g, device="cuda", dtype=torch.bfloat16)
    k[..., n:, :], v[..., n:, :] = float("nan"), float("nan")  # never read, or the output is NaN
    keep = torch.ones(b, 1, 1, s, dtype=torch.bool, device="cuda")
    keep[0, ..., :pad] = False  # left padding of row 0
    extra = {}
    if live == "written":  # only the live bound keeps the unwritten slots out (the mask keeps them)
        extra[attention.LIVE_SLOTS] = torch.tensor([n], dtype=torch.int32, device="cuda")
    else:  # the mask hides the unwritten slots; "beyond": a bound past the cache is clamped to it
        keep[..., n:] = False
        if live == "beyond":
            extra[attention.LIVE_SLOTS] = torch.tensor([s + 7], dtype=torch.int32, device="cuda")
    module = type("M", (), {"num_key_value_groups": h // hkv})()
    out, _ = attention.triton_attention(module, q, k, v, keep, scaling=d**-0.5, **extra)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k[..., :n, :].float().repeat_interleave(h // hkv, 1),
        v[..., :n, :].float().repeat_interleave(h // hkv, 1), attn_mask=keep[..., :n],
        scale=d**-0.5).transpose(1, 2)
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)  # bf16 probabilities and output


def test_static_mode_restores_the_models_attention_implementation(tok):
    model = build_tiny_model(tok, seed=7)
    before = model.config._attn_implementation
    TransformersPolicy(model, tok, max_new_tokens=3, mode="static").generate(CONVERSATIONS[:1])
    assert model.config._attn_implementation == before


def test_generate_mode_on_the_cpu_decodes_a_grouped_query_model_with_decode_attention(tok, model, monkeypatch):
    # the tiny model has 4 query heads over 2 KV heads: transformers' sdpa with a padding mask would copy K and V
    from kevin.core.policy.engine import attention

    decoding_steps = []
    grouped = attention._FUNCTIONS["grouped"]

    def spy(module, query, *args, **kwargs):
        decoding_steps.append(query.shape[2] == 1)
        return grouped(module, query, *args, **kwargs)

    monkeypatch.setitem(attention._FUNCTIONS, "grouped", spy)
    TransformersPolicy(model, tok, max_new_tokens=4, mode="generate", decode_attention="grouped",
                       stop_token_ids=()).generate(CONVERSATIONS)
    # 2 layers x (1 prefill + 3 decoding forwards): the prefill goes through too, and falls back to sdpa inside
    assert decoding_steps.count(True) == 6 and decoding_steps.count(False) == 2


def test_generate_mode_samples_the_same_tokens_with_decode_attention_as_with_transformers_sdpa(tok, model):
    runs = []
    for decode_attention in ("grouped", None):
        torch.manual_seed(3)
        runs.append(TransformersPolicy(model, tok, max_new_tokens=16, temperature=0.9, mode="generate",
                                       decode_attention=decode_attention, stop_token_ids=()).generate(CONVERSATIONS))
    assert [g.token_ids for g in runs[0]] == [g.token_ids for g in runs[1]]
    for ours, theirs in zip(*runs):
        torch.testing.assert_close(torch.tensor(ours.logprobs), torch.tensor(theirs.logprobs), atol=1e-5, rtol=0)


def test_generate_mode_restores_the_models_attention_implementation(tok, model):
    before = model.config._attn_implementation
    TransformersPolicy(model, tok, max_new_tokens=3, mode="generate").generate(CONVERSATIONS[:1])
    assert before == "sdpa" and model.config._attn_implementation == before


def test_static_mode_reuses_a_kv_cache_length_that_only_grows(tok, model):
    policy = TransformersPolicy(model, tok, max_new_tokens=4, mode="static", cache_bucket=64, stop_token_ids=())
    policy.generate(CONVERSATIONS[2:])  # longest prompt first
    first = policy._cache_len
    policy.generate(CONVERSATIONS[:1])  # a shorter prompt keeps the longer cache
    assert policy._cache_len == first and first % 64 == 0


def test_static_mode_pads_the_batch_to_a_multiple_of_8_and_waits_only_for_the_real_rows(tok, model, monkeypatch):
    from kevin.core.policy.engine import decoding

    seen = {}
    real = decoding.sample_static

    def spy(model, input_ids, attention_mask, **kwargs):
        seen.update(rows=input_ids.shape[0], wait_rows=kwargs.get("wait_rows"))
        return real(model, input_ids, attention_mask, **kwargs)

    monkeypatch.setattr(decoding, "sample_static", spy)
    gens = TransformersPolicy(model, tok, max_new_tokens=3, mode="static").generate(CONVERSATIONS)
    assert len(gens) == 3
    assert seen == {"rows": 8, "wait_rows": 3}  # 3 prompts -> 8 rows, 5 of them padding


def test_static_mode_pads_the_last_chunk_to_the_rows_of_the_others(tok, model, monkeypatch):
    # batch_size 9: 12 prompts are chunks of 9 and 3; both run as 16 rows (9 -> 16), so the cache keeps one shape
    from kevin.core.policy.engine import decoding

    seen = []
    real = decoding.sample_static

    def spy(model, input_ids, attention_mask, **kwargs):
        seen.append((input_ids.shape[0], kwargs.get("wait_rows")))
        return real(model, input_ids, attention_mask, **kwargs)

    monkeypatch.setattr(decoding, "sample_static", spy)
    gens = TransformersPolicy(model, tok, max_new_tokens=2, mode="static", batch_size=9).generate(CONVERSATIONS * 4)
    assert len(gens) == 12
    assert seen == [(16, 9), (16, 3)]


def test_static_mode_samples_a_flex_attention_model_with_exact_logprobs(tok):
    # transformers' flex attention over a static cache attends the unwritten tail: log-probs off by ~0.1 on the
    # CPU; the static loop therefore runs such a model with sdpa (or our decode attention)
    model = build_tiny_model(tok, seed=5).eval()
    try:
        model.set_attn_implementation("flex_attention")
    except Exception as exc:  # noqa: BLE001 - an environment without flex attention
        pytest.skip(f"flex_attention unavailable: {exc}")
    gens = TransformersPolicy(model, tok, max_new_tokens=6, temperature=0.9, mode="static",
                              stop_token_ids=()).generate(CONVERSATIONS)
    assert model.config._attn_implementation == "flex_attention"  # restored
    model.set_attn_implementation("sdpa")
    for g in gens:
        torch.testing.assert_close(torch.tensor(g.logprobs), reference_logprobs(model, g, 0.9, 1.0), atol=1e-4, rtol=0)


# --- memory-bounded generation --------------------------------------------------------------------------


def test_kv_bytes_per_token_of_a_7b_qwen2_in_bf16():
    from transformers import Qwen2Config

    from kevin.core.policy.base import kv_bytes_per_token

    # 28 layers, 4 KV heads, head dim 3584 / 28 = 128, 2 bytes: 2 x 28 x 4 x 128 x 2 = 57,344
    config = Qwen2Config(hidden_size=3584, num_attention_heads=28, num_key_value_heads=4, num_hidden_layers=28)
    assert kv_bytes_per_token(config, 2) == 57_344


def test_a_cache_budget_generates_in_waves_that_fit_it(tok, model, monkeypatch):
    # the tiny model: 2 x 2 layers x 2 KV heads x head dim 16 x 4 bytes = 512 bytes per token; a budget of two
    # rows of (longest prompt + 3 new tokens) holds 2 rows, so 3 conversations take waves of 2 and 1
    policy = TransformersPolicy(model, tok, max_new_tokens=3, stop_token_ids=(), mode="generate")
    longest = max(len(policy.encode_conversation(c)) for c in CONVERSATIONS)
    policy.cache_budget_bytes = 2 * (longest + 3) * 512
    waves = []
    real = policy._generate
    monkeypatch.setattr(policy, "_generate", lambda chunk, **kw: waves.append(len(chunk)) or real(chunk, **kw))
    gens = policy.generate(CONVERSATIONS)
    assert waves == [2, 1]
    assert [g.prompt_ids for g in gens] == [tuple(policy.encode_conversation(c)) for c in CONVERSATIONS]


def test_a_cache_budget_that_holds_no_row_is_an_error_that_says_so(tok, model):
    policy = TransformersPolicy(model, tok, max_new_tokens=3, cache_budget_bytes=512, mode="generate")
    with pytest.raises(ValueError, match="holds no batch of 1 row"):  # one token's cache, rows of more
        policy.generate(CONVERSATIONS[:1])


def test_a_non_positive_cache_budget_is_rejected_when_the_policy_is_made(tok, model):
    with pytest.raises(ValueError, match="cache_budget_bytes"):
        TransformersPolicy(model, tok, cache_budget_bytes=0)


def test_a_memory_fraction_puts_no_bound_on_the_cpu(tok, model):
    # the CPU has no allocator to ask for free memory: every row in one call
    policy = TransformersPolicy(model, tok, max_new_tokens=3, memory_fraction=0.5, mode="generate")
    assert policy.rows_per_wave([[1, 2]] * 5, "generate") == 5


def test_by_default_each_call_is_bounded_by_nine_tenths_of_the_memory_still_free(tok, model, monkeypatch):
    # free memory as the GPU would report it: 0.9 x 10,000 bytes = 9,000 bytes, at 512 bytes per token (the tiny
    # model) and 3 tokens a row (2 of prompt, 1 new): 9,000 // (3 * 512) = 5 of the 8 rows per wave
    from kevin.core.policy import hf

    asked = []
    monkeypatch.setattr(hf, "cache_budget_from_free_memory", lambda device, fraction: asked.append(fraction) or
                        int(fraction * 10_000))
    policy = TransformersPolicy(model, tok, max_new_tokens=1, mode="generate")
    assert policy.rows_per_wave([[1, 2]] * 8, "generate") == 5 and asked == [0.9]


def test_a_static_call_counts_the_static_cache_the_last_one_left_as_free(tok, model, monkeypatch):
    # static rows of 1,024 slots (the cache bucket) x 512 bytes = 524,288 bytes, in batches of 8. Free: 4,000,000
    # bytes, 0.9 x 4,000,000 = 3,600,000 hold 6 rows, no batch of 8. The last call's cache of 8 rows (4,194,304 bytes)
    # is this call's to reuse or free: 0.9 x 8,194,304 = 7,374,873 bytes hold 14 rows, so waves of 8
    from kevin.core.policy import hf
    from kevin.core.policy.engine.decoding import held_cache_bytes, model_static_cache

    monkeypatch.setattr(hf, "cache_budget_from_free_memory", lambda device, fraction: int(fraction * 4_000_000))
    model.__dict__.pop("_kevin_static_cache", None)  # (what an earlier test's call may have left on the shared model)
    policy = TransformersPolicy(model, tok, max_new_tokens=1, mode="static")
    with pytest.raises(ValueError, match="holds no batch of 8"):
        policy.rows_per_wave([[1, 2]] * 16, "static")
    model_static_cache(model, batch=8, length=1024)  # 2 layers x K and V x 2 KV heads x 16 dims x 8 x 1,024 x 4 bytes
    try:
        assert held_cache_bytes(model) == 4_194_304
        assert policy.rows_per_wave([[1, 2]] * 16, "static") == 8
    finally:
        model.__dict__.pop("_kevin_static_cache", None)


def test_a_generate_call_does_not_count_a_static_cache_it_would_not_free(tok, model, monkeypatch):
    # mode "generate" leaves a held static cache where it is: 3 tokens x 512 bytes a row, 0.9 x 4,000,000 // 1,536 =
    # 2,343 rows, not the 4,800 that counting the 4,194,304 held bytes would give
    from kevin.core.policy import hf
    from kevin.core.policy.engine.decoding import model_static_cache

    monkeypatch.setattr(hf, "cache_budget_from_free_memory", lambda device, fraction: int(fraction * 4_000_000))
    policy = TransformersPolicy(model, tok, max_new_tokens=1, mode="generate")
    model_static_cache(model, batch=8, length=1024)
    try:
        assert policy.rows_per_wave([[1, 2]] * 5000, "generate") == 2343
    finally:
        model.__dict__.pop("_kevin_static_cache", None)


def test_a_memory_fraction_outside_zero_to_one_is_rejected(tok, model):
    with pytest.raises(ValueError, match="memory_fraction"):
        TransformersPolicy(model, tok, memory_fraction=1.5)


@pytest.mark.gpu
def test_a_cache_budget_on_the_gpu_gives_static_waves_of_eight_rows(tok, monkeypatch):
    # 512 bytes per token (fp32 tiny model); the static cache is 1024 slots (one bucket): 8 rows take
    # 8 x 1024 x 512 = 4 MiB; a budget of 12 rows' worth still gives waves of 8 (a multiple of 8): 10 -> 8 + 2
    model = build_tiny_model(tok, seed=5).to("cuda")
    policy = TransformersPolicy(model, tok, max_new_tokens=4, stop_token_ids=(), mode="static",
                                cache_budget_bytes=12 * 1024 * 512)
    waves = []
    real = policy._generate
    monkeypatch.setattr(policy, "_generate", lambda chunk, **kw: waves.append(len(chunk)) or real(chunk, **kw))
    convs = (CONVERSATIONS * 4)[:10]
    gens = policy.generate(convs)
    assert waves == [8, 2]
    assert [g.prompt_ids for g in gens] == [tuple(policy.encode_conversation(c)) for c in convs]
