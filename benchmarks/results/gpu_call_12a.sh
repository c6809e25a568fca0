#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 12, call A), one thing at a time on an otherwise idle host:
# the 7B benchmark with the fused projections (kevin.core.policy.fused, new), plain generate right after, the GPU tests
# of kevin.core, then (with what time is left) the 7B benchmark without the fused projections.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/g $O/t
timeout 260 python3 benchmarks/generation.py --shape 7b --variants policy:static --cap-s 250 --budget-s 255 --out $O/g > $O/g/gen.log 2>&1
timeout 130 python3 benchmarks/generation.py --shape 7b --variants hf_generate --cap-s 125 --budget-s 128 --out $O/g > $O/g/gen_hf.log 2>&1
timeout 110 python3 -m pytest -m gpu tests/core -v -p no:cacheprovider -p no:randomly > $O/t/tests.log 2>&1; echo "rc=$?" >> $O/t/tests.log
left=$((585 - SECONDS))
timeout $left python3 benchmarks/generation.py --shape 7b --variants policy:static+unfused --cap-s $((left - 5)) --budget-s $((left - 3)) --out $O/g > $O/g/gen_unfused.log 2>&1
cp $O/g/results.jsonl $OUT/ 2>/dev/null
tar czf "$OUT/all.tgz" -C $O .
cat $O/g/results_7b.md 2>/dev/null | tail -3
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/t/tests.log | tail -24
grep -h "stderr_tail\|Error" $O/g/*.log | tail -5 | cut -c1-600
