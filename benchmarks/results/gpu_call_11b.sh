#!/usr/bin/env bash
# One device call on nvidia-h200-x2 (stop 11, call B): the 7B benchmark with the tuned live-slot decode attention,
# ours then plain generate one after the other on GPU 0 with nothing else running during plain generate; then a
# profile of a 32-token call. During ours, GPU 1 times the attention settings around the chosen ones.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/g $O/p $O/a
(for v in 2080 3040; do CUDA_VISIBLE_DEVICES=1 timeout 40 python3 benchmarks/decode_attention.py --valid $v --out $O/a > $O/a/log_$v.txt 2>&1; done
 CUDA_VISIBLE_DEVICES=1 timeout 120 python3 benchmarks/decode_attention.py --valid 2560 --sweep-live --programs 512,768,1024 --out $O/a > $O/a/log_2560.txt 2>&1) &
CUDA_VISIBLE_DEVICES=0 timeout 300 python3 benchmarks/generation.py --shape 7b --variants policy:static --cap-s 290 --budget-s 295 --out $O/g > $O/g/gen.log 2>&1
wait
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 benchmarks/generation.py --shape 7b --variants hf_generate --cap-s 195 --budget-s 200 --out $O/g > $O/g/gen_hf.log 2>&1
CUDA_VISIBLE_DEVICES=0 timeout $((580 - SECONDS)) python3 benchmarks/profile_decode.py --shape 7b --new-tokens 32 --out $O/p > $O/p/log.txt 2>&1
tar czf "$OUT/all.tgz" -C $O .
cat $O/g/results_7b.md 2>/dev/null | tail -3
grep -v "^triton_live_n" $O/a/log_*.txt | grep triton | cut -c1-160
sort -t"'" -k3 $O/a/log_2560.txt | grep "^triton_live_n" | head -4 | cut -c1-160
grep -A10 "== prefill\|== decode" $O/p/log.txt | cut -c1-150
