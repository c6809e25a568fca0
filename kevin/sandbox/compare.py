"""Pure comparisons of candidate outputs with golden outputs, done in the trusted parent.

The parent compares plain CPU tensors it loaded itself from safetensors files (raw bytes plus a header):
never live objects the candidate could have subclassed (the arithmetic may run on the parent's GPU). ``torch``
is imported inside the functions, so ``import kevin.sandbox`` stays standard-library only.

Error measure, for floating outputs, with ``s = rms(ref)`` over the elements finite in both:

    pass  iff  NaN where ref is NaN, the same inf where ref is inf, and for every finite element
               |out - ref| <= atol * s + rtol * |ref|
    max_abs_error = max |out - ref|
    max_rel_error = max |out - ref| / max(|ref|, s)

Example: ref = [3, 4] (s = sqrt((9 + 16) / 2) = 3.536), out = [3, 4.01], atol = rtol = 1e-3:
tol = [0.003536 + 0.003, 0.003536 + 0.004] = [0.006536, 0.007536]; |d| = [0, 0.01] > 0.007536 -> fail,
max_abs_error = 0.01, max_rel_error = 0.01 / 4 = 0.0025.
Integer and bool outputs must match exactly.

A second criterion covers what ``atol * s`` leaves unchecked when the reference spans a huge range (a
cumulative product of 4,000 Gaussians is exactly 0 in 96 % of its elements and below 1e-3 x s in most of the
rest, so a kernel that stops after 64 columns passed). Of the finite elements with
``|ref| >= finfo.tiny``, at most 1 % (``SMALL_SHARE``) may be off by more than half of ``|ref|`` (``HALF``).
The reference's own model run in float64, as a more accurate kernel would compute it, is off that much in none
of the 440 floating outputs of the built-in tasks' four input sets (``python benchmarks/compare_false_positives.py``,
CPU sizes; in another draw of the inputs, 0.003 % of one output's elements, GELU's heavy set).
Tasks outside the suite were not measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


HALF = 0.5  # second criterion: an element is wrong when off by more than this share of |ref| ...
SMALL_SHARE = 0.01  # ... and an output fails when more than this share of its nonzero elements are
CHUNK = 1 << 22  # elements compared at once (32 MiB in float64); the verdict does not depend on it


@dataclass(frozen=True)
class Comparison:
    """The verdict of one comparison: ``ok``; why not (``reason``); the errors (None = not computed)."""

    ok: bool
    reason: str = ""
    max_abs_error: float | None = None
    max_rel_error: float | None = None


def _shape(t: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in t.shape)


def compare_tensor(out: Any, ref: Any, *, atol: float, rtol: float, name: str = "output",
                   device: str = "cpu") -> Comparison:
    """Compare one tensor with its golden value (both plain CPU tensors; the arithmetic runs on ``device``, to
    which chunks of both are copied: a GPU does it in milliseconds where 16 cores took tens of seconds)."""
    import torch

    if type(out) is not torch.Tensor:
        return Comparison(False, f"{name} is a {type(out).__name__}, not exactly a torch.Tensor")
    if out.dtype != ref.dtype:
        return Comparison(False, f"{name} has dtype {out.dtype}, expected {ref.dtype}")
    if _shape(out) != _shape(ref):
        return Comparison(False, f"{name} has shape {_shape(out)}, expected {_shape(ref)}")
    if out.numel() == 0:
        return Comparison(True, "", 0.0, 0.0)
    if ref.is_complex():  # real and imaginary parts both count (a cast to float64 would drop the imaginary one)
        return compare_tensor(torch.view_as_real(out.resolve_conj()).contiguous(),
                              torch.view_as_real(ref.resolve_conj()).contiguous(), atol=atol, rtol=rtol, name=name,
                              device=device)
    if not (ref.is_floating_point() or ref.is_complex()):
        # in the tensors' own dtype: through float64, 2**53 + 1 would equal 2**53
        n_bad = int((out != ref).sum())
        if n_bad:
            worst = float((out.to(torch.float64) - ref.to(torch.float64)).abs().max())  # for the report only
            reason = f"{name} differs from the reference in {n_bad} of {ref.numel()} elements (exact match required)"
            return Comparison(False, reason, worst, None)
        return Comparison(True, "", 0.0, 0.0)
    # In chunks of CHUNK elements: a full-size float64 copy and its temporaries of a KernelBench output (128M
    # elements) take gigabytes, and the parent judges up to 16 candidates at once. Two passes: the rms first.
    pairs = list(zip(out.reshape(-1).split(CHUNK), ref.reshape(-1).split(CHUNK)))
    norms, n_finite = [], 0
    for o, r in pairs:
        _, fr, _ = _finite_pair(o, r, device)
        norms.append(torch.linalg.vector_norm(fr))
        n_finite += fr.numel()
    scale = float(torch.linalg.vector_norm(torch.stack(norms)) / n_finite ** 0.5) if n_finite else 0.0  # rms
    max_abs = max_rel = 0.0
    n_pattern = n_bad = n_nonzero = n_half = 0
    for o, r in pairs:
        fo, fr, bad_pattern = _finite_pair(o, r, device)
        n_pattern += bad_pattern
        if not fr.numel():
            continue
        d = (fo - fr).abs_()
        abs_ref = fr.abs()
        max_abs = max(max_abs, float(d.max()))
        if scale > 0:
            rel = d / abs_ref.clamp(min=scale)  # 0 where d is 0
        else:
            rel = torch.where(d == 0, torch.zeros_like(d), d / abs_ref)
        max_rel = max(max_rel, float(rel.max()))
        n_bad += int((d > abs_ref * rtol + atol * scale).sum())
        nonzero = abs_ref >= torch.finfo(ref.dtype).tiny
        n_nonzero += int(nonzero.sum())
        n_half += int((d[nonzero] > HALF * abs_ref[nonzero]).sum())
    if n_pattern:
        return Comparison(
            False,
            f"{name} has NaN/inf in {n_pattern} of {ref.numel()} elements where the reference does not "
            "(or misses the reference's NaN/inf)",
            max_abs, max_rel,
        )
    if n_bad:
        return Comparison(
            False,
            # relative errors only, to two figures: the max abs error and rms(ref), to four, gave a scalar
            # output's value back for zeros, to hard-code on the next turn; the abs error stays in
            # the result's fields
            f"{name} differs from the reference in {n_bad} of {ref.numel()} elements: max rel error "
            f"{max_rel:.2g} (tolerance {atol:g} x rms(ref) + {rtol:g} x |ref|)",
            max_abs, max_rel,
        )
    if n_half > SMALL_SHARE * n_nonzero:
        return Comparison(
            False,
            f"{name} is off by more than half of the reference in {n_half} of the {n_nonzero} elements where the "
            f"reference is not zero (more than {SMALL_SHARE:.0%}): elements far below the others count too",
            max_abs, max_rel,
        )
    return Comparison(True, "", max_abs, max_rel)


def _finite_pair(out: Any, ref: Any, device: str = "cpu") -> tuple[Any, Any, int]:
    """(out, ref) in float64 on ``device``, kept where both are finite, and the count of elements whose NaN/inf
    pattern differs (NaN against a number, inf against a number or the other inf)."""
    import torch

    o, r = out.to(device).to(torch.float64), ref.to(device).to(torch.float64)
    if bool(torch.isfinite(r).all()) and bool(torch.isfinite(o).all()):  # the common case, in two passes
        return o, r, 0
    ref_nan, out_nan = torch.isnan(r), torch.isnan(o)
    ref_inf, out_inf = torch.isinf(r), torch.isinf(o)
    bad_pattern = (ref_nan != out_nan) | (ref_inf != out_inf) | (ref_inf & (o != r))
    finite = torch.isfinite(r) & torch.isfinite(o)
    return o[finite], r[finite], int(bad_pattern.sum())


def compare_outputs(outs: Sequence[Any], refs: Sequence[Any], *, atol: float, rtol: float, label: str = "",
                    device: str = "cpu") -> Comparison:
    """Compare an output list with the golden list: same count, then every tensor; the first failure wins."""
    prefix = f"{label}: " if label else ""
    if len(outs) != len(refs):
        return Comparison(False, f"{prefix}returned {len(outs)} outputs, expected {len(refs)}")
    worst_abs, worst_rel = 0.0, 0.0
    for i, (o, r) in enumerate(zip(outs, refs)):
        name = f"{prefix}output {i}" if len(refs) > 1 else f"{prefix}output"
        c = compare_tensor(o, r, atol=atol, rtol=rtol, name=name, device=device)
        if not c.ok:
            return c
        worst_abs = max(worst_abs, c.max_abs_error or 0.0)
        worst_rel = max(worst_rel, c.max_rel_error or 0.0)
    return Comparison(True, "", worst_abs, worst_rel)


def combine(comparisons: Sequence[Comparison]) -> Comparison:
    """All sets must pass; the errors are the worst over the sets; the first failure's reason wins."""
    abs_errs = [c.max_abs_error for c in comparisons if c.max_abs_error is not None]
    rel_errs = [c.max_rel_error for c in comparisons if c.max_rel_error is not None]
    failed = [c for c in comparisons if not c.ok]
    return Comparison(
        not failed and bool(comparisons),
        failed[0].reason if failed else ("" if comparisons else "nothing was compared"),
        max(abs_errs) if abs_errs else None,
        max(rel_errs) if rel_errs else None,
    )
