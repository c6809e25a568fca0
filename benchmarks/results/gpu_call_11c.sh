#!/usr/bin/env bash
# One device call on nvidia-h200-x2 (stop 11, call C), everything one after the other on an otherwise idle host:
# the 7B benchmark (ours, then plain generate, GPU 0), then the sandbox (precompiled header build, evaluate_many with
# 1 worker, then with 16; ninja's seconds per translation unit recorded).
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/g $O/s
CUDA_VISIBLE_DEVICES=0 timeout 250 python3 benchmarks/generation.py --shape 7b --variants policy:static --cap-s 240 --budget-s 245 --out $O/g > $O/g/gen.log 2>&1
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 benchmarks/generation.py --shape 7b --variants hf_generate --cap-s 140 --budget-s 145 --out $O/g > $O/g/gen_hf.log 2>&1
export TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc
timeout 110 python3 -c "
import time; t = time.time()
from kevin.sandbox import _pch
print('pch', _pch.ensure('/tmp/kc', 'cuda'), 'seconds', round(time.time() - t, 1))" > $O/s/pch.log 2>&1
timeout $((590 - SECONDS)) python3 benchmarks/sandbox_gpu.py --out $O/s/one --prefork on --workers 16 --n-single 1 --phases one > $O/s/bench_one.log 2>&1
timeout $((595 - SECONDS)) python3 benchmarks/sandbox_gpu.py --out $O/s/many --prefork on --workers 16 --phases many > $O/s/bench_many.log 2>&1
tar czf "$OUT/all.tgz" -C $O .
cat $O/g/results_7b.md 2>/dev/null | tail -2
tail -1 $O/s/pch.log
grep -h "one_worker {\|many_workers {" $O/s/bench_one.log $O/s/bench_many.log | cut -c1-200
grep -h -A3 '"unit_seconds"' $O/s/one/sandbox_gpu.json $O/s/many/sandbox_gpu.json | cut -c1-200
