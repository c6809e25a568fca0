#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 13, call C): the GPU tests of kevin.core (with the new test of the compiled
# sampler at a real vocabulary, top-p 1 and 0.95), then the sampler microbenchmark (the kept sampler, with top-p
# filtering outside the compiled graph, against the chunked-argmax form tried in call A/B).
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/t $O/m
timeout 300 python3 -m pytest -m gpu tests/core -v -p no:cacheprovider -p no:randomly > $O/t/tests.log 2>&1; echo "rc=$?" >> $O/t/tests.log
timeout 120 python3 benchmarks/decode_sampler.py --out $O/m > $O/m/sampler.log 2>&1
cp $O/m/*.json $OUT/ 2>/dev/null
tar czf "$OUT/all.tgz" -C $O .
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/t/tests.log | tail -24
grep -E "^(sample_logits|chunked_argmax)" $O/m/sampler.log
