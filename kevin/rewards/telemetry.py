"""Hack telemetry: the share of a step's samples that each rule family rejected, read from the verdicts' structured
fields (``EvalResult.status`` and ``EvalResult.details``), never from the feedback text.

A step whose shares climb shows the policy probing the reward. Standard library only.

Keys of `rejection_shares` (each the share of the step's samples, in [0, 1]; all of them present, 0.0 when none):

- ``reject/parse/truncated``: the response hit the token limit (``details["truncated"]``, set by the rollout);
- ``reject/parse/no_code``, ``reject/parse/unclosed_think``, ``reject/parse/other``: the response did not parse
  (``details["parse_error"]``: `kevin.data.parse.NO_CODE_ERROR`, `~kevin.data.parse.UNCLOSED_THINK_ERROR`, or
  another parser's message);
- ``reject/format/static``: the static format check rejected the source before anything ran (a ``format_error``
  with ``details["violations"]`` and no ``details["symbol_check"]``);
- ``reject/format/symbols``: the built extension imports forbidden symbols (a ``format_error`` with
  ``details["symbol_check"]`` and ``details["violations"]``);
- ``reject/dynamic/operator_inventory``: the forward called PyTorch compute operators (a ``format_error`` with
  ``details["torch_ops"]``);
- ``reject/dynamic/checked_calls``: the worker saw a violation during the checked calls (tripwires, input
  mutation, aliasing, outputs that are not plain tensors, extra threads: an ``incorrect`` with
  ``details["violations"]`` and no ``details["timing"]``);
- ``reject/dynamic/timed_calls``: the same during the timed calls (``details["violations"]`` beside
  ``details["timing"]``);
- ``reject/dynamic/wall_check``: the parent's clocks contradict the reported time (``details["wall_check"]["ok"]``
  false);
- ``reject/any``: any of the format and dynamic families above (parse failures are not counted: they are not
  rules a kernel breaks).

A verdict that carries ``details["rules"]`` (a list of ``"format/<rule>"`` or ``"dynamic/<rule>"`` names) adds one
key ``reject/<name>`` per name, present only in steps where some verdict names it, and counts towards ``reject/any``.
The sandbox names the static check's families (`kevin.sandbox.static.RULE_FAMILIES`: ``format/fallbacks`` for
try/except, ``format/forward_path`` for PyTorch compute in forward, ``format/load_inline`` for the extension's
build, ``format/banned_python`` for timers, hooks and streams, ...) and the worker's (``dynamic/tripwire``,
``dynamic/input_mutation``, ``dynamic/aliasing``, ``dynamic/outputs``, ``dynamic/threads``,
``dynamic/timed_calls``) and a failed recheck (``dynamic/recheck``). A sample counts once per key however many
violations of that key it has.

>>> from kevin.sandbox.result import EvalResult
>>> shares = rejection_shares([EvalResult("format_error", "x", details={"violations": ["try/except ..."]}),
...                            EvalResult("correct", "y")])
>>> shares["reject/format/static"], shares["reject/any"], shares["reject/dynamic/wall_check"]
(0.5, 0.5, 0.0)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from kevin.data.parse import NO_CODE_ERROR, UNCLOSED_THINK_ERROR
from kevin.sandbox.result import EvalResult

__all__ = ["PARSE_KEYS", "RULE_KEYS", "ANY_KEY", "rejection_keys", "rejection_shares"]

PARSE_KEYS = ("reject/parse/truncated", "reject/parse/no_code", "reject/parse/unclosed_think", "reject/parse/other")
"""The parse families: responses that never reached the sandbox."""

RULE_KEYS = ("reject/format/static", "reject/format/symbols", "reject/dynamic/operator_inventory",
             "reject/dynamic/checked_calls", "reject/dynamic/timed_calls", "reject/dynamic/wall_check")
"""The rule families the sandbox's structured fields identify today."""

ANY_KEY = "reject/any"
"""The share of samples rejected by at least one format or dynamic rule."""

_RULE_NAME = re.compile(r"(format|dynamic)/[a-z0-9_]+(/[a-z0-9_]+)*")


def _parse_keys(details: Mapping[str, Any]) -> set[str]:
    if details.get("truncated") is True:
        return {"reject/parse/truncated"}
    if "parse_error" not in details:
        return set()
    error = details["parse_error"]
    if error == NO_CODE_ERROR:
        return {"reject/parse/no_code"}
    if error == UNCLOSED_THINK_ERROR:
        return {"reject/parse/unclosed_think"}
    return {"reject/parse/other"}


def _rule_keys(status: str, details: Mapping[str, Any]) -> set[str]:
    keys = set()
    if status == "format_error" and "parse_error" not in details and "truncated" not in details:
        if "torch_ops" in details:
            keys.add("reject/dynamic/operator_inventory")
        elif "violations" in details:
            keys.add("reject/format/symbols" if "symbol_check" in details else "reject/format/static")
    if status == "incorrect" and "violations" in details:
        keys.add("reject/dynamic/timed_calls" if "timing" in details else "reject/dynamic/checked_calls")
    wall = details.get("wall_check")
    if isinstance(wall, Mapping) and wall.get("ok") is False:
        keys.add("reject/dynamic/wall_check")
    rules = details.get("rules")
    if isinstance(rules, (list, tuple)):
        keys.update(f"reject/{r}" for r in rules if isinstance(r, str) and _RULE_NAME.fullmatch(r))
    return keys


def rejection_keys(result: EvalResult) -> set[str]:
    """The ``reject/...`` keys (`rejection_shares`, ``reject/any`` included) that one verdict counts towards."""
    details = result.details if isinstance(result.details, Mapping) else {}
    if result.correct:  # rejected by nothing (its details hold the checks it passed)
        return set()
    rules = _rule_keys(result.status, details)
    return _parse_keys(details) | rules | ({ANY_KEY} if rules else set())


def rejection_shares(results: Iterable[EvalResult]) -> dict[str, float]:
    """``{reject/...: share of the samples}`` of one step's verdicts (one per sample, every turn of every
    trajectory); {} for no verdicts. See the module docstring for the keys and what each reads.

    Example: 4 verdicts, one static format rejection, one checked-call violation, one wall-check failure
    after timing and one correct kernel give ``reject/format/static`` = ``reject/dynamic/checked_calls`` =
    ``reject/dynamic/wall_check`` = 1/4 and ``reject/any`` = 3/4.
    """
    results = list(results)
    if not results:
        return {}
    counts = dict.fromkeys((*PARSE_KEYS, *RULE_KEYS, ANY_KEY), 0)
    for result in results:
        for key in rejection_keys(result):
            counts[key] = counts.get(key, 0) + 1
    return {key: n / len(results) for key, n in counts.items()}
