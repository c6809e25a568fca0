#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 18, call B), one thing at a time on an otherwise idle host, all on one
# machine: plain generate at the 7B benchmark, then our backend with this stop's prefill (the last layer's o_proj and
# MLP on the last position; the rotary cos and sin computed once), then the same with both undone
# (+inlinerotary+whole: stop 14's prefill).
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/g
timeout 135 python3 benchmarks/generation.py --shape 7b --variants hf_generate --cap-s 130 --budget-s 133 --out $O/g > $O/g/gen_hf.log 2>&1
timeout 250 python3 benchmarks/generation.py --shape 7b --variants policy:static --cap-s 245 --budget-s 248 --out $O/g > $O/g/gen.log 2>&1
timeout $((592 - SECONDS)) python3 benchmarks/generation.py --shape 7b --variants policy:static+inlinerotary+whole --cap-s $((587 - SECONDS)) --budget-s $((590 - SECONDS)) --out $O/g > $O/g/gen_old.log 2>&1
cp $O/g/results.jsonl $O/g/results_7b.md $O/g/*.log $OUT/ 2>/dev/null
cat $O/g/results_7b.md 2>/dev/null | tail -4
grep -h "stderr_tail\|Error" $O/g/*.log | tail -5 | cut -c1-600
echo total $SECONDS
