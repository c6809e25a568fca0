#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 12, call C), after the review fixes of kevin.core.policy.fused: the GPU tests of
# kevin.core, then the 7B benchmark of ours alone (is run 14's 15.76 s unchanged?).
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/g $O/t
timeout 150 python3 -m pytest -m gpu tests/core -v -p no:cacheprovider -p no:randomly > $O/t/tests.log 2>&1; echo "rc=$?" >> $O/t/tests.log
timeout $((560 - SECONDS)) python3 benchmarks/generation.py --shape 7b --variants policy:static --cap-s $((550 - SECONDS)) --budget-s $((555 - SECONDS)) --out $O/g > $O/g/gen.log 2>&1
cp $O/g/results.jsonl $OUT/ 2>/dev/null; cp $O/t/tests.log $OUT/gpu_tests.log; cp $O/g/gen.log $OUT/gen.log
cat $O/g/results_7b.md 2>/dev/null | tail -1
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/t/tests.log | tail -16
