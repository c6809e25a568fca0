#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 18, call A): the sandbox's CUDA changes of stop 17 that no GPU had run (call
# 17b was written and not run: no machine was lent). The precompiled header, the sandbox GPU tests (the new slow
# synchronize test among them), then the targets phases (10 evaluations) with the synchronize's wait judged by its
# difference from a second synchronize. The throughput phases of 17b are left out (#3 is blocked on the host's
# compile ceiling, measured in run 29).
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc
O=/tmp/o; mkdir -p $O/s
timeout 110 python3 -c "
import time; t = time.time()
from kevin.sandbox import _pch
print('pch', _pch.ensure('/tmp/kc', 'cuda'), 'seconds', round(time.time() - t, 1))" > $O/s/pch.log 2>&1
timeout 200 python3 -m pytest -m gpu tests/sandbox -v -p no:cacheprovider -p no:randomly > $O/s/tests.log 2>&1; echo "rc=$?" >> $O/s/tests.log
timeout $((560 - SECONDS)) python3 benchmarks/sandbox_gpu.py --out $O/s/targets --prefork on --workers 16 --phases warm,noise,dobench --cv-runs 10 > $O/s/bench_targets.log 2>&1
tar czf $OUT/run.tgz -C $O/s .
tail -1 $O/s/pch.log
grep -E "passed|failed|rc=" $O/s/tests.log | tail -3
grep -E "^E |FAILED" $O/s/*.log | head -10 | cut -c1-300
python3 -c "
import json
d = json.load(open('$O/s/targets/sandbox_gpu.json')); n, b, w = d['timing_noise'], d['do_bench'], d.get('warm_evaluation', {})
print('cv%', n['cv_percent'], 'over do_bench', b['ours_over_do_bench'], 'do_bench', round(b['do_bench_median_ms'], 4), 'torch', round(b['do_bench_torch_matmul_ms'], 4))
print('  runtimes', [round(x, 4) for x in n['runtimes_ms']]); print('  launch p90', [None if x is None else round(x, 4) for x in n['launch_p90_ms']], 'n_waited', n.get('n_waited'), 'n_late', n.get('n_late'))
print('  warm', w.get('runtime_ms'), w.get('baseline_ms'), w.get('overhead_beyond_work_seconds'), w.get('wall_seconds'))" 2>&1 | tail -4
echo total $SECONDS
