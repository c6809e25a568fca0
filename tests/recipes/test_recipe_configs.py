"""The training recipes' configurations: the single-turn recipe is the multi-turn one with one turn (the same reward
path, which with T = 1 is plain single-turn GRPO), and ``--config file.yaml`` reads a recipe's options from a file."""

import dataclasses
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kevin.core.run.cli import ConfigError, parse_run_config
from kevin.core.types import Trajectory, Turn
from kevin.rewards.samples import rewarded_samples
from kevin.sandbox.result import EvalResult

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from recipes import train_multiturn as multiturn, train_singleturn as singleturn  # noqa: E402


def reward_options(cfg) -> dict:
    """The keywords a training recipe passes to ``rewarded_samples`` (recipes/train_multiturn.py, step 2)."""
    return dict(correctness_weight=cfg.correctness_weight, speedup_cap=cfg.speedup_cap, gamma=cfg.gamma,
                mode=cfg.reward_mode, baseline=cfg.advantage_baseline, scale_by_std=cfg.scale_by_std)


def test_the_single_turn_config_differs_from_the_multi_turn_one_in_the_turns_the_clip_and_the_directory_only():
    multi, single = multiturn.Config(), singleturn.Config()
    differ = {f.name for f in dataclasses.fields(multi) if getattr(multi, f.name) != getattr(single, f.name)}
    assert differ == {"n_turns", "grad_clip", "output_dir"}
    assert (single.n_turns, single.grad_clip) == (1, 0.5)
    assert [f.name for f in dataclasses.fields(single)] == [f.name for f in dataclasses.fields(multi)]  # same options
    tiny_multi, tiny_single = multiturn.PRESETS["tiny"], singleturn.PRESETS["tiny"]
    assert {k for k in tiny_multi.keys() | tiny_single.keys() if tiny_multi.get(k) != tiny_single.get(k)} == \
        {"n_turns", "output_dir"}
    assert singleturn.RECIPE["config"] is singleturn.Config  # run by multiturn.main, nothing else


def _turn(verdict):
    """verdict: None (incorrect) or the speedup of a correct kernel (1 ms baseline)."""
    result = (EvalResult("incorrect", "") if verdict is None
              else EvalResult("correct", "", runtime_ms=1.0 / verdict, baseline_ms=1.0))
    return Turn((1, 2), (3,), "", result)


verdicts = st.one_of(st.none(), st.floats(min_value=0.1, max_value=5.0))


@settings(max_examples=150, deadline=None)
@given(groups=st.lists(st.lists(verdicts, min_size=1, max_size=5), min_size=1, max_size=3),
       gamma=st.floats(min_value=0.0, max_value=1.0), mode=st.sampled_from(["sum", "max"]),
       baseline=st.sampled_from(["task", "task_turn", "final_broadcast"]))
def test_with_one_turn_the_shared_reward_path_is_single_turn_grpo_whatever_the_multi_turn_options(
        groups, gamma, mode, baseline):
    # B tasks, G_b single-turn trajectories each: what the single-turn recipe computes is what the multi-turn recipe
    # computes with T = 1, for any discount, mode or baseline but leave-one-out: return = score, advantage = the score normalised
    # within the task's samples (the paper's single-turn GRPO)
    trajectories = [Trajectory(f"task{b}", b, g, (_turn(v),)) for b, vs in enumerate(groups) for g, v in enumerate(vs)]
    single = rewarded_samples(trajectories, **reward_options(singleturn.Config()))
    multi = rewarded_samples(trajectories, **{**reward_options(multiturn.Config()), "gamma": gamma, "mode": mode,
                                              "baseline": baseline})
    scores = [0.0 if v is None else 0.3 + v for vs in groups for v in vs]
    expected = []
    for vs in groups:
        s = [0.0 if v is None else 0.3 + v for v in vs]
        mean = sum(s) / len(s)
        std = math.sqrt(sum((x - mean) ** 2 for x in s) / max(len(s) - 1, 1))
        informative = len(s) > 1 and max(s) > min(s)
        expected += [(x - mean) / (std + 1e-6) if informative else 0.0 for x in s]
    for out in (single, multi):
        assert out.scores.shape == out.returns.shape == (len(trajectories), 1)
        assert out.returns.flatten().tolist() == pytest.approx(scores, rel=1e-6)
        assert [s.ret for s in out.samples] == pytest.approx(scores, rel=1e-6)
        assert [s.advantage for s in out.samples] == pytest.approx(expected, rel=1e-4, abs=1e-4)
        assert [(s.task_index, s.trajectory_index, s.turn_index) for s in out.samples] == \
            [(t.task_index, t.trajectory_index, 0) for t in trajectories]
    assert multi.advantages.tolist() == single.advantages.tolist()


def test_the_reward_path_refuses_trajectories_of_different_lengths():
    with pytest.raises(ValueError, match="same number of turns"):
        rewarded_samples([Trajectory("t", 0, 0, (_turn(None),)), Trajectory("t", 0, 1, (_turn(None), _turn(1.0)))])


# --------------------------------------------------------------------------- --config file.yaml


@pytest.mark.parametrize("path", sorted((ROOT / "recipes" / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_file_is_read_by_both_training_recipes(path):
    for recipe in (multiturn, singleturn):
        cfg = parse_run_config(recipe.Config, ["--config", str(path)], presets=recipe.PRESETS)
        assert cfg.model != "tiny"


def test_a_config_file_gives_the_recipes_options_under_the_command_line_and_over_the_preset(tmp_path):
    path = tmp_path / "ablation.yaml"
    path.write_text("gamma: 0.0\nreward_mode: max\nn_turns: 3\nspeedup_cap: 10\nmax_prompt_tokens: null\n")
    cfg = parse_run_config(multiturn.Config, ["--config", str(path), "--n_turns", "5"], presets=multiturn.PRESETS)
    assert (cfg.gamma, cfg.reward_mode, cfg.n_turns, cfg.speedup_cap, cfg.max_prompt_tokens) == (0.0, "max", 5, 10.0,
                                                                                                 None)
    assert (cfg.backend, cfg.output_dir) == ("cpu", "runs/starter")  # the default model's preset, for the rest
    with pytest.raises(ConfigError, match="unknown key 'gama' \\(did you mean gamma"):
        (tmp_path / "typo.yaml").write_text("gama: 0.0\n")
        parse_run_config(multiturn.Config, ["--config", str(tmp_path / "typo.yaml")], presets=multiturn.PRESETS)


@pytest.mark.parametrize("name", ["train_multiturn.py", "train_singleturn.py"])
def test_a_config_file_with_an_unknown_key_stops_the_recipe_with_one_line_before_any_work(tmp_path, name):
    (tmp_path / "bad.yaml").write_text("steps: 2\nclip_hihg: 0.3\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "recipes" / name), "--config", str(tmp_path / "bad.yaml"),
                           "--output_dir", str(tmp_path / "run")], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"{name}: --config {tmp_path / 'bad.yaml'}: unknown key 'clip_hihg' (did you mean clip_high" in proc.stderr
    assert not (tmp_path / "run").exists()
