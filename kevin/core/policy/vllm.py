"""`VLLMPolicy`: vLLM as a `Policy` (optional dependency)."""

from __future__ import annotations

from typing import Any, Sequence

from kevin.core.policy.base import _THINK_TAIL, Generation, opens_thought


class VLLMPolicy:
    """vLLM as a :class:`Policy` (optional dependency: ``pip install vllm``).

    ``model`` is a model name or path; ``llm_kwargs`` go to ``vllm.LLM``. Log-probs are requested for the
    sampled token only (``SamplingParams(logprobs=0)``); pass ``logprobs_mode="processed_logprobs"`` in
    ``llm_kwargs`` (vLLM >= 0.10) to get them after temperature / top-p, as :class:`TransformersPolicy` does.
    Not exercised by the test-suite beyond the missing-import error.
    """

    def __init__(
        self,
        model: str,
        *,
        max_new_tokens: int = 4096,
        temperature: float = 0.9,
        top_p: float = 1.0,
        chat_template_kwargs: dict[str, Any] | None = None,
        **llm_kwargs: Any,
    ) -> None:
        if temperature <= 0 or not 0 < top_p <= 1 or int(max_new_tokens) < 1:
            raise ValueError(f"need temperature > 0, top_p in (0, 1] and max_new_tokens >= 1, got {temperature}, "
                             f"{top_p}, {max_new_tokens}")
        try:
            import vllm
        except ImportError as e:
            raise ImportError("VLLMPolicy needs vLLM, which is not installed: pip install vllm") from e
        self._vllm = vllm
        self.llm = vllm.LLM(model=model, **llm_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.chat_template_kwargs = dict(chat_template_kwargs or {})

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, conversations: Sequence[list[dict]]) -> list[Generation]:  # pragma: no cover - needs vllm
        prompts = []
        for m in conversations:
            text = self.tokenizer.apply_chat_template(
                m, tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs
            )
            prompts.append(list(self.tokenizer(text, add_special_tokens=False)["input_ids"]))
        params = self._vllm.SamplingParams(
            temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_new_tokens, logprobs=0
        )
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        gens = []
        for p, o in zip(prompts, outs):
            c = o.outputs[0]
            ids = tuple(int(t) for t in c.token_ids)
            lps = None
            if c.logprobs is not None:
                lps = tuple(float(step[t].logprob) for step, t in zip(c.logprobs, ids))
            gens.append(Generation(tuple(p), ids, lps, c.text, truncated=c.finish_reason == "length",
                                   in_thought=opens_thought(self.tokenizer.decode(p[-_THINK_TAIL:]))))
        return gens


