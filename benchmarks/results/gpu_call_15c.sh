#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 15, call C): call B's code with the timing loop's flush queued last before the start event and as large as do_bench's (256 MB); (light prelude, DeviceGate
# patience, int32 permutation indices). evaluate_many in the steady state: 16 workers on 16 candidates, 1 worker on 4,
# first the per-candidate overhead, timing noise and do_bench phases;
# then the sandbox GPU tests.
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc
O=/tmp/o; mkdir -p $O/s
timeout 110 python3 -c "
import time; t = time.time()
from kevin.sandbox import _pch
print('pch', _pch.ensure('/tmp/kc', 'cuda'), 'seconds', round(time.time() - t, 1))" > $O/s/pch.log 2>&1
timeout 80 python3 benchmarks/sandbox_gpu.py --out $O/s/targets --prefork on --workers 16 --phases warm,noise,dobench > $O/s/bench_targets.log 2>&1
timeout 100 python3 benchmarks/sandbox_gpu.py --out $O/s/many --prefork on --workers 16 --steady --phases many > $O/s/bench_many.log 2>&1
timeout 120 python3 benchmarks/sandbox_gpu.py --out $O/s/one --prefork on --workers 16 --n-single 4 --steady --phases one > $O/s/bench_one.log 2>&1
timeout $((590 - SECONDS)) python3 -m pytest -m gpu tests/sandbox -v -p no:cacheprovider -p no:randomly > $O/s/tests.log 2>&1; echo "rc=$?" >> $O/s/tests.log
for f in one many targets; do cp $O/s/$f/sandbox_gpu.json $O/s/$f.json 2>/dev/null; done
tar czf $OUT/run.tgz -C $O/s --exclude='*/sandbox_gpu.*' .  # one file back: the device returns at most 8
tail -1 $O/s/pch.log
python3 -c "
import json
for f in ('one', 'many'):
    try:
        d = json.load(open('$O/s/%s/sandbox_gpu.json' % f)); v = [d[k] for k in d if k.startswith('evaluate_many')][0]
        u = v['unit_seconds']; print(f, v['workers'], v['candidates'], v['wall_seconds'], v['candidates_per_second'], v['warm_up_seconds'], v['compile_seconds_median'], v['statuses'].count('correct'), v['preludes'], 'main.o', u.get('main.o'), 'cuda', u.get('cuda.cuda.o'))
    except Exception as e: print(f, repr(e))
try:
    d = json.load(open('$O/s/targets/sandbox_gpu.json'))
    w, n, b = d.get('warm_evaluation', {}), d.get('timing_noise', {}), d.get('do_bench', {})
    print('warm', w.get('wall_seconds'), w.get('overhead_beyond_work_seconds'), 'cv%', n.get('cv_percent'), n.get('runtimes_ms'), 'do_bench', {k: b.get(k) for k in list(b)[:6]})
except Exception as e: print('targets', repr(e))"
grep -E "passed|failed|rc=" $O/s/tests.log | tail -4
grep -E "^E " $O/s/*.log | head -10 | cut -c1-300
echo total $SECONDS
