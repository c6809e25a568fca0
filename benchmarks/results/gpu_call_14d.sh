#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 14, call D): an A/B on one machine of the decoding loop's BLAS library,
# the 7B benchmark with cuBLASLt (DECODE_BLAS, the default now), then with torch's default (cuBLAS).
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/g
timeout 265 python3 benchmarks/generation.py --shape 7b --variants policy:static --cap-s 255 --budget-s 260 --out $O/g > $O/g/gen_lt.log 2>&1
timeout $((535 - SECONDS)) python3 benchmarks/generation.py --shape 7b --variants policy:static+cublas --cap-s $((525 - SECONDS)) --budget-s $((530 - SECONDS)) --out $O/g > $O/g/gen_cublas.log 2>&1
cp $O/g/results.jsonl $O/g/*.log $OUT/ 2>/dev/null
cut -c1-700 $O/g/results.jsonl
