#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 12, call D): call C's 16.29 s with the review-fixed kevin.core.policy.fused, A/B on one
# machine: ours with the fused projections, then without.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/g
timeout 240 python3 benchmarks/generation.py --shape 7b --variants policy:static --cap-s 235 --budget-s 238 --out $O/g > $O/g/gen.log 2>&1
timeout $((440 - SECONDS)) python3 benchmarks/generation.py --shape 7b --variants policy:static+unfused --cap-s $((430 - SECONDS)) --budget-s $((435 - SECONDS)) --out $O/g > $O/g/gen_unfused.log 2>&1
cp $O/g/results.jsonl $OUT/ 2>/dev/null
cat $O/g/results_7b.md 2>/dev/null | tail -2
