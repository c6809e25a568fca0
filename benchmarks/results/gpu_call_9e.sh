#!/usr/bin/env bash
# One device call on nvidia-h200-x2 (stop 9, call E): the final code (Kineto op profiler restored). Warm
# evaluation, noise and do_bench on GPU 0, then evaluate_many with 1 worker and with 16 on both GPUs.
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc KEVIN_TEST_CACHE_DIR=/tmp/kc
O=/tmp/o; mkdir -p $O/s
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 benchmarks/sandbox_gpu.py --out $O/s/a --prefork on --phases warm,noise,dobench > $O/s/bench_a.log 2>&1
timeout 90 python3 benchmarks/sandbox_gpu.py --out $O/s/one --prefork on --workers 16 --n-single 1 --phases one > $O/s/bench_one.log 2>&1
timeout 130 python3 benchmarks/sandbox_gpu.py --out $O/s/many --prefork on --workers 16 --phases many > $O/s/bench_many.log 2>&1
tar czf "$OUT/all.tgz" -C $O .
grep -h "warm evaluation {\|timing noise {\|do_bench {\|one_worker {\|many_workers {" $O/s/bench_a.log $O/s/bench_one.log $O/s/bench_many.log | cut -c1-420
