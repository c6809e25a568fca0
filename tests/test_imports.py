import subprocess
import sys

HEAVY = ("transformers", "peft", "accelerate", "datasets", "vllm")


def test_pure_core_and_rewards_import_only_torch_and_the_standard_library():
    code = (
        "import sys, kevin.core, kevin.rewards, kevin.core.types, kevin.core.loss, kevin.core.advantages, "
        "kevin.core.split; print(','.join(m for m in %r if m in sys.modules))" % (HEAVY,)
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"heavy libraries imported by the pure core: {out.stdout.strip()}"
