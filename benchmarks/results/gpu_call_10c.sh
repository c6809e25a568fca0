#!/usr/bin/env bash
# One device call on nvidia-h200-x2 (stop 10, call C): the sandbox with the device gate (correctness runs share a
# GPU, timings alone) and the precompiled header for main.cpp. PCH build (timed), the GPU tests, then
# evaluate_many with 1 worker and with 16 (parallel checks on), then 16 with parallel checks off if time is left.
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc KEVIN_TEST_CACHE_DIR=/tmp/kc
O=/tmp/o; mkdir -p $O/s
python3 -c "
import time; t = time.time()
from kevin.sandbox import _pch
print('pch', _pch.ensure('/tmp/kc', 'cuda'), 'seconds', round(time.time() - t, 1))" > $O/s/pch.log 2>&1
timeout 200 python3 -m pytest -m gpu tests/sandbox -v -p no:cacheprovider -p no:randomly > $O/s/gpu_tests.log 2>&1
echo "rc=$?" >> $O/s/gpu_tests.log
timeout 100 python3 benchmarks/sandbox_gpu.py --out $O/s/one --prefork on --workers 16 --n-single 1 --phases one > $O/s/bench_one.log 2>&1
timeout 130 python3 benchmarks/sandbox_gpu.py --out $O/s/many --prefork on --workers 16 --phases many > $O/s/bench_many.log 2>&1
left=$((560 - SECONDS)); [ $left -gt 60 ] && timeout $left python3 benchmarks/sandbox_gpu.py --out $O/s/many_off --prefork on \
  --workers 16 --phases many --parallel-checks off > $O/s/bench_many_off.log 2>&1
tar czf "$OUT/all.tgz" -C $O .
cat $O/s/pch.log | tail -2
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/s/gpu_tests.log | tail -12
grep -h "one_worker {\|many_workers {" $O/s/bench_one.log $O/s/bench_many.log $O/s/bench_many_off.log 2>/dev/null | cut -c1-330
