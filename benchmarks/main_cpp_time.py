"""Where the compile of a candidate's binding unit (``main.cpp``) goes, with and without the precompiled header.

Builds the sandbox's PCH of ``<torch/extension.h>`` (:mod:`kevin.sandbox._pch`, CPU flags) in ``--pch-root``, then
compiles two units with the exact flags ``load_inline`` gives ``main.cpp``: ``bind`` (a declaration and its pybind11
binding, as load_inline writes it) and ``header`` (the header and a trivial function), each with and without the PCH,
and once more with ``-ftime-report`` (the PCH, ``header``). Prints wall seconds and GCC's largest phases.

    python benchmarks/main_cpp_time.py [--pch-root DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, kevin not installed

UNITS = {
    "bind": ('#include <torch/extension.h>\ntorch::Tensor fwd(torch::Tensor a, torch::Tensor b);\n'
             'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\nm.def("fwd", torch::wrap_pybind_function(fwd), "fwd");\n}\n'),
    "header": "#include <torch/extension.h>\nint f() { return 1; }\n",
}


def main() -> None:
    from kevin.sandbox import _pch

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pch-root", default=os.path.join(tempfile.gettempdir(), "kevin-main-cpp-pch"))
    a = p.parse_args()
    flags = _pch.main_cpp_flags(with_cuda=False)
    t0 = time.monotonic()
    pch = _pch.build(a.pch_root, flags)
    print(f"pch {pch} ready after {time.monotonic() - t0:.1f} s")
    if pch is None:
        raise SystemExit("no precompiled header (not GCC?)")
    with tempfile.TemporaryDirectory() as tmp:
        def compile_(name: str, use_pch: bool, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
            src = os.path.join(tmp, f"{name}.cpp")
            Path(src).write_text(UNITS[name])
            env = {**os.environ, **({"CPATH": pch} if use_pch else {})}
            argv = ["c++", *flags, "-DTORCH_EXTENSION_NAME=x", *extra, "-c", src, "-o", os.path.join(tmp, "x.o")]
            t = time.monotonic()
            run = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
            print(f"{name:6s} {'with' if use_pch else 'without'} PCH: {time.monotonic() - t:5.1f} s", flush=True)
            return run

        for name in UNITS:
            for use_pch in (True, False):
                compile_(name, use_pch)
        report = compile_("header", True, ("-ftime-report",)).stderr
        symbols = subprocess.run(["nm", os.path.join(tmp, "x.o")], capture_output=True, text=True).stdout.count("\n")
    phases = [(float(m.group(2)), m.group(1).strip()) for m in
              re.finditer(r"^ ([^:\n]+?)\s*:.*?([\d.]+) \(\s*\d+%\)\s+[\d.]+[kMG]?\s+\(\s*\d+%\)\s*$", report, re.M)]
    total = re.search(r"TOTAL\s*:\s*[\d.]+\s+[\d.]+\s+([\d.]+)", report)
    print(f"-ftime-report (header, with PCH): wall {total.group(1) if total else '?'} s; largest phases:")
    for wall, name in sorted(phases, reverse=True)[:5]:
        print(f"  {wall:6.2f} s  {name}")
    print(f"symbols in the header-only object: {symbols}")


if __name__ == "__main__":
    main()
