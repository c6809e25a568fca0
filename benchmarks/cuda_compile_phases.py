"""Where a CUDA candidate's compile goes: nvcc's phases for the unit the sandbox builds, and for lighter variants.

    python3 benchmarks/cuda_compile_phases.py --task builtin:GELU --cache-dir /tmp/kc --out OUT_DIR [--repeats 2]

It builds the task's ``fast`` corpus answer through the sandbox's ``load_inline`` (`extension.install`: the light
prelude in place of ``<torch/types.h>``), reads the nvcc command of the CUDA unit from its ``build.ninja``, and
runs that command again, one at a time, with ``--time`` (nvcc's per-phase milliseconds) on these units:

    as_built       the unit as the sandbox compiled it
    before         the same with the light prelude's factories from their own headers (which include ATen/Context.h)
                   and the candidate's ``#include <ATen/cuda/CUDAContext.h>`` kept: the sandbox's unit until
                   `extension.cuda_light_prelude`
    prelude_only   the light prelude and the CUDA headers, no candidate code: what the headers alone cost
    no_torch       the candidate's device code (`device_code`) after ``<cuda_runtime.h>`` alone: nvcc's floor

Writes ``OUT_DIR/cuda_compile_phases_<task>.json`` (wall seconds per run and nvcc's phases).
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
from kevin.data import corpus, tasks_from_spec  # noqa: E402
from kevin.sandbox.build import extension  # noqa: E402


def build(task_spec: str, cache_dir: str) -> Path:
    """Build the task's fast corpus answer through the sandbox's load_inline; its CUDA unit's build directory."""
    task = tasks_from_spec(task_spec)[0]
    answer = next(a for a in corpus.kernel_answers(task, "cuda") if a.kind == "fast")
    ext_root = os.path.join(cache_dir, "ext")
    extension.install(ext_root, "cuda")
    path = os.path.join(tempfile.mkdtemp(), "candidate.py")
    with open(path, "w") as f:
        f.write(answer.code)
    extension.import_candidate(path)
    dirs = [Path(p).parent for p in glob.glob(os.path.join(ext_root, "*", "cuda.cu"))]
    dirs = [d for d in dirs if (d / "cuda.cu").read_text().startswith(extension.LIGHT_MARK)]
    return max(dirs, key=lambda d: (d / "cuda.cu").stat().st_mtime)


def nvcc_command(build_dir: Path) -> list[str]:
    """The nvcc command line of ``cuda.cuda.o`` in ``build.ninja``, its ``$in`` and ``$out`` left as such."""
    text = (build_dir / "build.ninja").read_text()
    var = dict(re.findall(r"^(\w+) = (.*)$", text, re.M))
    cmd = re.search(r"^rule cuda_compile\n  depfile = .*\n  deps = .*\n  command = (.*)$", text, re.M)
    line = cmd.group(1) if cmd else "$nvcc $cuda_cflags -c $in -o $out $cuda_post_cflags"
    line = re.sub(r"--generate-dependencies-with-compile --dependency-output \$out\.d ", "", line)
    line = re.sub(r"\$(\w+)", lambda m: var.get(m.group(1), m.group(0)) if m.group(1) not in ("in", "out") else
                  m.group(0), line)
    return shlex.split(line)


def device_code(code: str) -> str:
    """The candidate's code before its first host function on tensors (its macros, device functions and kernels),
    its torch, ATen and c10 includes dropped; its ``__global__`` functions alone where that cut keeps none."""
    code = re.sub(r'^[ \t]*#[ \t]*include[ \t]*[<"](?:torch|ATen|c10)/[^\n]*$', "", code, flags=re.M)
    host = re.search(r"^[^\n#]*\b(?:torch|at)::Tensor\b", code, re.M)
    head = code[:host.start()] if host else code
    return head if "__global__" in head else "\n\n".join(re.findall(r"__global__ .*?\n}\n", code, re.S))


def variants(unit: str) -> dict[str, str]:
    head, _, rest = unit.partition("#include <cuda_runtime.h>")
    prelude = head + "#include <cuda_runtime.h>\n"
    kernels = device_code(rest)
    before = unit.replace(extension.cuda_light_prelude(), extension.LIGHT_PRELUDE, 1)
    before = before.replace("\n".join(extension.CUDA_CHECKS) + "\n", "", 1)
    before = before.replace(extension.CUDA_CONTEXT_LIGHT, "#include <ATen/cuda/CUDAContext.h>")
    return {"as_built": unit, "before": before, "prelude_only": prelude,
            "no_torch": "#include <cuda_runtime.h>\n#include <cstdint>\n" + kernels}


def run(cmd: list[str], source: str, work: Path, label: str) -> dict:
    src, obj, times = work / f"{label}.cu", work / f"{label}.o", work / f"{label}.csv"
    src.write_text(source)
    times.unlink(missing_ok=True)
    line = [str(src) if c == "$in" else str(obj) if c == "$out" else c for c in cmd] + ["--time", str(times)]
    t = time.perf_counter()
    done = subprocess.run(line, capture_output=True, text=True)
    wall = time.perf_counter() - t
    tools: dict[str, float] = {}
    if times.exists():
        for row in csv.reader(times.open()):
            if len(row) >= 8 and row[-1].strip() == "ms":
                phase = row[1].strip()
                tools[phase] = tools.get(phase, 0.0) + float(row[6]) / 1e3
    return {"wall_s": round(wall, 2), "rc": done.returncode, "phases_s": {k: round(v, 2) for k, v in tools.items()},
            "error": done.stderr[-800:] if done.returncode else ""}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="builtin:GELU")
    p.add_argument("--cache-dir", default=tempfile.mkdtemp())
    p.add_argument("--out", default=".")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    t = time.perf_counter()
    build_dir = build(args.task, args.cache_dir)
    print(f"built through the sandbox in {time.perf_counter() - t:.1f} s: {build_dir}", flush=True)
    cmd = nvcc_command(build_dir)
    unit = (build_dir / "cuda.cu").read_text()
    work = Path(tempfile.mkdtemp())
    results = {"task": args.task, "command": cmd, "runs": {}}
    for _ in range(args.repeats):
        for label, source in variants(unit).items():
            r = run(cmd, source, work, label)
            results["runs"].setdefault(label, []).append(r)
            print(label, json.dumps(r), flush=True)
    os.makedirs(args.out, exist_ok=True)
    slug = args.task.split(":")[-1]
    with open(os.path.join(args.out, f"cuda_compile_phases_{slug}.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
