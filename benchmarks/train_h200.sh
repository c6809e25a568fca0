#!/usr/bin/env bash
# GPU proof of recipes/train_multiturn.py on 2 H200s (results: benchmarks/results/train_h200.md).
# A randomly initialised Qwen2.5-1.5B (its real configuration, built on the GPU), LoRA r=32, bf16, two RL
# steps through the CUDA sandbox on 1 GPU, then the same on 2 GPUs with accelerate, plus one saved batch
# evaluated by 1 and by 2 processes; then, if time is left, the 1-GPU run with a random Qwen2.5-7B.
# Generation uses the recipe's CUDA default (static cache + torch.compile); if the first run fails, the
# later ones fall back to plain `generate` (--generation_mode generate), and one.log says why.
# Run from the repository root; writes at most 8 files to $OUT (the device tool's limit).
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/kevin_out}; R=/tmp/kevin_runs; mkdir -p "$OUT" "$R"
BUDGET=${BUDGET:-520}
left() { echo $(( BUDGET - SECONDS > 10 ? BUDGET - SECONDS : 10 )); }
cap() { local want=$1 l; l=$(left); echo $(( want < l ? want : l )); }
COMMON=${COMMON:-"--model random:qwen2.5-1.5b --lora --lora_rank 32 --backend cuda --tasks_per_step 2 --n_trajectories 16
  --n_turns 2 --max_new_tokens 512 --micro_batch_size 8 --steps 2"}
LAUNCH2=${LAUNCH2:-"accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision bf16 --dynamo_backend no"}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, transformers, peft, accelerate; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'accelerate', accelerate.__version__)"
} > "$R/env.txt" 2>&1

# Beside the one-GPU run, on the idle second GPU: a generation benchmark (generation_h200.md), by default
# plain `generate` on the Qwen2.5-7B shape; results land in summary.txt.
CUDA_VISIBLE_DEVICES=1 timeout 175 python3 benchmarks/generation.py ${GEN_ARGS:---shape 7b --variants hf_generate --cap-s 140 --budget-s 150} \
  --out "$R/gen" > "$R/gen.log" 2>&1 &
GEN=$!

echo "== one GPU, 2 steps (t=$SECONDS s)"
CUDA_VISIBLE_DEVICES=0 timeout "$(cap 200)" python3 recipes/train_multiturn.py $COMMON --tracker tensorboard \
  --output_dir "$R/one" > "$OUT/one.log" 2>&1; RC=$?; echo "rc=$RC" >> "$OUT/one.log"
if [ "$RC" != 0 ]; then
  echo "== the default generation mode failed (rc=$RC): later runs use --generation_mode generate" | tee -a "$OUT/one.log"
  COMMON="$COMMON --generation_mode generate"
fi
FB="$R/one/rollouts/step_000001.jsonl.gz"
echo "== fixed batch, 1 process (t=$SECONDS s)"
CUDA_VISIBLE_DEVICES=0 timeout "$(cap 80)" python3 recipes/check_sharding.py $COMMON --output_dir "$R/fb1" \
  --rollout_file "$FB" > "$OUT/fixed1.log" 2>&1; echo "rc=$?" >> "$OUT/fixed1.log"
wait "$GEN" 2>/dev/null  # both GPUs are needed from here on
echo "== fixed batch, 2 processes (t=$SECONDS s)"
timeout "$(cap 90)" $LAUNCH2 recipes/check_sharding.py $COMMON --output_dir "$R/fb2" \
  --rollout_file "$FB" > "$OUT/fixed2.log" 2>&1; echo "rc=$?" >> "$OUT/fixed2.log"
echo "== two GPUs, 2 steps (t=$SECONDS s)"
timeout "$(cap 200)" $LAUNCH2 recipes/train_multiturn.py $COMMON --output_dir "$R/two" > "$OUT/two.log" 2>&1
echo "rc=$?" >> "$OUT/two.log"
if [ "$(left)" -gt 130 ]; then
  echo "== one GPU, random Qwen2.5-7B, 2 steps (t=$SECONDS s)"
  CUDA_VISIBLE_DEVICES=0 timeout "$(cap 200)" python3 recipes/train_multiturn.py ${COMMON/qwen2.5-1.5b/qwen2.5-7b} \
    --output_dir "$R/seven" > "$OUT/seven.log" 2>&1; echo "rc=$?" >> "$OUT/seven.log"
fi
echo "== summary (t=$SECONDS s)"
cp "$R/one/metrics.jsonl" "$OUT/one_metrics.jsonl" 2>/dev/null; cp "$R/two/metrics.jsonl" "$OUT/two_metrics.jsonl" 2>/dev/null
{ cat "$R/env.txt"; python3 benchmarks/train_h200_summary.py "$R"
  echo "== generation benchmark (GPU 1)"; grep -v DEBUG "$R/gen.log" | tail -40; cat "$R"/gen/* 2>/dev/null; } > "$OUT/summary.txt" 2>&1
ls -R "$R" | head -60 >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
