"""A recipe's command line: its ``Config`` dataclass as options, through transformers' ``HfArgumentParser``.

Every field is an option, ``--field value``, ``--field=value`` or ``--field-name value``, typed from its annotation
(``int``, ``float``, ``str``, ``bool``, ``Literal[...]`` and ``X | None``; ``none`` sets an optional field to None; a
bare boolean ``--flag`` means true). The docstring written under a field is its ``--help`` text. ``--config
file.yaml`` reads options from a YAML mapping ``field: value``, through the same typed options; the command line
wins over it. Unknown options or keys, badly typed values and an option given twice are a `ConfigError`, never
ignored: a typo in an ablation flag would otherwise run the paper's default and look like a result.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class C:
...     steps: int = 40
...     gamma: float = 0.4
...     lora: bool = False
...     speedup_cap: float | None = 2.0
>>> parse_config(C, ["--steps", "2", "--gamma=0.8", "--lora", "--speedup_cap", "none"])
C(steps=2, gamma=0.8, lora=True, speedup_cap=None)
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import inspect
import json
import logging
import os
import sys
import textwrap
import typing
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = ["ConfigError", "parse_config", "parse_run_config", "field_docs", "check_training_config", "log_to_stderr",
           "run_recipe"]


class ConfigError(ValueError):
    """An unknown option, a missing value, or a value that does not fit the field's type."""


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


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each field of a dataclass (or of the dataclass it extends), by name ('' if none)."""
    docs = {f.name: "" for f in dataclasses.fields(cls)}
    for klass in reversed(cls.__mro__):  # a subclass's docstring of a field replaces its base's
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):  # object, or a class defined in a REPL or a doctest: no source to read
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, nxt in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in docs
                    and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)):
                docs[node.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def _or_none(convert: Any) -> Any:
    """``convert``, except that ``none`` (any case) gives None: the type of an ``X | None`` option."""
    def parse(text: str) -> Any:
        return None if text.strip().lower() == "none" else convert(text)
    parse.__name__ = getattr(convert, "__name__", "value")  # argparse names it in "invalid <name> value"
    return parse


def _parser(cls: type, defaults: Mapping[str, Any]) -> Any:
    from transformers import HfArgumentParser

    class Parser(HfArgumentParser):
        def error(self, message: str) -> typing.NoReturn:
            raise ConfigError(message)

    parser = Parser(cls, allow_abbrev=False, description=f"Every field of {cls.__name__} is an option.")
    hints, docs = typing.get_type_hints(cls), field_docs(cls)
    for action in parser._actions:
        if action.dest in docs and action.option_strings[0] == f"--{action.dest}":
            action.help = docs[action.dest].replace("%", "%%") or "(undocumented)"
            if type(None) in typing.get_args(hints[action.dest]) and action.type is not None:
                action.type = _or_none(action.type)
        elif action.dest in docs:  # HfArgumentParser's --no_<field> of a boolean that defaults to true: unlisted
            action.help = argparse.SUPPRESS
    parser.add_argument("--config", metavar="FILE.yaml", help="read options from this YAML file, a mapping of "
                        "field: value (the command line wins)")
    unknown = sorted(set(defaults) - set(docs))
    if unknown:
        raise ConfigError(f"defaults for unknown fields {unknown} of {cls.__name__}")
    parser.set_defaults(**defaults)
    return parser


def _unknown(name: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, names, n=3)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _file_argv(path: str, names: Sequence[str]) -> list[str]:
    """The options of a YAML file as ``--field=value`` arguments."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"--config {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of field: value, got {type(data).__name__}")
    argv = []
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in names:
            raise ConfigError(f"--config {path}: unknown key {key!r}{_unknown(name, names)}")
        if isinstance(value, (list, dict)):
            raise ConfigError(f"--config {path}: {key} must be a single value, got {value!r}")
        argv.append(f"--{name}=" + ("none" if value is None else str(value).lower() if isinstance(value, bool)
                                    else str(value)))
    return argv


def _parse(cls: type, argv: Sequence[str], defaults: Mapping[str, Any]) -> Any:
    parser = _parser(cls, defaults)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    given = [parser._option_string_actions[a.split("=", 1)[0]].dest for a in argv
             if a.split("=", 1)[0] in parser._option_string_actions]
    twice = sorted({d for d in given if given.count(d) > 1})
    if twice:
        raise ConfigError(f"option --{twice[0]} given twice")
    args, rest = parser.parse_known_args(argv)
    for arg in rest:
        if arg.startswith("-"):
            name = arg.lstrip("-").split("=", 1)[0]
            raise ConfigError(f"unknown option --{name} for {cls.__name__}{_unknown(name.replace('-', '_'), names)}")
        raise ConfigError(f"unexpected argument {arg!r}: options are --field value")
    if args.config:  # the file's options under the command line's: parsed alone first, to name the file in errors
        from_file = _file_argv(args.config, names)
        try:
            parser.parse_args(from_file)
        except ConfigError as exc:
            raise ConfigError(f"--config {args.config}: {exc}") from None
        args = parser.parse_args([*from_file, *argv])
    return cls(**{name: getattr(args, name) for name in names})


def parse_config(cls: type, argv: Sequence[str], *, defaults: Mapping[str, Any] | None = None) -> Any:
    """``cls`` from the command line ``argv`` over ``defaults`` (field -> value, e.g. a recipe's preset) over the
    dataclass's own defaults. ``--help`` prints every option with its docstring and the default that applies, and
    exits. Raises `ConfigError` for any mistake."""
    return _parse(cls, argv, dict(defaults or {}))


def parse_run_config(cls: type, argv: Sequence[str], *, presets: Mapping[str, Mapping[str, Any]] | None = None) -> Any:
    """A training recipe's config: the command line (and its ``--config`` file) over, in order, the run's saved
    ``config.json`` (with ``--resume``, so that a run continues with its own settings), the preset of its ``--model``
    (``presets``: model name -> field defaults, e.g. the CPU-sized "tiny" one) and the dataclass's defaults.

    ``cls`` needs the fields ``model``, ``resume`` and ``output_dir``. The saved config is the ``config.json`` of the
    run that wrote the checkpoint (``<output_dir>/config.json`` for ``--resume latest``; two levels above a checkpoint
    directory); its ``model`` picks the preset. The saved ``resume`` and ``overwrite`` are not carried over, nor fields
    ``cls`` no longer has. ``--help`` lists the defaults that apply to this command line.
    """
    presets = presets or {}
    rest = [a for a in argv if a not in ("-h", "--help")]
    given = _parse(cls, rest, {})
    defaults = dict(presets.get(given.model, {}))
    given = _parse(cls, rest, defaults)  # the preset may name the output_dir that --resume latest reads
    if given.resume:
        run_dir = Path(given.output_dir) if given.resume == "latest" else Path(given.resume).parent.parent
        if (run_dir / "config.json").is_file():
            names = {f.name for f in dataclasses.fields(cls) if f.init} - {"resume", "overwrite"}
            saved = json.loads((run_dir / "config.json").read_text())
            defaults = dict(presets.get(saved.get("model", given.model), {}))  # the saved run's preset
            defaults.update({k: v for k, v in saved.items() if k in names})
    return _parse(cls, argv, defaults)


def check_training_config(cfg: Any) -> None:
    """Raise ConfigError for a training recipe's option that would otherwise fail only after the first rollout.

    The reward and loss settings (``gamma``, ``reward_mode``, ``advantage_baseline``, ``clip_low`` / ``clip_high``, ``kl_coef``,
    ``loss_aggregation``) are tried on a one-sample input, so their own functions' checks apply; the counts must be
    >= 1, ``temperature`` > 0 and ``top_p`` in (0, 1]; ``raise_max_new_tokens_by``, where ``cfg`` has it, >= 1;
    ``tis_cap``, where it has it, >= 0 (0: off); ``stagger``, where it has it, >= 1, and 1 with the CPU backend.
    """
    import torch

    from kevin.core.loss import grpo_loss
    from kevin.rewards import aggregate_rewards
    from kevin.rewards.samples import BASELINES

    try:
        aggregate_rewards([0.0], gamma=cfg.gamma, mode=cfg.reward_mode)
        if cfg.advantage_baseline not in BASELINES:
            raise ValueError(f"--advantage_baseline must be one of {', '.join(BASELINES)}, got {cfg.advantage_baseline!r}")
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
    if not getattr(cfg, "tis_cap", 0.0) >= 0:
        raise ConfigError(f"--tis_cap must be >= 0 (0: off), got {cfg.tis_cap}")
    stagger = getattr(cfg, "stagger", 1)
    if stagger < 1 or stagger > 1 and getattr(cfg, "backend", "cuda") != "cuda":
        raise ConfigError(f"--stagger must be >= 1, and 1 with the CPU backend (its rollout runs in lockstep: the "
                          f"compilers would share the cores with generation), got {stagger}")


def run_recipe(entry: Any, argv: list[str], **recipe: Any) -> None:
    """``entry(argv, **recipe)`` run from a command line: the library's log lines on stderr; a bad option or model name
    stops it with one line (the script's name and the message) instead of a traceback."""
    from kevin.core.policy.models import ModelNameError

    log_to_stderr()
    try:
        entry(argv, **recipe)
    except (ConfigError, ModelNameError) as exc:
        raise SystemExit(f"{Path(sys.argv[0]).name}: {exc}") from None
