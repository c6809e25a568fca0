"""parse_config (transformers' HfArgumentParser underneath): every field is an option typed from its annotation, its
docstring is its help, ``--config file.yaml`` reads options from a file; mistakes are errors."""

from dataclasses import dataclass

import pytest

from kevin.core.run.cli import ConfigError, field_docs, parse_config


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


def test_unknown_option_is_an_error_that_names_the_close_ones():
    with pytest.raises(ConfigError, match=r"unknown option --stepz for Cfg \(did you mean steps\?\)"):
        parse_config(Cfg, ["--stepz", "3"])


def test_a_prefix_of_an_option_is_not_taken_for_it():
    with pytest.raises(ConfigError, match="unknown option --step "):
        parse_config(Cfg, ["--step", "3"])  # argparse's abbreviations are off


def test_badly_typed_value_is_an_error():
    with pytest.raises(ConfigError, match="argument --steps: invalid int value: '2.5'"):
        parse_config(Cfg, ["--steps", "2.5"])
    with pytest.raises(ConfigError, match="argument --lora: Truthy value expected: got maybe"):
        parse_config(Cfg, ["--lora", "maybe"])
    with pytest.raises(ConfigError, match="invalid float value: 'nope'"):
        parse_config(Cfg, ["--speedup_cap", "nope"])  # an optional field takes a number or none


def test_missing_value_and_positional_arguments_are_errors():
    with pytest.raises(ConfigError, match="argument --steps: expected one argument"):
        parse_config(Cfg, ["--steps"])
    with pytest.raises(ConfigError, match="unexpected argument 'steps=3'"):
        parse_config(Cfg, ["steps=3"])


def test_repeated_option_is_an_error():
    with pytest.raises(ConfigError, match="twice"):
        parse_config(Cfg, ["--steps", "1", "--steps", "2"])


def test_preset_defaults_apply_but_the_command_line_wins():
    preset = {"steps": 2, "mode": "max"}
    assert parse_config(Cfg, [], defaults=preset) == Cfg(steps=2, mode="max")
    assert parse_config(Cfg, ["--steps", "5"], defaults=preset) == Cfg(steps=5, mode="max")


def test_field_docstrings_become_help_text(capsys):
    docs = field_docs(Cfg)
    assert docs["steps"] == "RL steps" and docs["mode"] == ""
    with pytest.raises(SystemExit) as exc:
        parse_config(Cfg, ["--help"], defaults={"steps": 3})
    text = " ".join(capsys.readouterr().out.split())
    assert exc.value.code == 0
    assert "--steps STEPS RL steps (default: 3)" in text  # the default that applies: the preset's
    assert "cap on the speedup term; None = no cap (default: None)" in text and "--config FILE.yaml" in text


@dataclass(frozen=True)
class Longer(Cfg):
    steps: int = 2
    """RL steps of the short variant"""
    extra: str = "x"
    """a field of the subclass"""


def test_a_subclass_keeps_its_bases_docstrings_and_overrides_its_own():
    docs = field_docs(Longer)
    assert (docs["steps"], docs["gamma"], docs["extra"]) == ("RL steps of the short variant",
                                                             "discount of later turns' scores", "a field of the subclass")
    assert parse_config(Longer, ["--extra", "y"]) == Longer(extra="y")


# --------------------------------------------------------------------------- --config file.yaml


def test_a_yaml_file_gives_options_and_the_command_line_wins(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("steps: 7\ngamma: 1\nlora: true\nspeedup-cap: null\nmode: max\n")
    assert parse_config(Cfg, ["--config", str(path)]) == Cfg(steps=7, gamma=1.0, lora=True, mode="max")
    assert parse_config(Cfg, ["--config", str(path), "--steps", "9"]).steps == 9
    assert parse_config(Cfg, ["--steps=9", f"--config={path}"]).steps == 9  # wherever it stands
    assert parse_config(Cfg, ["--config", str(path)], defaults={"steps": 3, "mode": "sum"}).steps == 7  # over presets


@pytest.mark.parametrize("text, message", [
    ("stepz: 3\n", "unknown key 'stepz' (did you mean steps?)"),
    ("steps: three\n", "argument --steps: invalid int value: 'three'"),
    ("lora: maybe\n", "argument --lora: Truthy value expected"),
    ("steps: [1, 2]\n", "steps must be a single value"),
    ("- steps\n", "expected a mapping of field: value, got list"),
    ("steps: [1\n", "while parsing"),
])
def test_a_wrong_yaml_file_is_an_error_naming_the_file(tmp_path, text, message):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        parse_config(Cfg, ["--config", str(path)])
    assert str(info.value).startswith(f"--config {path}: ") and message in str(info.value)


def test_a_missing_yaml_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="No such file"):
        parse_config(Cfg, ["--config", str(tmp_path / "absent.yaml")])


def test_help_exits_cleanly(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_config(Cfg, ["--help"])
    assert exc.value.code == 0 and "--gamma" in capsys.readouterr().out


def test_log_to_stderr_shows_the_librarys_info_lines_once_however_often_it_is_called(capfd):
    import logging

    from kevin.core.run.cli import log_to_stderr

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

    from kevin.core.run.cli import log_to_stderr

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


@dataclass(frozen=True)
class Run:
    model: str = "tiny"
    steps: int = 40
    gamma: float = 0.4
    resume: str = ""
    overwrite: bool = False
    output_dir: str = "runs/kevin"


def test_resume_reads_the_runs_config_under_the_command_line(tmp_path):
    import json

    from kevin.core.run.cli import parse_run_config

    (tmp_path / "config.json").write_text(json.dumps({"model": "big", "gamma": 0.2, "overwrite": True,
                                                       "resume": "", "gone": 1, "output_dir": str(tmp_path)}))
    presets = {"tiny": {"steps": 3, "gamma": 0.9}}
    cfg = parse_run_config(Run, ["--resume", "latest", "--output_dir", str(tmp_path)], presets=presets)
    # saved gamma 0.2 kept; resume / overwrite / unknown "gone" not carried; steps (not saved) comes from the saved
    # model's preset ("big": none, so 40), not from the command line's default model "tiny" (3)
    assert (cfg.model, cfg.steps, cfg.gamma, cfg.resume, cfg.overwrite) == ("big", 40, 0.2, "latest", False)
    again = parse_run_config(Run, ["--resume", "latest", "--output_dir", str(tmp_path), "--gamma", "0.5"],
                             presets=presets)
    assert again.gamma == 0.5  # the command line wins over the saved config


def test_under_resume_a_yaml_file_is_over_the_saved_config_and_may_name_the_run(tmp_path):
    import json

    from kevin.core.run.cli import parse_run_config

    (tmp_path / "config.json").write_text(json.dumps({"model": "big", "gamma": 0.2, "steps": 5}))
    (tmp_path / "more.yaml").write_text(f"output_dir: {tmp_path}\nresume: latest\nsteps: 8\n")
    cfg = parse_run_config(Run, ["--config", str(tmp_path / "more.yaml")], presets={"tiny": {"steps": 3}})
    assert (cfg.model, cfg.gamma, cfg.steps, cfg.resume) == ("big", 0.2, 8, "latest")


def test_resume_from_a_checkpoint_reads_the_config_two_levels_up(tmp_path):
    import json

    from kevin.core.run.cli import parse_run_config

    (tmp_path / "checkpoints" / "step_000001").mkdir(parents=True)
    (tmp_path / "config.json").write_text(json.dumps({"model": "big", "gamma": 0.2}))
    cfg = parse_run_config(Run, ["--resume", str(tmp_path / "checkpoints" / "step_000001")])
    assert cfg.gamma == 0.2


def test_a_fresh_run_gets_the_models_preset():
    from kevin.core.run.cli import parse_run_config

    assert parse_run_config(Run, [], presets={"tiny": {"steps": 3}}).steps == 3
    assert parse_run_config(Run, ["--model", "big"], presets={"tiny": {"steps": 3}}).steps == 40


@dataclass(frozen=True)
class Training:
    gamma: float = 0.4
    reward_mode: str = "sum"
    advantage_baseline: str = "task"
    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.0
    loss_aggregation: str = "seq-mean-token-mean"
    max_new_tokens: int = 8
    n_minibatches: int = 2
    micro_batch_size: int = 4
    tasks_per_step: int = 2
    n_trajectories: int = 2
    n_turns: int = 2
    temperature: float = 0.9
    top_p: float = 1.0
    stagger: int = 1
    backend: str = "cuda"


@pytest.mark.parametrize("bad, message", [
    ({"gamma": 1.5}, "gamma must be in [0, 1], got 1.5"),
    ({"reward_mode": "mean"}, "unknown mode 'mean'"),
    ({"loss_aggregation": "foo"}, "unknown aggregation 'foo'"),
    ({"micro_batch_size": 0}, "these options must be >= 1: {'micro_batch_size': 0}"),
    ({"top_p": 0.0}, "--top_p in (0, 1]"),
    ({"advantage_baseline": "trajectory"}, "--advantage_baseline must be one of task, task_turn, loo, final_broadcast"),
    ({"stagger": 0}, "--stagger must be >= 1"),
    ({"stagger": 2, "backend": "cpu"}, "and 1 with the CPU backend"),
])
def test_check_training_config_names_the_bad_option(bad, message):
    from kevin.core.run.cli import check_training_config

    check_training_config(Training())  # the defaults pass
    with pytest.raises(ConfigError) as info:
        check_training_config(Training(**bad))
    assert message in str(info.value)
