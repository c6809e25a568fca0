"""calibrate: zeros, the mean constant, a passthrough and a subsampled computation must all be rejected."""

import pytest

from sandbox_cases import LINEAR_RELU_TASK, RELU_SOURCE, RELU_TASK, ROW_SUM_TASK
from kevin.data.task import Task
from kevin.sandbox import EvalResult, SandboxConfig, calibrate, calibrate_many

CONFIG = SandboxConfig(seed=1234)


@pytest.fixture(scope="module")
def reports():
    degenerate = Task("x_minus_x", RELU_SOURCE.replace("torch.relu(x)", "x - x"))
    scalar_mean = Task("scalar_mean", RELU_SOURCE.replace("torch.relu(x)", "x.mean()"))
    broken = Task("broken", RELU_SOURCE.replace("torch.relu(x)", "undefined_name(x)"))
    tasks = [RELU_TASK, ROW_SUM_TASK, LINEAR_RELU_TASK, degenerate, scalar_mean, broken]
    return dict(zip([t.task_id for t in tasks], calibrate_many(tasks, device="cpu", config=CONFIG)))


def test_a_good_elementwise_task_rejects_every_control(reports):
    r = reports["test_relu"]
    assert r.passed, r.controls
    assert set(r.controls) == {"zeros", "mean_constant", "passthrough", "subsampled"}
    assert all(isinstance(v, EvalResult) and v.status == "incorrect" for v in r.controls.values())


def test_a_reduction_task_rejects_the_subsampled_estimate(reports):
    assert reports["test_row_sum"].passed
    assert reports["test_row_sum"].controls["subsampled"].status == "incorrect"


def test_passthrough_is_not_applicable_when_no_input_has_the_output_shape(reports):
    # Linear 128 -> 64: the input is [32, 128], the output [32, 64]
    assert reports["test_linear_relu"].controls["passthrough"].startswith("not applicable")
    assert reports["test_linear_relu"].passed


def test_a_task_whose_output_is_always_zero_fails_calibration(reports):
    r = reports["x_minus_x"]
    assert not r.passed
    assert "zeros" in r.accepted_controls


def test_a_scalar_mean_task_rejects_the_constant_because_the_variants_move_it(reports):
    # mean of U[0,1) is ~0.5 on every draw of the task's own distribution; the signed / scaled / heavy
    # sets move it far away, so the constant learnt on the first set is rejected
    assert reports["scalar_mean"].controls["mean_constant"].status == "incorrect"


def test_a_task_whose_reference_fails_does_not_pass(reports):
    r = reports["broken"]
    assert not r.passed
    assert "undefined_name" in r.controls["golden"]


def test_calibrate_of_one_task_matches_calibrate_many(reports):
    assert calibrate(RELU_TASK, config=CONFIG).passed == reports["test_relu"].passed


BATCHNORM_TASK = Task("fresh_batchnorm", """import torch
import torch.nn as nn

batch_size, channels, size = 8, 4, 6


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn(batch_size, channels, size, size) * 3 + 2]


def get_init_inputs():
    return [channels]
""")


def test_models_run_in_training_mode_so_a_fresh_batchnorm_is_not_the_identity():
    # Training mode (KernelBench's): y = (x - batch mean) / batch std, far from x = 3 * randn + 2, so the
    # passthrough control is rejected. In eval mode a fresh BatchNorm (running mean 0, var 1, weight 1,
    # bias 0) computes x / sqrt(1 + 1e-5), i.e. the input itself: `return x` would pass.
    train = calibrate(BATCHNORM_TASK, config=CONFIG)
    assert train.passed and train.controls["passthrough"].status == "incorrect"
    evaluated = calibrate(BATCHNORM_TASK, config=SandboxConfig(seed=1234, train_mode=False))
    assert not evaluated.passed and "passthrough" in evaluated.accepted_controls
