#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 12, call B): the sandbox's evaluate_many throughput in the steady state
# (--steady: each Sandbox first evaluates one already-built source, so the zygote's start and the golden data are
# out of the timed batch), 16 workers on 16 candidates, then 1 worker on 4 candidates (not 1: one candidate's
# time holds the start-up that 16 candidates share); then the sandbox GPU tests.
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc
O=/tmp/o; mkdir -p $O/s
timeout 110 python3 -c "
import time; t = time.time()
from kevin.sandbox import _pch
print('pch', _pch.ensure('/tmp/kc', 'cuda'), 'seconds', round(time.time() - t, 1))" > $O/s/pch.log 2>&1
timeout 170 python3 benchmarks/sandbox_gpu.py --out $O/s/many --prefork on --workers 16 --steady --phases many > $O/s/bench_many.log 2>&1
timeout 170 python3 benchmarks/sandbox_gpu.py --out $O/s/one --prefork on --workers 16 --n-single 4 --steady --phases one > $O/s/bench_one.log 2>&1
timeout $((590 - SECONDS)) python3 -m pytest -m gpu tests/sandbox -v -p no:cacheprovider -p no:randomly > $O/s/tests.log 2>&1; echo "rc=$?" >> $O/s/tests.log
cp $O/s/many/sandbox_gpu.json $OUT/many.json; cp $O/s/one/sandbox_gpu.json $OUT/one.json
tar czf "$OUT/all.tgz" -C $O .
tail -1 $O/s/pch.log
python3 -c "
import json
for f in ('many', 'one'):
    try: d = json.load(open('$O/s/%s/sandbox_gpu.json' % f)); v = [d[k] for k in d if k.startswith('evaluate_many')][0]; print(f, v['workers'], v['candidates'], v['wall_seconds'], v['candidates_per_second'], v['warm_up_seconds'], v['compile_seconds_median'], v['statuses'].count('correct'))
    except Exception as e: print(f, repr(e))"
grep -E "passed|failed|rc=" $O/s/tests.log | tail -4
