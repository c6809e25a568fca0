#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 19, call B): 20 (release_memory, generate) cycles at the 1.5B shape with
# 8 prompts (a decoding step bound by the host): does a call slow down as recorded CUDA graphs pile up?
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/m
timeout 560 python3 benchmarks/release_memory.py --shape 1.5b --prompts 8 --cycles 20 --out $O/m > $O/m/release_cycles.log 2>&1
cp $O/m/release_memory.jsonl $O/m/release_cycles.log $OUT/ 2>/dev/null
tail -8 $O/m/release_cycles.log | cut -c1-1500
echo total $SECONDS
