#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 13, call B), one thing at a time on an otherwise idle host: the sampler
# microbenchmark, a check that the prefill rotary operator applies under transformers 5.17, the 7B benchmark with
# the chunked-argmax sampler and the prefill rotary operator (new), plain generate right after, the GPU tests.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/g $O/t $O/m
timeout 60 python3 benchmarks/decode_sampler.py --out $O/m > $O/m/sampler.log 2>&1
python3 -c "from kevin.core.policy.tiny import *; from kevin.core.policy.attention import install_prefill_rotary as i; print('rotary modules changed:', i(build_tiny_model(build_tiny_tokenizer())))" > $O/m/rotary.log 2>&1
timeout 250 python3 benchmarks/generation.py --shape 7b --variants policy:static --cap-s 240 --budget-s 245 --out $O/g > $O/g/gen.log 2>&1
timeout 125 python3 benchmarks/generation.py --shape 7b --variants hf_generate --cap-s 120 --budget-s 123 --out $O/g > $O/g/gen_hf.log 2>&1
left=$((590 - SECONDS))
timeout $left python3 -m pytest -m gpu tests/core -v -p no:cacheprovider -p no:randomly > $O/t/tests.log 2>&1; echo "rc=$?" >> $O/t/tests.log
cp $O/g/results.jsonl $OUT/ 2>/dev/null
cp $O/m/*.json $OUT/ 2>/dev/null
tar czf "$OUT/all.tgz" -C $O .
cat $O/m/sampler.log | tail -5
cat $O/m/rotary.log | tail -2
cat $O/g/results_7b.md 2>/dev/null | tail -3
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/t/tests.log | tail -24
grep -h "stderr_tail\|Error" $O/g/*.log | tail -5 | cut -c1-600
