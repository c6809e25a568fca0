#!/usr/bin/env bash
# Full fine-tuning of a 7B-shaped model on one H200 under FSDP2 (results: benchmarks/README.md, "Training on H200s").
# A randomly initialised Qwen2.5-7B (its real configuration, the tiny tokenizer), every weight trained, two RL steps
# through the CUDA sandbox with recipes/configs/accelerate/$CONFIG: fsdp2_offload.yaml by default (its offloaded state
# needs ~113 GiB of host memory for 7B), CONFIG=fsdp2.yaml keeps the shards on the GPU (~114 GiB of state there).
# Host and GPU memory are sampled every second beside the run; no checkpoint is written (one of 7B with its AdamW
# state is about 122 GB, more than the machine's disk). RESUME_MODEL=random:qwen2.5-1.5b then checks a sharded
# checkpoint on the GPU with a smaller model: one step with a checkpoint, then `--resume latest` for the second.
# Run from the repository root; writes a few files to $OUT.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export KEVIN_CACHE_DIR=/tmp/kevin-h200
OUT=${OUT:-out}; R=/tmp/kevin_fsdp; mkdir -p "$OUT" "$R" "$KEVIN_CACHE_DIR"
MODEL=${MODEL:-random:qwen2.5-7b}; CONFIG=${CONFIG:-fsdp2_offload.yaml}
RL=${RL:-"--tasks_per_step 1 --n_trajectories 8 --n_turns 1 --max_new_tokens 512 --micro_batch_size 4 --steps 2
  --generation_mode generate --checkpoint_every 0 --bf16 --gradient_checkpointing"}

{ free -b | awk '/Mem:/{print "host total bytes", $2}'; nvidia-smi --query-gpu=name,memory.total --format=csv; } > "$OUT/env.txt"
(while :; do free -b | awk -v t="$SECONDS" '/Mem:/{print t, $3}'; sleep 1; done) > "$R/host_used.txt" 2>/dev/null &
HOST=$!
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 1000 > "$R/gpu_used.txt" 2>/dev/null &
GPU=$!

echo "== $MODEL, full fine-tuning, $CONFIG, 1 GPU (t=$SECONDS s)"
timeout "${RUN_S:-520}" accelerate launch --config_file "recipes/configs/accelerate/$CONFIG" --num_processes 1 \
  recipes/train_multiturn.py --model "$MODEL" --backend cuda $RL --output_dir "$R/run" --overwrite \
  > "$OUT/fsdp_offload.log" 2>&1; echo "rc=$?" >> "$OUT/fsdp_offload.log"
kill "$HOST" "$GPU" 2>/dev/null
grep -v "it/s\]\|s/it\]" "$OUT/fsdp_offload.log" | tail -25
cp "$R/run/metrics.jsonl" "$OUT/fsdp_offload_metrics.jsonl" 2>/dev/null
python3 - "$R" <<'EOF' | tee "$OUT/summary.txt"
import json, sys
r = sys.argv[1]
host = [int(line.split()[1]) for line in open(f"{r}/host_used.txt") if len(line.split()) == 2]
gpu = [int(x) for x in open(f"{r}/gpu_used.txt").read().split() if x.isdigit()]
print(f"host memory used: peak {max(host or [0]) / 2**30:.1f} GiB, at start {(host or [0])[0] / 2**30:.1f} GiB "
      f"({len(host)} samples); GPU memory used (nvidia-smi): peak {max(gpu or [0]) / 1024:.1f} GiB")
keys = ["time/step", "time/generation", "time/sandbox", "time/train", "perf/train_tokens_per_s", "perf/mfu",
        "perf/peak_memory_gib", "loss/policy", "train/grad_norm", "train/tokens", "rollout/correct"]
try:
    rows = [json.loads(line) for line in open(f"{r}/run/metrics.jsonl")]
except OSError:
    sys.exit("no metrics")
for row in rows:
    if "time/step" in row:
        print("step", row["step"], json.dumps({k: row.get(k) for k in keys}))
EOF
if [ -n "${RESUME_MODEL:-}" ]; then
  for part in "--steps 1" "--steps 2 --resume latest"; do
    echo "== $RESUME_MODEL, $CONFIG, $part (t=$SECONDS s)"
    timeout "${RESUME_S:-150}" accelerate launch --config_file "recipes/configs/accelerate/$CONFIG" --num_processes 1 \
      recipes/train_multiturn.py --model "$RESUME_MODEL" --backend cuda ${RL//--checkpoint_every 0/} --checkpoint_every 1 $part \
      --output_dir "$R/resume" $([ "$part" = "--steps 1" ] && echo --overwrite) >> "$OUT/fsdp_resume.log" 2>&1
    echo "rc=$?" | tee -a "$OUT/fsdp_resume.log"
  done
  grep -E "resum|checkpoint|step|Error" "$OUT/fsdp_resume.log" | grep -v "it/s\]\|s/it\]" | tail -12
  cp "$R/resume/metrics.jsonl" "$OUT/fsdp_resume_metrics.jsonl" 2>/dev/null
  du -sh "$R/resume"/* 2>/dev/null | tail -5; rm -rf "$R/resume"
fi
echo "seconds $SECONDS"
