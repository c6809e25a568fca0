"""recipes/export_hf.py end to end on a one-step LoRA run of the tiny model: the merged export loads with
``from_pretrained``, an adapter of the tiny base is refused, ``--push_to_hub`` uploads through a fake hub.

The run trains in the test process (``in_process``, tests/recipes/conftest.py), once for the module.
"""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from recipes import export_hf

SMALLEST = ["--model", "tiny", "--backend", "cpu", "--tasks_per_step", "1", "--n_trajectories", "2", "--n_turns", "1",
            "--max_new_tokens", "8", "--steps", "1", "--lora", "--lora_rank", "4"]

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def run(in_process, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lora_run")
    proc = in_process("train_multiturn.py", *SMALLEST, "--output_dir", str(out), "--overwrite")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def test_the_merged_export_of_the_latest_checkpoint_loads_with_from_pretrained(run, in_process, tmp_path):
    from transformers import AutoModelForCausalLM

    proc = in_process("export_hf.py", "--run", str(run), "--output_dir", str(tmp_path / "hf"), "--merge")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "step_000001" in proc.stdout
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "hf").config.model_type == "qwen2"


def test_an_adapter_of_the_tiny_base_is_refused_with_merge_as_the_way_out(run, in_process, tmp_path):
    proc = in_process("export_hf.py", "--run", str(run), "--output_dir", str(tmp_path / "hf"))
    assert proc.returncode == 1 and "--merge" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "hf").exists()


def test_push_to_hub_uploads_a_folder_that_loads(run, in_process, tmp_path, monkeypatch):
    from huggingface_hub import HfApi
    from transformers import AutoModelForCausalLM

    hub, repos = tmp_path / "hub", []

    def upload_folder(self, *, repo_id, folder_path, **kwargs):  # the hub's copy of the folder
        shutil.copytree(folder_path, hub / repo_id)
        return SimpleNamespace(commit_url=f"https://huggingface.co/{repo_id}/commit/1")

    monkeypatch.setattr(HfApi, "create_repo", lambda self, repo_id, **kwargs: repos.append(repo_id))
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    proc = in_process("export_hf.py", "--run", str(run), "--output_dir", str(tmp_path / "hf"), "--merge",
                      "--push_to_hub", "me/kevin-tiny")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert repos == ["me/kevin-tiny"] and "https://huggingface.co/me/kevin-tiny/commit/1" in proc.stdout
    assert json.loads((hub / "me/kevin-tiny/kevin_export.json").read_text())["weights"] == "full"
    AutoModelForCausalLM.from_pretrained(hub / "me/kevin-tiny")


def test_a_checkpoint_step_names_that_checkpoint_of_the_run():
    cfg = export_hf.Config(run="runs/x", checkpoint="12", output_dir="hf")
    assert export_hf.checkpoint_of(cfg) == Path("runs/x/checkpoints/step_000012")


def test_without_a_checkpoint_the_run_itself_is_exported():
    assert export_hf.checkpoint_of(export_hf.Config(run="runs/x", output_dir="hf")) == Path("runs/x")


def test_without_run_or_output_dir_the_tool_says_what_it_needs(in_process):
    proc = in_process("export_hf.py", "--merge")
    assert proc.returncode == 1 and "--run" in proc.stderr and "--output_dir" in proc.stderr
