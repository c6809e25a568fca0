#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 17, call B; written and NOT run: no machine was lent after call A): the synchronize's wait judged by its difference from a second
# synchronize (run 29: a fixed limit sent 57-67 of 100 samples of two evaluations to the last event). The
# precompiled header, the sandbox GPU tests, the targets phases (10 evaluations), evaluate_many in the steady state
# (16 workers on 16 candidates, then 1 worker on 4), then the compile scaling again (3 lone compiles).
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc
O=/tmp/o; mkdir -p $O/s
timeout 110 python3 -c "
import time; t = time.time()
from kevin.sandbox import _pch
print('pch', _pch.ensure('/tmp/kc', 'cuda'), 'seconds', round(time.time() - t, 1))" > $O/s/pch.log 2>&1
timeout 150 python3 -m pytest -m gpu tests/sandbox -v -p no:cacheprovider -p no:randomly > $O/s/tests.log 2>&1; echo "rc=$?" >> $O/s/tests.log
timeout 120 python3 benchmarks/sandbox_gpu.py --out $O/s/targets --prefork on --workers 16 --phases warm,noise,dobench --cv-runs 10 > $O/s/bench_targets.log 2>&1
timeout $((500 - SECONDS)) python3 benchmarks/sandbox_gpu.py --out $O/s/many --prefork on --workers 16 --steady --phases many > $O/s/bench_many.log 2>&1
timeout $((560 - SECONDS)) python3 benchmarks/sandbox_gpu.py --out $O/s/one --prefork on --workers 16 --n-single 4 --steady --phases one > $O/s/bench_one.log 2>&1
timeout $((580 - SECONDS)) python3 benchmarks/compile_scaling.py --cache-dir /tmp/kc --out $O/s/scaling --parallel 16 --lone 3 > $O/s/scaling.log 2>&1
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
python3 -c "
import json
for f in ('one', 'many'):
    try:
        d = json.load(open('$O/s/%s/sandbox_gpu.json' % f)); v = [d[k] for k in d if k.startswith('evaluate_many')][0]
        u = v['unit_seconds']; print(f, v['workers'], v['candidates'], v['wall_seconds'], v['candidates_per_second'], v['compile_seconds_median'], v['statuses'].count('correct'), 'cuda', u.get('cuda.cuda.o'))
    except Exception as e: print(f, repr(e))" 2>&1 | tail -3
tail -3 $O/s/scaling.log
echo total $SECONDS
