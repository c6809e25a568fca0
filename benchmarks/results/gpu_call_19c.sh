#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 19, call C): one more same-machine 7B pair with this stop's code (the decoding path as in
# stop 18's final code): plain generate, then our backend.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/g
timeout 135 python3 benchmarks/generation.py --shape 7b --variants hf_generate --cap-s 130 --budget-s 133 --out $O/g > $O/g/gen_hf.log 2>&1
timeout $((440 - SECONDS)) python3 benchmarks/generation.py --shape 7b --variants policy:static --cap-s $((435 - SECONDS)) --budget-s $((438 - SECONDS)) --out $O/g > $O/g/gen.log 2>&1
cp $O/g/results.jsonl $O/g/results_7b.md $O/g/*.log $OUT/ 2>/dev/null
cat $O/g/results_7b.md 2>/dev/null | tail -3
grep -h "stderr_tail\|Error" $O/g/*.log | tail -5 | cut -c1-600
echo total $SECONDS
