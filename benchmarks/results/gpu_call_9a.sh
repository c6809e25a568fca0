#!/usr/bin/env bash
# One device call on nvidia-h200-x2 (stop 9, call A): GPU 1 = decode attention microbenchmark, the policy's GPU
# tests and the 7B generation benchmark with two decode attentions; GPU 0 = the sandbox proof on the new
# protocol (tests, overhead, noise, do_bench, one worker with the zygote). Everything lands in $OUT/all.tgz.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/g
(
  export CUDA_VISIBLE_DEVICES=1
  timeout 90 python3 benchmarks/decode_attention.py --out $O/g > $O/g/attn.log 2>&1
  timeout 120 python3 -m pytest -m gpu tests/core/test_policy.py -v -p no:cacheprovider -p no:randomly > $O/g/tests.log 2>&1
  timeout 380 python3 benchmarks/generation.py --shape 7b --variants "${GEN_VARIANTS:-policy:static@triton,policy:static@grouped}" \
    --cap-s 185 --budget-s 375 --out $O/g > $O/g/gen.log 2>&1
) &
CUDA_VISIBLE_DEVICES=0 OUT=$O/s TESTS=tests/sandbox TEST_S=230 PHASES=warm,noise,dobench BENCH_S=110 \
  PHASES2=one PREFORK2=on N_SINGLE=1 BENCH2_S=120 bash benchmarks/results/sandbox_h200.sh
wait
tar czf "$OUT/all.tgz" -C $O .
tail -5 $O/g/attn.log $O/g/tests.log; cat $O/g/results_7b.md 2>/dev/null
