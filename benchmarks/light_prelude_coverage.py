"""Which CUDA corpus answers the sandbox's light build covers, and whether their light units compile: nvcc -c only.

    python benchmarks/light_prelude_coverage.py --tasks "builtin:GELU,Matmul_LayerNorm_GELU" [--jobs 2]

For each first-turn corpus answer of the tasks, its ``load_inline`` arguments are captured (the call is stopped before
it builds), turned into the light build's (`extension.light_arguments`), and the CUDA unit is compiled with
``nvcc -c`` against the installed torch's headers, with torch's usual CUDA flags (not the sandbox's exact command:
an answer's own ``extra_cuda_cflags`` and the extension's defines are left out). Prints, per answer, whether it got the lighter prelude (the
factories without their headers' includes) or the factories' own headers, nvcc's exit code and seconds. Runs on a
machine without a GPU (the CPU wheel lacks one CMake-generated c10 header, stubbed here); a source that includes
``<ATen/cuda/CUDAContext.h>`` and keeps it needs the cuBLAS and cuSPARSE headers, which such a machine may lack.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import inspect
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
from kevin.data import corpus, tasks_from_spec  # noqa: E402
from kevin.sandbox.build import extension  # noqa: E402

FLAGS = ["-c", "-std=c++17", "-arch=sm_90", "--expt-relaxed-constexpr", "-O3", "-D__CUDA_NO_HALF_OPERATORS__",
         "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__"]


class _Captured(Exception):
    """Raised by the stand-in ``load_inline`` once it has the call's arguments."""


def captured_arguments(code: str) -> dict | None:
    """The bound ``load_inline`` arguments of the first call ``code`` makes; None when it makes none."""
    from torch.utils import cpp_extension as ce

    signature, seen, original = inspect.signature(ce.load_inline), [], ce.load_inline

    def stand_in(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        seen.append(dict(bound.arguments))
        raise _Captured

    ce.load_inline = stand_in
    try:
        exec(compile(code, "candidate.py", "exec"), {"__name__": "candidate"})
    except _Captured:
        pass
    except Exception as exc:  # noqa: BLE001 - an answer that fails before its build (none should)
        print(f"  the answer failed before its build: {type(exc).__name__}: {exc}", flush=True)
    finally:
        ce.load_inline = original
    return seen[0] if seen else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="builtin", help='"builtin" or "builtin:<name>,..."')
    parser.add_argument("--jobs", type=int, default=2, help="nvcc processes at once")
    args = parser.parse_args()
    from torch.utils import cpp_extension as ce

    if shutil.which("nvcc") is None:
        sys.exit("needs nvcc on PATH")
    with tempfile.TemporaryDirectory(prefix="light_coverage_") as tmp:
        report(args, Path(tmp), ce.include_paths())


def report(args: argparse.Namespace, work: Path, include_paths: list[str]) -> None:
    """Capture, compile in ``work`` and print each answer's light unit."""
    stub = work / "stub" / "c10" / "cuda" / "impl"
    stub.mkdir(parents=True)
    (stub / "cuda_cmake_macros.h").write_text("#pragma once\n")
    includes = [f"-I{work / 'stub'}"] + [f"-I{p}" for p in include_paths]
    units = []
    for task in tasks_from_spec(args.tasks):
        for answer in corpus.kernel_answers(task, "cuda"):
            arguments = captured_arguments(answer.code) if answer.code else None
            if arguments is None:
                continue
            arguments["cuda_sources"] = extension.drop_extension_header(arguments["cuda_sources"])
            light = extension.light_arguments(arguments)
            if light is None:
                print(f"{task.name:35s} {answer.kind:16s} no light build", flush=True)
                continue
            lighter = light["cuda_sources"][0] != extension.LIGHT_PRELUDE
            units.append((task.name, answer.kind, lighter, "\n".join(light["cuda_sources"])))

    def compile_unit(i: int) -> tuple[int, float, str]:
        path = work / f"unit{i}.cu"
        path.write_text(units[i][3])
        start = time.monotonic()
        done = subprocess.run(["nvcc", *FLAGS, *includes, str(path), "-o", str(path.with_suffix(".o"))],
                              capture_output=True, text=True)
        return done.returncode, time.monotonic() - start, done.stderr

    print(f"{len(units)} light units", flush=True)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for (name, kind, lighter, _), (rc, seconds, err) in zip(units, pool.map(compile_unit, range(len(units)))):
            prelude = "lighter" if lighter else "factories' own headers"
            print(f"{name:35s} {kind:16s} {prelude:22s} rc={rc} {seconds:.1f} s", flush=True)
            if rc:
                print("  " + next((line for line in err.splitlines() if "error" in line), err[-200:]), flush=True)


if __name__ == "__main__":
    main()
