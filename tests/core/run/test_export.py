"""`export_pretrained`: a run's checkpoint as save_pretrained output that transformers, peft and `load_model` read back
with the trained model's logits; what it refuses; `push_to_hub` against a fake hub.

The runs are written directly (a config.json and checkpoints of the tiny model's trainable weights, each perturbed by
seeded noise), so every export has trained weights unlike the base's, LoRA's B included, without training.
"""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kevin.core.policy.models import load_model
from kevin.core.run.checkpoint import checkpoint_path, save_checkpoint
from kevin.core.run.export import EXPORT_FILE, ExportError, adapter_base, export_pretrained, push_to_hub
from kevin.core.run.rundir import RunDir

CPU = torch.device("cpu")
IDS = torch.tensor([[5, 17, 300, 42, 9, 800, 3]])  # any ids of the tiny vocabulary (890 entries)


def write_run(path: Path, model: str, *, lora: bool, steps=(3, 5)) -> Path:
    """A run directory on ``model`` with one checkpoint per step, each of the trainable weights plus noise."""
    for step in steps:
        net, _ = load_model(model, device=CPU, lora_rank=4 if lora else 0)
        torch.manual_seed(step)
        weights = {n: p.detach() + 0.05 * torch.randn_like(p) for n, p in net.named_parameters() if p.requires_grad}
        save_checkpoint(checkpoint_path(path / "checkpoints", step), {"model": weights}, meta={"step": step})
    config = {"model": model, "lora": lora, "lora_rank": 4, "bf16": False, "seed": 0}
    (path / "config.json").write_text(json.dumps(config))
    return path


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


def trained_logits(run: Path, checkpoint: str = "step_000005") -> torch.Tensor:
    model, _ = RunDir(run).trained_model(run / "checkpoints" / checkpoint, device=CPU)
    return logits(model)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The runs every test reads: a full fine-tune and a LoRA run of the tiny model, and a LoRA run on a local
    from_pretrained directory (the tiny model saved), whose adapter can name its base."""
    root = tmp_path_factory.mktemp("runs")
    base, tokenizer = load_model("tiny", device=CPU)
    base.save_pretrained(root / "base")
    tokenizer.save_pretrained(root / "base")
    return SimpleNamespace(full=write_run(root / "full", "tiny", lora=False),
                           lora=write_run(root / "lora", "tiny", lora=True),
                           local_lora=write_run(root / "local_lora", str(root / "base"), lora=True),
                           base=root / "base")


@pytest.mark.parametrize("name", ["full", "lora"])
def test_full_weights_reload_with_the_trained_models_logits(runs, name, tmp_path):
    from transformers import AutoModelForCausalLM

    out = export_pretrained(getattr(runs, name), tmp_path / "out", merge=True)
    # the very fp32 weights trained_model holds, through the same Qwen2 forward on the same CPU: equal bit for bit
    assert torch.equal(logits(AutoModelForCausalLM.from_pretrained(out)), trained_logits(getattr(runs, name)))


def test_an_adapter_reloads_through_load_model_with_the_merged_logits(runs, tmp_path):
    out = export_pretrained(runs.local_lora, tmp_path / "out")
    model, _ = load_model(str(out), device=CPU)
    # x W + (x A) B rounds otherwise than x (W + A B) does in fp32: equal within rounding, not bit for bit
    torch.testing.assert_close(logits(model), trained_logits(runs.local_lora), rtol=0, atol=1e-5)


def test_peft_loads_the_adapter_as_load_model_does(runs, tmp_path):
    from peft import AutoPeftModelForCausalLM

    out = export_pretrained(runs.local_lora, tmp_path / "out")
    model, _ = load_model(str(out), device=CPU)
    assert torch.equal(logits(AutoPeftModelForCausalLM.from_pretrained(out)), logits(model))


def test_the_adapter_holds_no_base_weights(runs, tmp_path):
    out = export_pretrained(runs.local_lora, tmp_path / "out")
    assert not (out / "model.safetensors").exists() and (out / "adapter_model.safetensors").is_file()
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(runs.base)


def test_an_adapter_of_a_base_kevin_builds_is_refused_with_merge_as_the_way_out(runs, tmp_path):
    with pytest.raises(ExportError, match="--merge"):
        export_pretrained(runs.lora, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_adapter_base_names_no_model_kevin_builds():
    assert [adapter_base(n) for n in ("tiny", "random:qwen2.5-1.5b", "starter", "starter:cpu:small")] == [None] * 4


def test_adapter_base_keeps_a_hub_id_and_makes_a_local_directory_absolute(tmp_path, monkeypatch):
    (tmp_path / "models" / "base").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert adapter_base("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"
    assert adapter_base("models/base") == str(tmp_path / "models" / "base")


def test_the_tokenizer_keeps_its_chat_template(runs, tmp_path):
    from transformers import PreTrainedTokenizerFast

    out = export_pretrained(runs.full, tmp_path / "out", merge=True)
    _, tokenizer = load_model("tiny", device=CPU)
    messages = [{"role": "user", "content": "Write ModelNew for torch.relu(x)."}]
    again = PreTrainedTokenizerFast.from_pretrained(out)
    assert again.apply_chat_template(messages, add_generation_prompt=True) == \
        tokenizer.apply_chat_template(messages, add_generation_prompt=True)


def test_the_record_names_the_run_the_checkpoint_its_step_and_the_form(runs, tmp_path):
    out = export_pretrained(runs.local_lora / "checkpoints" / "step_000003", tmp_path / "out")
    record = json.loads((out / EXPORT_FILE).read_text())
    assert record == {"run": str(runs.local_lora), "checkpoint": "step_000003", "step": 3, "model": str(runs.base),
                      "lora": True, "weights": "adapter"}


def test_a_run_directory_exports_its_latest_checkpoint(runs, tmp_path):
    out = export_pretrained(runs.full, tmp_path / "out")
    assert json.loads((out / EXPORT_FILE).read_text())["step"] == 5


def test_a_directory_that_is_not_a_run_is_refused(tmp_path):
    with pytest.raises(ExportError, match="neither a training run"):
        export_pretrained(tmp_path, tmp_path / "out")


def test_an_output_directory_with_files_is_refused_without_overwrite(runs, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="--overwrite"):
        export_pretrained(runs.full, tmp_path / "out")
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"


def test_overwrite_replaces_what_the_output_directory_held(runs, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    out = export_pretrained(runs.full, tmp_path / "out", overwrite=True)
    assert not (out / "notes.txt").exists() and (out / "model.safetensors").is_file()


def test_the_run_directory_is_refused_as_output_even_with_overwrite(runs):
    with pytest.raises(ExportError, match="holds the run"):
        export_pretrained(runs.full, runs.full, overwrite=True)
    assert (runs.full / "config.json").is_file()


def test_a_failed_export_leaves_neither_output_nor_scratch(runs, tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(RunDir, "trained_model", fail)
    with pytest.raises(RuntimeError):
        export_pretrained(runs.full, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_push_creates_the_repository_and_uploads_the_folder(tmp_path, monkeypatch):
    from huggingface_hub import HfApi

    calls = []
    monkeypatch.setattr(HfApi, "create_repo", lambda self, repo_id, **kw: calls.append(("create", repo_id, kw)))
    monkeypatch.setattr(HfApi, "upload_folder", lambda self, **kw: calls.append(("upload", kw)) or
                        SimpleNamespace(commit_url="https://huggingface.co/me/m/commit/1"))
    (tmp_path / EXPORT_FILE).write_text(json.dumps({"run": "/r/kevin-7b", "checkpoint": "step_000040",
                                                    "weights": "full"}))
    assert push_to_hub(tmp_path, "me/m") == "https://huggingface.co/me/m/commit/1"
    assert calls == [("create", "me/m", {"exist_ok": True}),
                     ("upload", {"repo_id": "me/m", "folder_path": str(tmp_path),
                                 "commit_message": "Export kevin-7b step_000040 (full weights)"})]


def test_load_model_reads_an_exported_tiny_models_own_tokenizer(runs, tmp_path):
    out = export_pretrained(runs.full, tmp_path / "out", merge=True)
    _, exported = load_model(str(out), device=CPU)
    _, own = load_model("tiny", device=CPU)
    text = "__global__ void relu_kernel(const float* x, float* y, int n) { y[i] = fmaxf(x[i], 0.f); }"
    assert exported(text)["input_ids"] == own(text)["input_ids"]  # AutoTokenizer would split it as Qwen2 does
