"""Checkpoints: exact round trips, exact resumption, and no corrupt checkpoint after a crash."""

import random

import pytest
import torch

from kevin.core.run import checkpoint as ckpt
from kevin.core.run.checkpoint import (
    checkpoint_path, flatten_state, latest_checkpoint, load_checkpoint, prune_checkpoints, rng_state,
    save_checkpoint, set_rng_state, unflatten_state,
)


def _model_opt_sched(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.99))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 3))
    return model, opt, sched


def _train_step(model, opt, sched):
    x = torch.randn(16, 4)  # draws from the global RNG, so RNG state matters for exactness
    loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    return loss.item()


def test_flatten_then_unflatten_gives_back_ints_keys_tuples_and_tensors():
    state = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.arange(3.0)}},
             "param_groups": [{"betas": (0.9, 0.99), "params": [0], "foreach": None}]}
    tensors, skeleton = flatten_state(state)
    assert sorted(tensors) == ["state.0.exp_avg", "state.0.step"]
    back = unflatten_state(skeleton, tensors)
    assert back["param_groups"] == state["param_groups"]
    assert list(back["state"]) == [0]
    torch.testing.assert_close(back["state"][0]["exp_avg"], torch.arange(3.0))


def test_objects_that_are_not_plain_state_are_refused():
    with pytest.raises(TypeError, match="cannot checkpoint"):
        flatten_state({"f": object()})


def test_resuming_from_a_checkpoint_continues_training_exactly(tmp_path):
    # Reference: 5 uninterrupted steps. Resumed: 3 steps, save, rebuild everything, load, 2 more steps.
    model, opt, sched = _model_opt_sched()
    torch.manual_seed(123)
    reference = [_train_step(model, opt, sched) for _ in range(5)]

    model, opt, sched = _model_opt_sched()
    torch.manual_seed(123)
    first = [_train_step(model, opt, sched) for _ in range(3)]
    save_checkpoint(checkpoint_path(tmp_path, 3), {
        "model": dict(model.named_parameters()), "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(), "rng": rng_state()})
    torch.manual_seed(999)  # disturb the RNG; the checkpoint must restore it

    model, opt, sched = _model_opt_sched(seed=7)  # different init, overwritten by the load
    state = load_checkpoint(latest_checkpoint(tmp_path))
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    set_rng_state(state["rng"])
    rest = [_train_step(model, opt, sched) for _ in range(2)]
    assert first + rest == reference


def test_rng_state_round_trip_restores_python_and_torch_draws():
    state = rng_state()
    a = (random.random(), torch.rand(3))
    set_rng_state(state)
    b = (random.random(), torch.rand(3))
    assert a[0] == b[0] and torch.equal(a[1], b[1])


def test_a_save_interrupted_midway_leaves_the_previous_checkpoint_as_latest(tmp_path, monkeypatch):
    save_checkpoint(checkpoint_path(tmp_path, 1), {"trainer": {"step": 1}})
    calls = {"n": 0}
    real = ckpt._write_file

    def crash_on_second_file(path, data):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # Ctrl-C while writing step 2
        real(path, data)

    monkeypatch.setattr(ckpt, "_write_file", crash_on_second_file)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(checkpoint_path(tmp_path, 2), {"trainer": {"step": 2}})
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path) == checkpoint_path(tmp_path, 1)
    assert not checkpoint_path(tmp_path, 2).exists()
    # The next save of step 2 cleans the torn temporary directory and succeeds.
    save_checkpoint(checkpoint_path(tmp_path, 2), {"trainer": {"step": 2}})
    assert load_checkpoint(latest_checkpoint(tmp_path))["trainer"] == {"step": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000001", "step_000002"]


def test_saving_over_an_existing_checkpoint_replaces_it(tmp_path):
    save_checkpoint(checkpoint_path(tmp_path, 4), {"trainer": {"v": 1}})
    save_checkpoint(checkpoint_path(tmp_path, 4), {"trainer": {"v": 2}})
    assert load_checkpoint(checkpoint_path(tmp_path, 4))["trainer"] == {"v": 2}


def test_latest_is_none_without_checkpoints_and_prune_keeps_the_newest(tmp_path):
    assert latest_checkpoint(tmp_path / "nothing") is None
    for step in (1, 2, 3):
        save_checkpoint(checkpoint_path(tmp_path, step), {"trainer": {"step": step}})
    deleted = prune_checkpoints(tmp_path, keep=2)
    assert [p.name for p in deleted] == ["step_000001"]
    assert latest_checkpoint(tmp_path).name == "step_000003"


def test_meta_is_stored_with_the_state_names(tmp_path):
    save_checkpoint(tmp_path / "c", {"a": {"x": 1}, "b": [torch.zeros(1)]}, meta={"step": 5})
    loaded = load_checkpoint(tmp_path / "c", names=["a"])
    assert loaded["meta"] == {"step": 5, "states": ["a", "b"]} and loaded["a"] == {"x": 1}


class _Sampler:
    def __init__(self):
        self.drawn = 0

    def state_dict(self):
        return {"drawn": self.drawn}

    def load_state_dict(self, state):
        self.drawn = state["drawn"]


def test_training_state_round_trip_restores_every_part_and_returns_the_step(tmp_path):
    from kevin.core.run.checkpoint import restore_training_state, training_state

    model, opt, sched = _model_opt_sched()
    sampler = _Sampler()
    sampler.drawn = 7
    _train_step(model, opt, sched)
    save_checkpoint(tmp_path / "c", training_state(model=model, optimizer=opt, scheduler=sched, sampler=sampler,
                                                   rngs=[rng_state()], step=4))
    model2, opt2, sched2 = _model_opt_sched(seed=5)
    sampler2 = _Sampler()
    step = restore_training_state(load_checkpoint(tmp_path / "c"), model=model2, optimizer=opt2, scheduler=sched2,
                                  sampler=sampler2)
    assert step == 4 and sampler2.drawn == 7 and sched2.last_epoch == sched.last_epoch
    for (n, p), (_, q) in zip(model.named_parameters(), model2.named_parameters()):
        assert torch.equal(p, q), n


def test_frozen_weights_are_not_saved_and_missing_trainable_weights_are_an_error(tmp_path):
    from kevin.core.run.checkpoint import restore_training_state, training_state

    model, opt, sched = _model_opt_sched()
    model[0].requires_grad_(False)  # the first layer frozen, as a base model under LoRA
    state = training_state(model=model, optimizer=opt, scheduler=sched, sampler=_Sampler(), rngs=[rng_state()], step=1)
    assert sorted(state["model"]) == ["2.bias", "2.weight"]
    model2, opt2, sched2 = _model_opt_sched()  # everything trainable: layer 0 is missing from the checkpoint
    with pytest.raises(ValueError, match="lacks 2 trainable weights"):
        restore_training_state(state, model=model2, optimizer=opt2, scheduler=sched2, sampler=_Sampler())
