#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 14, call B), microbenchmarks only: the host's CPU topology (are the 16 CPUs
# 16 cores or 8 with two threads each: the sandbox's compile scaling), the decoding step's sampler variants
# (benchmarks/decode_sampler.py) and the 7B linears under cuBLAS and cuBLASLt (benchmarks/blas_preference.py).
set -u
export PYTHONUNBUFFERED=1
lscpu > $OUT/lscpu.txt 2>&1; nproc >> $OUT/lscpu.txt
timeout 150 python3 benchmarks/decode_sampler.py --out $OUT > $OUT/sampler.log 2>&1
timeout 150 python3 benchmarks/blas_preference.py --out $OUT > $OUT/blas.log 2>&1
grep -E "^CPU\(s\)|Thread|Core|Socket|Model name|NUMA node\(s\)" $OUT/lscpu.txt
cat $OUT/sampler.log | grep -v Warning | tail -12
grep "per pass\|Error" $OUT/blas.log
