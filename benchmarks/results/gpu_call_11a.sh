#!/usr/bin/env bash
# One device call on nvidia-h200-x2 (stop 11, call A).
# GPU 0: the 7B benchmark, ours (mask-free unpadded prefill and the live-slot decode attention, both new on a GPU).
# GPU 1: the GPU tests of kevin.core, then the decode attention microbenchmark (live-slot sweep at 2,560 written
# slots; the implementations at 2,080 and 3,040) and the decoding step's weight matmuls (cuBLAS against autotune).
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/g0 $O/g1 $O/a $O/m
(CUDA_VISIBLE_DEVICES=1 timeout 240 python3 -m pytest -m gpu tests/core -v -p no:cacheprovider -p no:randomly > $O/g1/tests.log 2>&1; echo "rc=$?" >> $O/g1/tests.log
 CUDA_VISIBLE_DEVICES=1 timeout 150 python3 benchmarks/decode_attention.py --valid 2560 --sweep-live --out $O/a > $O/a/log_2560.txt 2>&1
 for v in 2080 3040; do CUDA_VISIBLE_DEVICES=1 timeout 40 python3 benchmarks/decode_attention.py --valid $v --out $O/a > $O/a/log_$v.txt 2>&1; done
 CUDA_VISIBLE_DEVICES=1 timeout 150 python3 benchmarks/decode_matmuls.py --autotune --out $O/m > $O/m/log.txt 2>&1) &
CUDA_VISIBLE_DEVICES=0 timeout 330 python3 benchmarks/generation.py --shape 7b --variants policy:static --cap-s 320 --budget-s 325 --out $O/g0 > $O/g0/gen.log 2>&1
wait
tar czf "$OUT/all.tgz" -C $O .
cat $O/g0/results_7b.md 2>/dev/null | tail -4
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/g1/tests.log | tail -24
grep -v "^triton_live_n" $O/a/log_*.txt | cut -c1-200
sort -t"'" -k3 $O/a/log_2560.txt | grep "^triton_live_n" | head -3 | cut -c1-200
grep -E "^\{|lm_head|down|gate_up" $O/m/log.txt | cut -c1-250
