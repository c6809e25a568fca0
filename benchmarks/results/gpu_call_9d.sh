#!/usr/bin/env bash
# One device call on nvidia-h200-x2 (stop 9, call D): golden data prefetched while candidates compile.
# The sandbox GPU tests, then evaluate_many with 1 worker and with 16 on both GPUs (zygote on).
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc KEVIN_TEST_CACHE_DIR=/tmp/kc
O=/tmp/o; mkdir -p $O/s
timeout 200 python3 -m pytest -m gpu tests/sandbox -v -p no:cacheprovider -p no:randomly > $O/s/gpu_tests.log 2>&1
echo "rc=$?" >> $O/s/gpu_tests.log
timeout 100 python3 benchmarks/sandbox_gpu.py --out $O/s/one --prefork on --workers 16 --n-single 1 --phases one > $O/s/bench_one.log 2>&1
timeout 150 python3 benchmarks/sandbox_gpu.py --out $O/s/many --prefork on --workers 16 --phases many > $O/s/bench_many.log 2>&1
tar czf "$OUT/all.tgz" -C $O .
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/s/gpu_tests.log | tail -12
grep -h "one_worker {\|many_workers {" $O/s/bench_one.log $O/s/bench_many.log | cut -c1-300
