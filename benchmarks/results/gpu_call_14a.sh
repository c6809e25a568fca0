#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 14, call A): the object cache for main.cpp (kevin/sandbox/_objcache.py).
# evaluate_many in the steady state (--steady), 1 worker on 4 candidates, then 16 workers on 16, with the candidates'
# bindings shared (one main.cpp: compiled once); then 16 workers on 16 with distinct bindings (each its own
# extension name, so nothing is shared: the worst case); then the object-cache tests on this host's toolchain and
# the sandbox GPU tests.
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc
O=/tmp/o; mkdir -p $O/s
timeout 110 python3 -c "
import time; t = time.time()
from kevin.sandbox import _pch
print('pch', _pch.ensure('/tmp/kc', 'cuda'), 'seconds', round(time.time() - t, 1))" > $O/s/pch.log 2>&1
timeout 170 python3 benchmarks/sandbox_gpu.py --out $O/s/one --prefork on --workers 16 --n-single 4 --steady --phases one > $O/s/bench_one.log 2>&1
timeout 100 python3 benchmarks/sandbox_gpu.py --out $O/s/many --prefork on --workers 16 --steady --phases many > $O/s/bench_many.log 2>&1
timeout 100 python3 benchmarks/sandbox_gpu.py --out $O/s/distinct --prefork on --workers 16 --steady --phases many --bindings distinct > $O/s/bench_distinct.log 2>&1
timeout 90 python3 -m pytest tests/sandbox/test_objcache.py tests/sandbox/test_pch.py -k "objcache or object_cache or shim or compile or served or pass or unit" -v -p no:cacheprovider -p no:randomly > $O/s/objcache_tests.log 2>&1; echo "rc=$?" >> $O/s/objcache_tests.log
timeout $((590 - SECONDS)) python3 -m pytest -m gpu tests/sandbox -v -p no:cacheprovider -p no:randomly > $O/s/tests.log 2>&1; echo "rc=$?" >> $O/s/tests.log
for f in one many distinct; do cp $O/s/$f/sandbox_gpu.json $OUT/$f.json 2>/dev/null; done
cp $O/s/*.log $OUT/
tail -1 $O/s/pch.log
python3 -c "
import json
for f in ('one', 'many', 'distinct'):
    try:
        d = json.load(open('$O/s/%s/sandbox_gpu.json' % f)); v = [d[k] for k in d if k.startswith('evaluate_many')][0]
        u = v['unit_seconds']; print(f, v['workers'], v['candidates'], v['wall_seconds'], v['candidates_per_second'], v['warm_up_seconds'], v['compile_seconds_median'], v['statuses'].count('correct'), 'main.o', u.get('main.o'), 'cuda', u.get('cuda.cuda.o'))
    except Exception as e: print(f, repr(e))"
grep -E "passed|failed|rc=" $O/s/objcache_tests.log $O/s/tests.log | tail -6
grep -E "^E " $O/s/*.log | head -10 | cut -c1-300
