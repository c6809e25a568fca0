#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 16, call B): the launch cover.
# benchmarks/timing_modes.py --mode interleave (window variants call by call, torch.matmul, no build), then the
# precompiled header, the targets phases with SandboxConfig's default cover (200 us) and, on the same machine,
# with no cover (stop 15's window), then the sandbox GPU tests.
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc
O=/tmp/o; mkdir -p $O/s
timeout 100 python3 benchmarks/timing_modes.py --out $O/s/modes --mode interleave --children 6 --sleep-us 200 > $O/s/modes.log 2>&1
timeout 110 python3 -c "
import time; t = time.time()
from kevin.sandbox import _pch
print('pch', _pch.ensure('/tmp/kc', 'cuda'), 'seconds', round(time.time() - t, 1))" > $O/s/pch.log 2>&1
timeout 130 python3 benchmarks/sandbox_gpu.py --out $O/s/cover --prefork on --workers 16 --phases warm,noise,dobench --cv-runs 10 > $O/s/bench_cover.log 2>&1
timeout 80 python3 benchmarks/sandbox_gpu.py --out $O/s/nocover --prefork on --workers 16 --phases noise,dobench --cv-runs 10 --launch-cover-us 0 > $O/s/bench_nocover.log 2>&1
timeout $((590 - SECONDS)) python3 -m pytest -m gpu tests/sandbox -v -p no:cacheprovider -p no:randomly > $O/s/tests.log 2>&1; echo "rc=$?" >> $O/s/tests.log
tar czf $OUT/run.tgz -C $O/s .
cat $O/s/modes/timing_modes_interleave.txt 2>/dev/null || tail -20 $O/s/modes.log
tail -1 $O/s/pch.log
for f in cover nocover; do echo "== $f"; grep -E "^warm evaluation|^timing noise|^do_bench" $O/s/bench_$f.log | cut -c1-700; done
grep -E "passed|failed|rc=" $O/s/tests.log | tail -4
grep -E "^E |FAILED" $O/s/*.log | head -10 | cut -c1-300
echo total $SECONDS
