#!/usr/bin/env bash
# One device call on nvidia-h200-x2 (stop 9, call C). Phase 1: GPU 0 = the sandbox GPU tests (CUDA sources now
# compile without torch/extension.h); GPU 1 = the 1.5B generation benchmark, ours (default: Triton decode
# attention) then plain generate. Phase 2: evaluate_many with 1 worker, then with 16 on both GPUs (zygote on).
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc KEVIN_TEST_CACHE_DIR=/tmp/kc
O=/tmp/o; mkdir -p $O/g $O/s
CUDA_VISIBLE_DEVICES=1 timeout 230 python3 benchmarks/generation.py --shape 1.5b --variants policy:static,hf_generate \
  --cap-s 120 --budget-s 225 --out $O/g > $O/g/gen.log 2>&1 &
CUDA_VISIBLE_DEVICES=0 timeout 230 python3 -m pytest -m gpu tests/sandbox -v -p no:cacheprovider -p no:randomly > $O/s/gpu_tests.log 2>&1
echo "rc=$?" >> $O/s/gpu_tests.log
wait
echo "== phase 2 (t=$SECONDS s)"
timeout 100 python3 benchmarks/sandbox_gpu.py --out $O/s/one --prefork on --workers 16 --n-single 1 --phases one > $O/s/bench_one.log 2>&1
timeout 150 python3 benchmarks/sandbox_gpu.py --out $O/s/many --prefork on --workers 16 --phases many > $O/s/bench_many.log 2>&1
tar czf "$OUT/all.tgz" -C $O .
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/s/gpu_tests.log | tail -12
grep -h "one_worker {\|many_workers {" $O/s/bench_one.log $O/s/bench_many.log | cut -c1-400
cat $O/g/results_1.5b.md
