"""Command-line overrides for a recipe's ``Config`` dataclass: ``--field value`` or ``--field=value``.

Every field of the dataclass is an option, typed from its annotation (``int``, ``float``, ``str``,
``bool``, and ``X | None`` of those). The docstring written under a field (cleanrl style) is its help
text. Unknown fields and values of the wrong type are errors, never silently ignored: a typo in an
ablation flag would otherwise run the paper's default and look like a result.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class C:
...     steps: int = 40
...     '''number of RL steps'''
...     gamma: float = 0.4
...     lora: bool = False
...     speedup_cap: float | None = None
>>> parse_config(C, ["--steps", "2", "--gamma=0.8", "--lora", "--speedup_cap", "none"])
C(steps=2, gamma=0.8, lora=True, speedup_cap=None)

Booleans accept ``true/false/1/0/yes/no``; a bare ``--flag`` means true. ``none`` (any case) sets an
optional field to None. Dashes and underscores in names are interchangeable (``--max-new-tokens``).
Standard library only.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import logging
import os
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = ["ConfigError", "parse_config", "field_docs", "config_help", "parse_value", "log_to_stderr"]

_TRUE = {"true", "1", "yes", "y", "on"}
_FALSE = {"false", "0", "no", "n", "off"}


def log_to_stderr(level: int | str = logging.INFO) -> None:
    """Show the library's log lines (the ``kevin.*`` loggers: a rollout's line per turn, the policies' and the
    sandbox's warnings) on stderr at ``level``, for the recipes; other libraries' loggers are left as they are.
    With several processes (``WORLD_SIZE`` > 1) each line names its process's ``RANK``. Calling it again sets the
    level and adds no second handler."""
    log = logging.getLogger("kevin")
    log.setLevel(level)
    if not any(getattr(h, "_kevin_stderr", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)  # under accelerate / torchrun: whose line it is
        rank = f"[rank {os.environ.get('RANK', '?')}] " if world > 1 else ""
        handler.setFormatter(logging.Formatter(f"%(asctime)s {rank}%(name)s: %(message)s", "%H:%M:%S"))
        handler._kevin_stderr = True  # type: ignore[attr-defined]
        log.addHandler(handler)


class ConfigError(ValueError):
    """An unknown option, a missing value, or a value that does not fit the field's type."""


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); ``X`` -> (X, False)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise ConfigError(f"unsupported field type {tp!r}: only X | None unions are supported")
        return args[0], len(args) != len(typing.get_args(tp))
    return tp, False


def parse_value(text: str, tp: Any, *, name: str = "value") -> Any:
    """Convert the command-line string ``text`` to the annotated type ``tp``.

    >>> parse_value("3", int), parse_value("no", bool), parse_value("None", float | None)
    (3, False, None)
    """
    base, optional = _unwrap_optional(tp)
    if optional and text.strip().lower() == "none":
        return None
    if typing.get_origin(base) is typing.Literal:
        choices = typing.get_args(base)
        if text not in choices:
            raise ConfigError(f"--{name}: {text!r} is not one of {list(choices)}")
        return text
    if base is bool:
        low = text.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigError(f"--{name}: expected a boolean (true/false), got {text!r}")
    if base in (int, float, str):
        try:
            return base(text)
        except ValueError:
            raise ConfigError(f"--{name}: expected {base.__name__}, got {text!r}") from None
    raise ConfigError(f"--{name}: unsupported field type {tp!r}")


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each field of a dataclass, by field name ('' when absent)."""
    docs = {f.name: "" for f in dataclasses.fields(cls)}
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):  # defined in a REPL or a doctest: no source to read
        return docs
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str) and node.target.id in docs):
            docs[node.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def config_help(cls: type, defaults: Mapping[str, Any] | None = None) -> str:
    """A help text listing every option with its type, default and docstring."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    lines = [f"options of {cls.__name__} (--field value or --field=value):"]
    for f in dataclasses.fields(cls):
        default = (defaults or {}).get(f.name, f.default)
        tname = getattr(hints[f.name], "__name__", str(hints[f.name]))
        lines.append(f"  --{f.name} ({tname}, default {default!r})")
        if docs[f.name]:
            lines.extend("      " + ln for ln in docs[f.name].splitlines())
    return "\n".join(lines)


def parse_config(cls: type, argv: Sequence[str], *, defaults: Mapping[str, Any] | None = None) -> Any:
    """Build ``cls(**defaults, **overrides from argv)``.

    ``defaults`` replaces the dataclass's own defaults for the fields it names (a recipe uses this for
    its CPU-sized preset); anything given on the command line still wins. Raises ``ConfigError`` for an
    unknown option, a positional argument, a repeated option or a badly typed value. ``--help`` raises
    ``SystemExit`` after printing :func:`config_help`.
    """
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    values: dict[str, Any] = {}
    for key, val in (defaults or {}).items():
        if key not in names:
            raise ConfigError(f"default for unknown field {key!r} of {cls.__name__}")
        values[key] = val
    given: set[str] = set()
    i, argv = 0, list(argv)
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            print(config_help(cls, values))
            raise SystemExit(0)
        if not arg.startswith("--"):
            raise ConfigError(f"unexpected positional argument {arg!r}; use --field value")
        key, eq, text = arg[2:].partition("=")
        key = key.replace("-", "_")
        if key not in names:
            close = [n for n in sorted(names) if n.startswith(key[:3])]
            raise ConfigError(f"unknown option --{key} for {cls.__name__}" + (f" (did you mean {close}?)" if close else ""))
        if key in given:
            raise ConfigError(f"option --{key} given twice")
        given.add(key)
        base, _ = _unwrap_optional(hints[key])
        if not eq:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if base is bool and (nxt is None or nxt.startswith("--")):
                values[key] = True  # bare flag
                i += 1
                continue
            if nxt is None:
                raise ConfigError(f"option --{key} needs a value")
            text = nxt
            i += 1
        values[key] = parse_value(text, hints[key], name=key)
        i += 1
    return cls(**values)


def parse_run_config(cls: type, argv: Sequence[str], *, presets: Mapping[str, Mapping[str, Any]] | None = None) -> Any:
    """A training recipe's config: the command line over, in order, the run's saved ``config.json`` (with
    ``--resume``, so that a run continues with its own settings), the preset of its ``--model`` (``presets``:
    model name -> field defaults, e.g. the CPU-sized "tiny" one) and the dataclass's defaults.

    ``cls`` needs the fields ``model``, ``resume`` and ``output_dir``. The saved config is the ``config.json`` of the
    run that wrote the checkpoint (``<output_dir>/config.json`` for ``--resume latest``; two levels above a checkpoint
    directory); its ``model`` picks the preset. The saved ``resume`` and ``overwrite`` are not carried over, nor fields
    ``cls`` no longer has. ``--help`` lists the defaults that apply to this command line.
    """
    wants_help = any(a in ("-h", "--help") for a in argv)
    rest = [a for a in argv if a not in ("-h", "--help")]
    base = parse_config(cls, rest)
    defaults: dict[str, Any] = dict((presets or {}).get(base.model, {}))
    base = parse_config(cls, rest, defaults=defaults)
    if base.resume:
        run_dir = Path(base.output_dir) if base.resume == "latest" else Path(base.resume).parent.parent
        saved_path = run_dir / "config.json"
        if saved_path.is_file():
            names = {f.name for f in dataclasses.fields(cls) if f.init}
            saved = json.loads(saved_path.read_text())
            defaults = dict((presets or {}).get(saved.get("model", base.model), {}))  # the saved run's preset
            defaults.update({k: v for k, v in saved.items() if k in names and k not in ("resume", "overwrite")})
    if wants_help:
        print(config_help(cls, defaults))
        raise SystemExit(0)
    return parse_config(cls, rest, defaults=defaults)


def check_training_config(cfg: Any) -> None:
    """Raise ConfigError for a training recipe's option that would otherwise fail only after the first rollout.

    The reward and loss settings (``gamma``, ``reward_mode``, ``clip_low`` / ``clip_high``, ``kl_coef``,
    ``loss_aggregation``) are tried on a one-sample input, so their own functions' checks apply; the counts must be
    >= 1, ``temperature`` > 0 and ``top_p`` in (0, 1]; ``raise_max_new_tokens_by``, where ``cfg`` has it, >= 1.
    """
    import torch

    from kevin.core.loss import grpo_loss
    from kevin.rewards import aggregate_rewards

    try:
        aggregate_rewards([0.0], gamma=cfg.gamma, mode=cfg.reward_mode)
        zero = torch.zeros(1, 1)
        grpo_loss(zero, zero, torch.zeros(1), torch.ones(1, 1), clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                  kl_coef=cfg.kl_coef, ref_logprobs=zero, aggregation=cfg.loss_aggregation,
                  max_response_len=cfg.max_new_tokens)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    counts = ("n_minibatches", "micro_batch_size", "max_new_tokens", "tasks_per_step", "n_trajectories", "n_turns")
    small = {k: getattr(cfg, k) for k in counts if getattr(cfg, k) < 1}
    if small:
        raise ConfigError(f"these options must be >= 1: {small}")
    if not cfg.temperature > 0 or not 0 < cfg.top_p <= 1:
        raise ConfigError(f"need --temperature > 0 and --top_p in (0, 1], got {cfg.temperature} and {cfg.top_p}")
    factor = getattr(cfg, "raise_max_new_tokens_by", 1.0)
    if not factor >= 1:
        raise ConfigError(f"--raise_max_new_tokens_by must be >= 1 (1: never raised), got {factor}")
