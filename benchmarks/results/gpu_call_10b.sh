#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 10, call B): the 7B generation benchmark with the final decoding loop
# (compiled prefill with the opaque prefill attention op), ours then plain generate, one after the other on
# the same idle GPU; then a profile of a 32-token call.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/g $O/p
timeout 330 python3 benchmarks/generation.py --shape 7b --variants policy:static --cap-s 320 --budget-s 325 --out $O/g > $O/g/gen.log 2>&1
timeout 200 python3 benchmarks/generation.py --shape 7b --variants hf_generate --cap-s 195 --budget-s 200 --out $O/g > $O/g/gen_hf.log 2>&1
timeout $((565 - SECONDS)) python3 benchmarks/profile_decode.py --shape 7b --new-tokens 32 --out $O/p > $O/p/log.txt 2>&1
tar czf "$OUT/all.tgz" -C $O .
cat $O/g/results_7b.md
grep -A8 "== prefill\|== decode" $O/p/log.txt | cut -c1-150
