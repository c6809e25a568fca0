"""A tiny policy for CPU runs and tests: a locally trained byte-level BPE tokenizer and a small random Qwen2.

Nothing is downloaded. ``build_tiny_tokenizer()`` trains a byte-level BPE (vocabulary about 1k) with the
``tokenizers`` library on a small built-in corpus of Python, C++ and CUDA snippets and prompt words (about
0.1 s), and wraps it in ``transformers.PreTrainedTokenizerFast`` with Qwen-style chat markers and a chat
template. ``build_tiny_model(tokenizer)`` builds a randomly initialised 2-layer Qwen2 (hidden 64, 4 heads)
from a config. ``tiny_policy()`` puts both behind :class:`kevin.core.policy.TransformersPolicy`.

The chat template follows QwQ / Qwen: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message; the
generation prompt is ``<|im_start|>assistant\\n<think>\\n`` (thinking on, as QwQ-32B, the paper's base
model), or ``<|im_start|>assistant\\n`` when ``apply_chat_template(..., enable_thinking=False)``. So a
generated response starts inside the thought and contains ``</think>`` itself; the response parser must
accept a response without the opening ``<think>``.

A random model samples nearly uniformly over the vocabulary: its responses are junk that fails to parse,
which is exactly what pipeline tests of a rollout need (every turn still produces a full record).

>>> tok = build_tiny_tokenizer()
>>> tok.eos_token, tok.pad_token
('<|im_end|>', '<|endoftext|>')
"""

from __future__ import annotations

import functools
from typing import Any

EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
SPECIAL_TOKENS = (PAD_TOKEN, "<|im_start|>", EOS_TOKEN)
THINK_TOKENS = ("<think>", "</think>")

TINY_VOCAB_SIZE = 1024

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is not defined or enable_thinking %}{{ '<think>\\n' }}{% endif %}"
    "{% endif %}"
)

# A small corpus: the words and symbols that prompts and kernels are made of. Each snippet is repeated
# by the trainer's frequency counts; it only has to make the BPE merges plausible, not good.
_CORPUS = (
    '''import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline


class Model(nn.Module):
    """Simple model that performs a matrix multiplication followed by a ReLU."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.matmul(a, b))


batch_size = 16
dim = 4096


def get_inputs():
    a = torch.randn(batch_size, dim)
    b = torch.randn(dim, dim)
    return [a, b]


def get_init_inputs():
    return []
''',
    '''elementwise_add_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void elementwise_add_kernel(const float* a, const float* b, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = a[idx] + b[idx];
    }
}

torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b) {
    auto size = a.numel();
    auto out = torch::zeros_like(a);
    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;
    elementwise_add_kernel<<<num_blocks, block_size>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), size);
    return out;
}
"""

elementwise_add_cpp_source = "torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b);"

elementwise_add = load_inline(
    name="elementwise_add",
    cpp_sources=elementwise_add_cpp_source,
    cuda_sources=elementwise_add_source,
    functions=["elementwise_add_cuda"],
    verbose=False,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.elementwise_add = elementwise_add

    def forward(self, a, b):
        return self.elementwise_add.elementwise_add_cuda(a, b)
''',
    '''#include <torch/extension.h>
#include <vector>
#include <cmath>

torch::Tensor relu_cpu(torch::Tensor x) {
    auto out = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t n = x.numel();
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {
        o[i] = in[i] > 0.0f ? in[i] : 0.0f;
    }
    return out;
}

__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    extern __shared__ float smem[];
    int row = blockIdx.x;
    float max_val = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) max_val = fmaxf(max_val, x[row * cols + c]);
    __syncthreads();
    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(x[row * cols + c] - max_val);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) y[row * cols + c] = expf(x[row * cols + c] - max_val) / sum;
}
''',
    "You write custom CUDA kernels to replace the pytorch operators in the given architecture to get speedups. "
    "You are given the following architecture. Optimize the architecture named Model with custom CUDA operators! "
    "Name your optimized output architecture ModelNew. Output the new code in codeblocks. "
    "Please generate real code, NOT pseudocode, make sure the code compiles and is fully functional. "
    "Here are your previous attempts. Summary of your changes. Feedback: the kernel compiled and is correct, "
    "speedup 1.25x over the PyTorch reference. Compilation failed: error: identifier is undefined. "
    "Runtime error: illegal memory access. Output mismatch: max absolute difference 0.0123. "
    "Okay, let me think about how to fuse the matmul, the bias add and the activation into one kernel. "
    "I used shared memory tiling, vectorized loads, loop unrolling and a warp-level reduction.",
)


@functools.lru_cache(maxsize=None)
def _trained_tokenizer_json(vocab_size: int) -> str:
    """Train the byte-level BPE once per process; the JSON is the cache (training takes about 0.1 s)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(_CORPUS) * 4, trainer=trainer)
    # <think> / </think> are single tokens but not "special": skip_special_tokens keeps them in the text.
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    return tok.to_str()


def build_tiny_tokenizer(*, vocab_size: int = TINY_VOCAB_SIZE) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` with eos ``<|im_end|>``, pad ``<|endoftext|>``, a chat template.

    Every byte string round-trips (byte-level), so any text the model writes decodes and re-encodes.
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer.from_str(_trained_tokenizer_json(vocab_size))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        padding_side="left",
        chat_template=CHAT_TEMPLATE,
        model_max_length=32768,
    )
    return tokenizer


def build_tiny_model(tokenizer: Any, *, seed: int = 0, hidden_size: int = 64, num_layers: int = 2) -> Any:
    """A randomly initialised Qwen2 causal LM (fp32, eval mode) sized to ``tokenizer``; same seed, same weights."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.eval()
    # The model's own generation defaults stay neutral: the policy sets every sampling knob explicitly.
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


# Public config.json values of real architectures, so that speed and memory can be measured at real scale
# with random weights and nothing downloaded.
REAL_ARCHITECTURES = {
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
}


def build_random_model(name: str, tokenizer: Any, *, device: Any = "cpu", dtype: Any = None) -> Any:
    """A randomly initialised Qwen2 causal LM of a real architecture (``REAL_ARCHITECTURES[name]``).

    Built directly on ``device`` (constructing Qwen2.5-1.5B on the host takes about 75 s). Meant for speed
    and memory tests with the tiny tokenizer: its outputs are noise.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if name not in REAL_ARCHITECTURES:
        raise ValueError(f"unknown architecture {name!r}; expected one of {sorted(REAL_ARCHITECTURES)}")
    config = Qwen2Config(**REAL_ARCHITECTURES[name], max_position_embeddings=32768, rope_theta=1e6,
                         rms_norm_eps=1e-6, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    with torch.device(device):
        return Qwen2ForCausalLM._from_config(config, dtype=dtype or torch.float32)


def tiny_policy(seed: int = 0, **kwargs: Any) -> Any:
    """``TransformersPolicy`` over the tiny tokenizer and model; ``kwargs`` go to the policy (max_new_tokens, ...)."""
    from kevin.core.policy import TransformersPolicy

    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=seed)
    kwargs.setdefault("max_new_tokens", 64)
    return TransformersPolicy(model, tokenizer, **kwargs)
