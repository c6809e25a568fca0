#!/usr/bin/env bash
# One device call on nvidia-h200-x2 (stop 10, call D): the parent's comparison in fewer passes (call C's timelines
# showed 2-5 s per candidate between its outputs and the comparison's end with 16 at once). PCH build, then
# evaluate_many with 1 worker and with 16.
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc
O=/tmp/o; mkdir -p $O/s
python3 -c "
import time; t = time.time()
from kevin.sandbox import _pch
print('pch', _pch.ensure('/tmp/kc', 'cuda'), 'seconds', round(time.time() - t, 1))" > $O/s/pch.log 2>&1
timeout 100 python3 benchmarks/sandbox_gpu.py --out $O/s/one --prefork on --workers 16 --n-single 1 --phases one > $O/s/bench_one.log 2>&1
timeout 130 python3 benchmarks/sandbox_gpu.py --out $O/s/many --prefork on --workers 16 --phases many > $O/s/bench_many.log 2>&1
tar czf "$OUT/all.tgz" -C $O .
tail -1 $O/s/pch.log
grep -h "one_worker {\|many_workers {" $O/s/bench_one.log $O/s/bench_many.log | cut -c1-200
