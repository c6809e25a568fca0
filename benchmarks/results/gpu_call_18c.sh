#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 18, call C): the GPU tests of kevin.core with this stop's prefill (the last
# layer cut to the last position, the rotary operator installed only where it matches the model's own cos and sin),
# the prefill's rotary kernel alone (inline, precomputed, a plain copy), then the 1.5B benchmark: plain generate and
# our backend on one machine (last measured in run 7, before kevin.core.policy.decoding).
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/g $O/r $O/t
timeout 190 python3 -m pytest -m gpu tests/core -v -p no:cacheprovider -p no:randomly > $O/t/tests.log 2>&1; echo "rc=$?" >> $O/t/tests.log
timeout 75 python3 benchmarks/prefill_rotary.py --out $O/r > $O/r/rotary.log 2>&1
timeout 100 python3 benchmarks/generation.py --shape 1.5b --variants hf_generate --cap-s 95 --budget-s 98 --out $O/g > $O/g/gen15_hf.log 2>&1
timeout $((590 - SECONDS)) python3 benchmarks/generation.py --shape 1.5b --variants policy:static --cap-s $((585 - SECONDS)) --budget-s $((588 - SECONDS)) --out $O/g > $O/g/gen15.log 2>&1
cp $O/t/tests.log $O/r/prefill_rotary.json $O/r/rotary.log $O/g/results.jsonl $O/g/results_1.5b.md $O/g/*.log $OUT/ 2>/dev/null
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/t/tests.log | tail -30
tail -1 $O/r/rotary.log | cut -c1-700
cat $O/g/results_1.5b.md 2>/dev/null | tail -3
grep -h "stderr_tail\|Error" $O/g/*.log $O/r/rotary.log | tail -5 | cut -c1-600
echo total $SECONDS
