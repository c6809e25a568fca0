#!/usr/bin/env bash
# One device call on nvidia-h200-x2 (stop 9, call B). Phase 1: GPU 1 = Triton launch sweep + the policy's GPU
# tests; GPU 0 = profiler start-up cost + the sandbox's warm evaluation, noise and do_bench. Phase 2: evaluate_many
# with 16 workers on both GPUs (zygote on). Phase 3: 7B generation, plain generate on GPU 0 and ours (Triton
# decode attention, the sweep's fastest launch settings) on GPU 1, at the same time. Results in $OUT/all.tgz.
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 KEVIN_CACHE_DIR=/tmp/kc KEVIN_TEST_CACHE_DIR=/tmp/kc
O=/tmp/o; mkdir -p $O/g $O/s
(
  export CUDA_VISIBLE_DEVICES=1
  timeout 150 python3 benchmarks/decode_attention.py --sweep --out $O/g > $O/g/attn.log 2>&1
  timeout 100 python3 -m pytest -m gpu tests/core/test_policy.py -v -p no:cacheprovider -p no:randomly 2>&1 | grep -v DEBUG > $O/g/tests.log
) &
(
  export CUDA_VISIBLE_DEVICES=0
  timeout 40 python3 benchmarks/results/profiler_cost.py > $O/s/profiler_cost.log 2>&1
  timeout 150 python3 benchmarks/sandbox_gpu.py --out $O/s/a --prefork on --phases warm,noise,dobench > $O/s/bench_a.log 2>&1
)
wait
echo "== phase 2 (t=$SECONDS s)"
timeout 175 python3 benchmarks/sandbox_gpu.py --out $O/s/b --prefork on --workers 16 --phases many > $O/s/bench_b.log 2>&1
echo "== phase 3 (t=$SECONDS s)"
BEST=$(python3 -c "
import json; r=json.load(open('$O/g/decode_attention.json'))['results']
ok={k:v for k,v in r.items() if k.startswith('triton_n') and 'ms' in v}; k=min(ok,key=lambda k:ok[k]['ms']); n,w,s,sk=k.split('_')[1:]
print(json.dumps(dict(block_n=int(n[1:]),num_warps=int(w[1:]),num_stages=int(s[1:]),skip=sk=='skip')))" 2>/dev/null || echo '{}')
echo "triton config: $BEST"
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 benchmarks/generation.py --shape 7b --variants hf_generate --cap-s 195 --budget-s 200 --out $O/g0 > $O/g/gen_hf.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 200 python3 benchmarks/generation.py --shape 7b --variants policy:static@triton --triton-config "$BEST" --cap-s 195 --budget-s 200 --out $O/g > $O/g/gen.log 2>&1
wait
cat $O/g0/results.jsonl >> $O/g/results.jsonl 2>/dev/null
tar czf "$OUT/all.tgz" -C $O .
cat $O/s/profiler_cost.log; grep -E "passed|failed" $O/g/tests.log; grep -hv DEBUG $O/s/bench_a.log | grep -E "overhead|cv_percent|ours_over|wall_seconds\"" ; grep -h "candidates_per_second\|compile_seconds_median" $O/s/bench_b.log
grep -E "^(grouped|triton|transformers)" $O/g/attn.log | sort -t: -k2 | head -12; cut -c1-400 $O/g/results.jsonl
