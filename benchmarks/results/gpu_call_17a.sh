#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 17, call A): the final timing code of stop 16 (never run on a GPU: the
# waited/late paths, the caps) and the symbol check of the runtime's streams. The precompiled header, the sandbox
# GPU tests, the targets phases (warm, noise over 10 evaluations, do_bench), the compile scaling of one CUDA unit
# (lone, then 16 at once: the host's ceiling on the throughput ratio), then the candidate-process setup steps.
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc
O=/tmp/o; mkdir -p $O/s
nproc > $O/s/host.txt; lscpu >> $O/s/host.txt 2>&1
timeout 110 python3 -c "
import time; t = time.time()
from kevin.sandbox import _pch
print('pch', _pch.ensure('/tmp/kc', 'cuda'), 'seconds', round(time.time() - t, 1))" > $O/s/pch.log 2>&1
timeout 150 python3 -m pytest -m gpu tests/sandbox -v -p no:cacheprovider -p no:randomly > $O/s/tests.log 2>&1; echo "rc=$?" >> $O/s/tests.log
timeout 130 python3 benchmarks/sandbox_gpu.py --out $O/s/targets --prefork on --workers 16 --phases warm,noise,dobench --cv-runs 10 > $O/s/bench_targets.log 2>&1
timeout 110 python3 benchmarks/compile_scaling.py --cache-dir /tmp/kc --out $O/s/scaling --parallel 16 --lone 2 > $O/s/scaling.log 2>&1
timeout $((575 - SECONDS)) python3 benchmarks/timing_modes.py --out $O/s/modes --mode setup > $O/s/modes.log 2>&1
tar czf $OUT/run.tgz -C $O/s .
tail -1 $O/s/pch.log
grep -E "passed|failed|rc=" $O/s/tests.log | tail -3
grep -E "^E |FAILED" $O/s/*.log | head -10 | cut -c1-300
python3 -c "
import json
d = json.load(open('$O/s/targets/sandbox_gpu.json')); n, b, w = d['timing_noise'], d['do_bench'], d.get('warm_evaluation', {})
print('cv%', n['cv_percent'], 'over do_bench', b['ours_over_do_bench'], 'do_bench', round(b['do_bench_median_ms'], 4), 'torch', round(b['do_bench_torch_matmul_ms'], 4))
print('  runtimes', [round(x, 4) for x in n['runtimes_ms']]); print('  launch p90', [None if x is None else round(x, 4) for x in n['launch_p90_ms']], 'n_tail', n['n_tail'], 'n_waited', n.get('n_waited'), 'n_late', n.get('n_late'))
print('  warm', w.get('runtime_ms'), w.get('baseline_ms'), w.get('overhead_beyond_work_seconds'), w.get('wall_seconds'))" 2>&1 | tail -4
tail -3 $O/s/scaling.log
tail -7 $O/s/modes.log
echo total $SECONDS
