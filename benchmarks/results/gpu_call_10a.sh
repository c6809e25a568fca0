#!/usr/bin/env bash
# One device call on nvidia-h200-x2 (stop 10, call A): the new static-cache sampling loop (kevin.core.policy.decoding:
# compiled dynamic prefill, compiled decode step and sampler, no host sync per token).
# GPU 0: the 7B benchmark, ours, then a profile of a 32-token call. GPU 1: plain generate on the same 7B setup,
# then the policy's GPU tests.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/g0 $O/g1 $O/p
(CUDA_VISIBLE_DEVICES=1 timeout 200 python3 benchmarks/generation.py --shape 7b --variants hf_generate --cap-s 195 --budget-s 200 --out $O/g1 > $O/g1/gen.log 2>&1;
 CUDA_VISIBLE_DEVICES=1 timeout 300 python3 -m pytest -m gpu tests/core -v -p no:cacheprovider -p no:randomly > $O/g1/tests.log 2>&1; echo "rc=$?" >> $O/g1/tests.log) &
CUDA_VISIBLE_DEVICES=0 timeout 300 python3 benchmarks/generation.py --shape 7b --variants policy:static --cap-s 290 --budget-s 295 --out $O/g0 > $O/g0/gen.log 2>&1
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 benchmarks/profile_decode.py --shape 7b --new-tokens 32 --out $O/p > $O/p/log.txt 2>&1
wait
tar czf "$OUT/all.tgz" -C $O .
cat $O/g0/results_7b.md $O/g1/results_7b.md 2>/dev/null | tail -8
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/g1/tests.log | tail -14
grep -A14 "== prefill\|== decode" $O/p/log.txt | cut -c1-150
