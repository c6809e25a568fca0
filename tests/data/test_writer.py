"""The program writer: what each op writes, shape tracking, refusals, and that it stands alone."""

import json
import random
import subprocess
import sys

import pytest

from kevin.data.loaders import validate_source
from kevin.data.synth import output_shape_on_meta
from kevin.data.writer import NotApplicable, append_op, begin_program, finish_program, render_task


def test_render_writes_a_kernelbench_program_with_cpu_overrides():
    task = render_task(["Gemm", "ReLU", "BiasAdd"])
    assert validate_source(task.source) == []
    assert "self.linear = nn.Linear(in_features, out_features)" in task.source
    assert "x = torch.relu(x)" in task.source
    assert "bias_shape = (out_features,)" in task.source
    assert dict(task.sizes["cpu"]) == {"batch_size": 16, "in_features": 32, "out_features": 64}


def test_without_an_rng_every_menu_gives_its_first_entry():
    source = render_task(["Gemm", "ReLU", "Scaling"]).source
    assert "batch_size = 1024\nin_features = 4096\nout_features = 4096\n" in source
    assert "scale_factor = 2.0\n" in source


def test_shapes_are_tracked_through_transposed_conv_and_pooling():
    # ConvTranspose2d doubles 64 px (GPU) / 8 px (CPU) to 128 / 16, max pooling halves it to 64 / 8;
    # the sum over dim 1 leaves one channel: GPU (16, 1, 64, 64), CPU (2, 1, 8, 8)
    task = render_task(["ConvTranspose2d", "MaxPool", "Sum"])
    assert output_shape_on_meta(task, "cuda") == (16, 1, 64, 64)
    assert output_shape_on_meta(task, "cpu") == (2, 1, 8, 8)


def test_an_op_that_cannot_follow_raises_not_applicable():
    # instance norm needs spatial dims; a GEMM output has none
    with pytest.raises(NotApplicable):
        render_task(["Gemm", "ReLU", "InstanceNorm"])


def test_a_refused_op_leaves_the_program_unchanged():
    program = begin_program("Gemm")
    append_op(program, "ReLU")
    before = program.render()
    with pytest.raises(NotApplicable):
        append_op(program, "InstanceNorm")
    assert program.render() == before
    assert finish_program(program).metadata["ops"] == ("Gemm", "ReLU")


@pytest.mark.parametrize("ops", [["Gemm", "Dropout"], ["Linear", "ReLU"]], ids=["other op", "main op"])
def test_an_unknown_op_is_a_value_error(ops):
    with pytest.raises(ValueError, match="unknown"):
        render_task(ops)


def test_the_same_rng_seed_writes_the_same_program():
    def write(seed):
        program = begin_program("Conv2d", random.Random(seed))
        append_op(program, "LeakyReLU")
        return finish_program(program).source

    assert write(3) == write(3)


def _kevin_data_modules_after_importing(module: str) -> list[str]:
    code = f"import sys, json, {module}; print(json.dumps(sorted(m for m in sys.modules if m.startswith('kevin.data'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


@pytest.mark.parametrize("module", ["kevin.data.writer", "kevin.data.synth", "kevin.data.builtin"])
def test_module_imports_first_in_a_fresh_interpreter(module):
    assert module in _kevin_data_modules_after_importing(module)


def test_the_writer_imports_neither_the_synthesizer_nor_the_suite():
    loaded = _kevin_data_modules_after_importing("kevin.data.writer")
    assert "kevin.data.synth" not in loaded and "kevin.data.builtin" not in loaded


def test_the_suite_imports_neither_the_writer_nor_the_synthesizer():
    loaded = _kevin_data_modules_after_importing("kevin.data.builtin")
    assert "kevin.data.writer" not in loaded and "kevin.data.synth" not in loaded
