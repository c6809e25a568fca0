import pytest

from kevin.data.task import Task, substitute_constants

SRC = """import torch
batch_size = 4096
dim = (
    1024
)

class Model(torch.nn.Module):
    def forward(self, x):
        return x

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
"""


def test_cpu_sizes_replace_module_constants_including_multiline_values():
    task = Task("t1", SRC, sizes={"cpu": {"batch_size": 8, "dim": 16}})
    src = task.source_for("cpu")
    ns: dict = {}
    exec(src, ns)
    assert ns["batch_size"] == 8 and ns["dim"] == 16
    assert task.source_for("cuda") == SRC


def test_unknown_constant_in_overrides_raises():
    with pytest.raises(ValueError, match="batchsize"):
        substitute_constants(SRC, {"batchsize": 8})


def test_unknown_backend_raises():
    with pytest.raises(ValueError):
        Task("t", SRC).source_for("tpu")
    with pytest.raises(ValueError):
        Task("t", SRC, sizes={"tpu": {}})


def test_task_is_frozen_and_round_trips_through_a_dict():
    task = Task("t1", SRC, level=1, name="identity", sizes={"cpu": {"dim": 2}}, metadata={"ops": ["id"]})
    with pytest.raises(Exception):
        task.level = 2
    with pytest.raises(TypeError):
        task.sizes["cpu"]["dim"] = 3
    assert Task.from_dict(task.to_dict()) == task
