#!/usr/bin/env bash
# One device call on nvidia-h200-x2 (stop 11, call D): main.cpp's flags now come from torch's own ninja writer.
# The PCH tests on this host's torch, the PCH build, then evaluate_many with 1 worker and with 16 (ninja's seconds
# per unit show whether main.o used the PCH).
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc
O=/tmp/o; mkdir -p $O/s
timeout 110 python3 -c "
import time; t = time.time()
from kevin.sandbox import _pch
print('flags', _pch.main_cpp_flags(with_cuda=True))
print('pch', _pch.ensure('/tmp/kc', 'cuda'), 'seconds', round(time.time() - t, 1))" > $O/s/pch.log 2>&1
timeout 90 python3 benchmarks/sandbox_gpu.py --out $O/s/one --prefork on --workers 16 --n-single 1 --phases one > $O/s/bench_one.log 2>&1
timeout 100 python3 benchmarks/sandbox_gpu.py --out $O/s/many --prefork on --workers 16 --phases many > $O/s/bench_many.log 2>&1
timeout $((440 - SECONDS)) python3 -m pytest tests/sandbox/test_pch.py -q -p no:cacheprovider -p no:randomly > $O/s/test_pch.log 2>&1; echo "rc=$?" >> $O/s/test_pch.log
tar czf "$OUT/all.tgz" -C $O .
cut -c1-300 $O/s/pch.log
grep -h "one_worker {\|many_workers {" $O/s/bench_one.log $O/s/bench_many.log | cut -c1-200
python3 -c "
import json
for f in ('one', 'many'):
    try: d = json.load(open('$O/s/%s/sandbox_gpu.json' % f)); v = [d[k] for k in d if k.startswith('evaluate_many')][0]; print(f, v['wall_seconds'], v['unit_seconds'])
    except Exception as e: print(f, e)"
tail -3 $O/s/test_pch.log
