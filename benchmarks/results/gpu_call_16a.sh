#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 16, call A): where the per-evaluation timing modes come from.
# The precompiled header, the targets phases (warm, noise over 10 evaluations, do_bench) on stop 15's code,
# then benchmarks/timing_modes.py (8 fresh processes, one ingredient of the timing loop at a time), then the
# sandbox GPU tests.
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc
O=/tmp/o; mkdir -p $O/s
timeout 110 python3 -c "
import time; t = time.time()
from kevin.sandbox import _pch
print('pch', _pch.ensure('/tmp/kc', 'cuda'), 'seconds', round(time.time() - t, 1))" > $O/s/pch.log 2>&1
timeout 130 python3 benchmarks/sandbox_gpu.py --out $O/s/targets --prefork on --workers 16 --phases warm,noise,dobench --cv-runs 10 > $O/s/bench_targets.log 2>&1
timeout 200 python3 benchmarks/timing_modes.py --out $O/s/modes --children 8 > $O/s/modes.log 2>&1
timeout $((590 - SECONDS)) python3 -m pytest -m gpu tests/sandbox -v -p no:cacheprovider -p no:randomly > $O/s/tests.log 2>&1; echo "rc=$?" >> $O/s/tests.log
cp $O/s/targets/sandbox_gpu.json $O/s/targets.json 2>/dev/null
tar czf $OUT/run.tgz -C $O/s .
tail -1 $O/s/pch.log
grep -E "^timing noise|^do_bench" $O/s/bench_targets.log | cut -c1-600
cat $O/s/modes/timing_modes.txt 2>/dev/null || tail -20 $O/s/modes.log
grep -E "passed|failed|rc=" $O/s/tests.log | tail -4
grep -E "^E " $O/s/*.log | head -10 | cut -c1-300
echo total $SECONDS
