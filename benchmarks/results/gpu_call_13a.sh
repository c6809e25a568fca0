#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 13, call A), one thing at a time on an otherwise idle host: the sampler and
# weight-matmul microbenchmarks, the 7B benchmark with the chunked-argmax sampler (new), plain generate right
# after, then the GPU tests of kevin.core.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/g $O/t $O/m
timeout 60 python3 benchmarks/decode_sampler.py --out $O/m > $O/m/sampler.log 2>&1
timeout 60 python3 benchmarks/decode_matmuls.py --layouts --out $O/m > $O/m/matmuls.log 2>&1
timeout 250 python3 benchmarks/generation.py --shape 7b --variants policy:static --cap-s 240 --budget-s 245 --out $O/g > $O/g/gen.log 2>&1
timeout 125 python3 benchmarks/generation.py --shape 7b --variants hf_generate --cap-s 120 --budget-s 123 --out $O/g > $O/g/gen_hf.log 2>&1
left=$((590 - SECONDS))
timeout $left python3 -m pytest -m gpu tests/core -v -p no:cacheprovider -p no:randomly > $O/t/tests.log 2>&1; echo "rc=$?" >> $O/t/tests.log
cp $O/g/results.jsonl $OUT/ 2>/dev/null
cp $O/m/*.json $OUT/ 2>/dev/null
tar czf "$OUT/all.tgz" -C $O .
cat $O/m/sampler.log | tail -5
tail -3 $O/m/matmuls.log | cut -c1-800
cat $O/g/results_7b.md 2>/dev/null | tail -3
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/t/tests.log | tail -24
grep -h "stderr_tail\|Error" $O/g/*.log | tail -5 | cut -c1-600
