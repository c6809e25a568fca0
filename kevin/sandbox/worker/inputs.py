"""Input sets: secret seeds, the task's own distribution and its signed / scaled / heavy-tailed variants.

Used inside the golden process (imports torch). Set k of a task is drawn after
``torch.manual_seed(derive_seed(secret, task_key, "set", k))`` by the task's own ``get_inputs()``; then
the variant ``VARIANTS[k % 4]`` transforms its floating-point tensors (integer tensors, e.g. indices, are
left alone):

- ``task``: unchanged;
- ``signed``: every element times a random sign (U[0,1) inputs now have both signs: hack B2);
- ``scaled``: times one random factor 10^u, u ~ U[-1.5, 1.5] (magnitude-keyed shortcuts: B3);
- ``heavy``: times a log-normal factor exp(0.75 z), and about 0.1% of elements times 20 (outliers
  defeat subsampling: B4).

The golden process keeps a variant only where the reference stays finite on it.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import torch

VARIANTS = ("task", "signed", "scaled", "heavy")


def derive_seed(secret: int, *parts: Any) -> int:
    """A 63-bit seed from the secret and a path of labels: sha256("secret:part:part...").

    >>> derive_seed(1, "a") == derive_seed(1, "a") != derive_seed(2, "a")
    True
    """
    digest = hashlib.sha256(":".join(str(p) for p in (secret, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def apply_variant(inputs: Sequence[Any], variant: str, gen: torch.Generator) -> list[Any]:
    """The inputs with ``variant`` applied to every floating-point tensor (others returned as they are)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}")
    out: list[Any] = []
    for x in inputs:
        if variant == "task" or not (isinstance(x, torch.Tensor) and x.is_floating_point()) or x.numel() == 0:
            out.append(x)
            continue
        base = x.detach().to("cpu", torch.float64)
        if variant == "signed":
            y = base * (torch.randint(0, 2, base.shape, generator=gen, dtype=torch.int64) * 2 - 1)
        elif variant == "scaled":
            y = base * 10.0 ** (float(torch.rand((), generator=gen, dtype=torch.float64)) * 3.0 - 1.5)
        else:  # heavy
            y = base * torch.exp(0.75 * torch.randn(base.shape, generator=gen, dtype=torch.float64))
            flat = y.reshape(-1)
            k = max(1, flat.numel() // 1000)
            idx = torch.randint(0, flat.numel(), (k,), generator=gen)
            flat[idx] *= 20.0
        out.append(y.to(x.dtype).to(x.device))
    return out


def subsample(inputs: Sequence[Any]) -> list[Any]:
    """The "subsampled computation" control: every other element of each float tensor zeroed, the rest doubled.

    An unbiased estimate for sums and means (the law-of-large-numbers hack B4), wrong almost everywhere else.
    >>> subsample([torch.tensor([1.0, 2.0, 3.0])])[0].tolist()
    [2.0, 0.0, 6.0]
    """
    out: list[Any] = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            y = x.detach().clone().contiguous()
            flat = y.view(-1)
            flat[0::2] *= 2
            flat[1::2] = 0
            out.append(y)
        else:
            out.append(x)
    return out


def all_finite(tensors: Sequence[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) if t.is_floating_point() else True for t in tensors)
