#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 13, call D): a profile of the final code's 7B call (fused projections,
# 32 new tokens), to see where a decoding step and the prefill go now.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/p
timeout 400 python3 benchmarks/profile_decode.py --shape 7b --new-tokens 32 --out $O/p > $O/p/log.txt 2>&1; echo "rc=$?" >> $O/p/log.txt
cp $O/p/* $OUT/ 2>/dev/null
head -30 $O/p/profile.txt; grep -n "== decode" -A28 $O/p/profile.txt | cut -c1-160; tail -3 $O/p/log.txt
