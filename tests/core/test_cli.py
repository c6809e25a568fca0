"""parse_config: every field is an option typed from its annotation; mistakes are errors."""

from dataclasses import dataclass

import pytest

from kevin.core.cli import ConfigError, config_help, field_docs, parse_config


@dataclass(frozen=True)
class Cfg:
    steps: int = 40
    """RL steps"""
    gamma: float = 0.4
    """discount of later turns' scores"""
    mode: str = "sum"
    lora: bool = False
    speedup_cap: float | None = None
    """cap on the speedup term; None = no cap"""


def test_no_arguments_gives_the_dataclass_defaults():
    assert parse_config(Cfg, []) == Cfg()


def test_space_and_equals_forms_are_both_accepted():
    assert parse_config(Cfg, ["--steps", "3", "--gamma=0.8"]) == Cfg(steps=3, gamma=0.8)


def test_values_are_typed_from_the_annotation():
    cfg = parse_config(Cfg, ["--steps", "7", "--gamma", "1"])
    assert type(cfg.steps) is int and type(cfg.gamma) is float


def test_bare_boolean_flag_means_true_and_explicit_false_is_false():
    assert parse_config(Cfg, ["--lora"]).lora is True
    assert parse_config(Cfg, ["--lora", "--steps", "2"]) == Cfg(lora=True, steps=2)
    assert parse_config(Cfg, ["--lora=false"]).lora is False
    assert parse_config(Cfg, ["--lora", "no"]).lora is False


def test_optional_field_takes_a_value_or_none():
    assert parse_config(Cfg, ["--speedup_cap", "10"]).speedup_cap == 10.0
    assert parse_config(Cfg, ["--speedup_cap=None"]).speedup_cap is None


def test_dashes_in_names_are_read_as_underscores():
    assert parse_config(Cfg, ["--speedup-cap", "2.5"]).speedup_cap == 2.5


def test_unknown_option_is_an_error():
    with pytest.raises(ConfigError, match="unknown option --stepz"):
        parse_config(Cfg, ["--stepz", "3"])


def test_badly_typed_value_is_an_error():
    with pytest.raises(ConfigError, match="expected int"):
        parse_config(Cfg, ["--steps", "2.5"])
    with pytest.raises(ConfigError, match="expected a boolean"):
        parse_config(Cfg, ["--lora", "maybe"])


def test_missing_value_and_positional_arguments_are_errors():
    with pytest.raises(ConfigError, match="needs a value"):
        parse_config(Cfg, ["--steps"])
    with pytest.raises(ConfigError, match="positional"):
        parse_config(Cfg, ["steps=3"])


def test_repeated_option_is_an_error():
    with pytest.raises(ConfigError, match="twice"):
        parse_config(Cfg, ["--steps", "1", "--steps", "2"])


def test_preset_defaults_apply_but_the_command_line_wins():
    preset = {"steps": 2, "mode": "max"}
    assert parse_config(Cfg, [], defaults=preset) == Cfg(steps=2, mode="max")
    assert parse_config(Cfg, ["--steps", "5"], defaults=preset) == Cfg(steps=5, mode="max")


def test_field_docstrings_become_help_text():
    docs = field_docs(Cfg)
    assert docs["steps"] == "RL steps" and docs["mode"] == ""
    assert "--speedup_cap" in config_help(Cfg) and "None = no cap" in config_help(Cfg)


def test_help_exits_cleanly(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_config(Cfg, ["--help"])
    assert exc.value.code == 0 and "--gamma" in capsys.readouterr().out


def test_log_to_stderr_shows_the_librarys_info_lines_once_however_often_it_is_called(capfd):
    import logging

    from kevin.core.cli import log_to_stderr

    log = logging.getLogger("kevin")
    saved = log.level, list(log.handlers)
    try:
        log_to_stderr()
        log_to_stderr()  # a second call adds no second handler
        logging.getLogger("kevin.core.rollout").info("turn 1/4: hello")
        logging.getLogger("other.library").info("not ours")
        err = capfd.readouterr().err
    finally:
        log.setLevel(saved[0])
        log.handlers[:] = saved[1]
    assert err.count("kevin.core.rollout: turn 1/4: hello") == 1
    assert "not ours" not in err


def test_log_to_stderr_names_the_rank_when_there_are_several_processes(capfd, monkeypatch):
    import logging

    from kevin.core.cli import log_to_stderr

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    log = logging.getLogger("kevin")
    saved = log.level, list(log.handlers)
    try:
        log_to_stderr()
        logging.getLogger("kevin.core.rollout").info("turn 1/4: hello")
        err = capfd.readouterr().err
    finally:
        log.setLevel(saved[0])
        log.handlers[:] = saved[1]
    assert "[rank 1] kevin.core.rollout: turn 1/4: hello" in err
