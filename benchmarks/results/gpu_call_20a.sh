#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 20, call A): Triton decode matmuls against cuBLAS / cuBLASLt at the 7B
# decoding step's shapes, each call on its own weight copy (no L2 reuse): benchmarks/decode_gemm.py.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o20a; mkdir -p $O
timeout 420 python3 benchmarks/decode_gemm.py --out $O > $O/gemm.log 2>&1; echo "rc=$?" >> $O/gemm.log
cp $O/gemm.log $O/decode_gemm.json $OUT/ 2>/dev/null
grep -v "^\s*$" $O/gemm.log | tail -30
echo total $SECONDS
