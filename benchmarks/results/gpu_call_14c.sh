#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 14, call C), one thing at a time on an otherwise idle host: the 7B benchmark
# with the decoding loop's matmuls through cuBLASLt (kevin.core.policy.decoding.DECODE_BLAS, new), plain generate
# right after on the same machine, then the GPU tests of kevin.core (the policy package moved: kevin.core.policy.*).
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/g $O/t
timeout 260 python3 benchmarks/generation.py --shape 7b --variants policy:static --cap-s 250 --budget-s 255 --out $O/g > $O/g/gen.log 2>&1
timeout 130 python3 benchmarks/generation.py --shape 7b --variants hf_generate --cap-s 125 --budget-s 128 --out $O/g > $O/g/gen_hf.log 2>&1
timeout $((585 - SECONDS)) python3 -m pytest -m gpu tests/core -v -p no:cacheprovider -p no:randomly > $O/t/tests.log 2>&1; echo "rc=$?" >> $O/t/tests.log
cp $O/g/results.jsonl $O/g/results_7b.md $O/g/*.log $O/t/tests.log $OUT/ 2>/dev/null
cat $O/g/results_7b.md 2>/dev/null | tail -3
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/t/tests.log | tail -24
grep -h "stderr_tail\|Error" $O/g/*.log | tail -5 | cut -c1-600
