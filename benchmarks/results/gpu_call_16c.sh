#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 16, call C): the launch cover again, on another machine; the host launch times; the sweep against do_bench.
# benchmarks/timing_modes.py --mode sweep (PyTorch operations of 2 us to 3 ms against do_bench, no build), then the
# precompiled header, the targets phases with SandboxConfig's default cover (200 us) and, on the same machine,
# with no cover (stop 15's window), then the sandbox GPU tests.
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc
O=/tmp/o; mkdir -p $O/s
timeout 100 python3 benchmarks/timing_modes.py --out $O/s/modes --mode sweep --sleep-us 200 > $O/s/modes.log 2>&1
timeout 110 python3 -c "
import time; t = time.time()
from kevin.sandbox import _pch
print('pch', _pch.ensure('/tmp/kc', 'cuda'), 'seconds', round(time.time() - t, 1))" > $O/s/pch.log 2>&1
timeout 130 python3 benchmarks/sandbox_gpu.py --out $O/s/cover --prefork on --workers 16 --phases warm,noise,dobench --cv-runs 10 > $O/s/bench_cover.log 2>&1
timeout 80 python3 benchmarks/sandbox_gpu.py --out $O/s/nocover --prefork on --workers 16 --phases noise,dobench --cv-runs 10 --launch-cover-us 0 > $O/s/bench_nocover.log 2>&1
timeout $((590 - SECONDS)) python3 -m pytest -m gpu tests/sandbox -v -p no:cacheprovider -p no:randomly > $O/s/tests.log 2>&1; echo "rc=$?" >> $O/s/tests.log
tar czf $OUT/run.tgz -C $O/s .
cat $O/s/modes/timing_modes_sweep.txt 2>/dev/null || tail -20 $O/s/modes.log
tail -1 $O/s/pch.log
python3 -c "
import json
for f in ('cover', 'nocover'):
    try:
        d = json.load(open('$O/s/%s/sandbox_gpu.json' % f)); n, b, w = d['timing_noise'], d['do_bench'], d.get('warm_evaluation', {})
        print(f, 'cv%', n['cv_percent'], 'over do_bench', b['ours_over_do_bench'], 'do_bench', round(b['do_bench_median_ms'], 4), 'torch', round(b['do_bench_torch_matmul_ms'], 4))
        print('  runtimes', [round(x, 4) for x in n['runtimes_ms']]); print('  launch p90', [None if x is None else round(x, 4) for x in n['launch_p90_ms']])
        print('  warm', w.get('baseline_ms'), w.get('overhead_beyond_work_seconds'), w.get('wall_seconds'))
    except Exception as e: print(f, repr(e))"
grep -E "passed|failed|rc=" $O/s/tests.log | tail -4
grep -E "^E |FAILED" $O/s/*.log | head -10 | cut -c1-300
echo total $SECONDS
