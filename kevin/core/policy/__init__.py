"""Policies: what turns a batch of chat conversations into sampled responses, behind one protocol.

``Policy.generate(conversations) -> list[Generation]`` takes chat messages (``[{"role", "content"}]``, one
list per conversation) and returns one :class:`Generation` per conversation, in order. A rollout calls it
once per turn with every live conversation (B tasks x G trajectories), so backends batch internally.

One file per backend:

- ``base``: the protocol, :class:`Generation` and the helpers the backends share (their conventions for
  token ids, stop tokens and log-probs are in its docstring);
- ``hf``: :class:`TransformersPolicy`, a ``transformers`` causal LM (optionally ``peft``-wrapped);
- ``vllm``: :class:`VLLMPolicy`, vLLM when installed;
- ``openai``: :class:`OpenAIPolicy`, any OpenAI-compatible endpoint (no token ids, no log-probs);
- ``models``: building and loading the models and tokenizers the recipes name;
- ``tiny``: a tiny random Qwen2 with a locally trained tokenizer, for CPU runs;
- ``engine/``: the fast static-cache decoding path that only ``hf`` imports (sampling loop, decode
  attention with a Triton flash-decoding kernel on CUDA, fused projections).

``transformers`` (and ``tokenizers``, ``triton``) are imported lazily, so the pure core never imports them.

>>> cut_at_stop([5, 6, 2, 0, 0], [-.1, -.2, -.3, 0., 0.], frozenset({2}))
((5, 6, 2), (-0.1, -0.2, -0.3), True)
"""

from kevin.core.policy.base import Generation, Policy, cut_at_stop, left_pad, opens_thought, round_up
from kevin.core.policy.hf import MODES, TransformersPolicy
from kevin.core.policy.openai import OpenAIError, OpenAIPolicy
from kevin.core.policy.vllm import VLLMPolicy

__all__ = [
    "MODES", "Generation", "OpenAIError", "OpenAIPolicy", "Policy", "TransformersPolicy", "VLLMPolicy",
    "cut_at_stop", "left_pad", "opens_thought", "round_up",
]
