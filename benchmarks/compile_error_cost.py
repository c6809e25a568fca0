"""What one CPU compile error costs the sandbox's build path: a kernel with a misspelt name, built through the
installed ``load_inline`` (split build, then the whole build that decides the verdict), each try in a new process as
a candidate would, with the precompiled headers built first.

    python benchmarks/compile_error_cost.py --cache-dir /tmp/kc [--tries 3] [--fatal off]

``--fatal off`` builds the whole call as it was before the first-error stop, for the comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

KERNEL = r"""#include <torch/extension.h>
torch::Tensor scale(torch::Tensor x, double a) {
    auto y = torch::empty_like(x);
    const float* src = x.data_ptr<float>();
    float* dst = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) dts[i] = (float)(a * src[i] + SALT);
    return y;
}
"""

ONE_BUILD = """
import os, sys, time
sys.path.insert(0, sys.argv[3])
from torch.utils import cpp_extension as ce
from kevin.sandbox.build import extension
cache, fatal = sys.argv[1], sys.argv[2] == "on"
if not fatal:
    extension.FATAL_ERRORS = "-Wno-unused"  # a flag that stops nothing: the whole build runs to the end of its unit
extension.install(os.path.join(cache, "ext"), "cpu", pch_root=os.path.join(cache, "pch"),
                  obj_root=os.path.join(cache, "obj"))
t = time.perf_counter()
try:
    ce.load_inline(name="typo", cpp_sources=sys.stdin.read(), functions=["scale"], extra_cflags=["-O3"])
    errors = 0
except extension.BuildError as exc:
    errors = exc.log.count(": error: ")
print(time.perf_counter() - t, errors)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument("--fatal", choices=("on", "off"), default="on")
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    from kevin.sandbox.build import pch

    pch.ensure(args.cache_dir, "cpu", variants=(("-O3",),))
    seconds = []
    for _ in range(args.tries):
        source = KERNEL.replace("SALT", f"{uuid.uuid4().int % 1000}.0f")  # a new program each try: no marker
        t = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", ONE_BUILD, args.cache_dir, args.fatal, ROOT], input=source,
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            sys.exit(done.stderr[-3000:])
        build_s, errors = done.stdout.split()
        seconds.append({"build_s": round(float(build_s), 3), "process_s": round(time.perf_counter() - t, 3),
                        "errors_reported": int(errors)})
        print(json.dumps(seconds[-1]), flush=True)


if __name__ == "__main__":
    main()
