#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 19, call D): what release_memory frees and costs for the 7B shape at 16 rows
# (a training rollout's batch), with 5 more (release, generate) cycles.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/m
timeout 560 python3 benchmarks/release_memory.py --shape 7b --prompts 16 --cycles 5 --out $O/m > $O/m/release_7b.log 2>&1
cp $O/m/release_memory.jsonl $O/m/release_7b.log $OUT/ 2>/dev/null
tail -3 $O/m/release_7b.log | cut -c1-1500; cat $O/m/release_memory.jsonl
echo total $SECONDS
