#!/usr/bin/env bash
# Sharded training and sharded rollouts on two GPUs of one host (an nvidia-h200-x2 or nvidia-h100-x2 machine).
#   1. one saved batch, FSDP2 full shard on 2 processes against 1 (recipes/check_sharding.py): the loss, the mean
#      log-prob and the gradient norm must agree to float tolerance. CHECK_MODEL (default a random Qwen2.5-1.5B,
#      every weight trained); its rollout comes from a one-step run on GPU 1 while the starter trains on GPU 0.
#   2. full fine-tuning of a random Qwen2.5-7B under FSDP2 on 2 GPUs, two RL steps, the batch of
#      benchmarks/fsdp_h200.sh (its one-GPU counterpart): seconds per step, tokens/s, MFU, peak memory per GPU.
#   3. LoRA under DDP on 2 GPUs with the medium starter (warm-started on the CUDA corpus first) writing real CUDA
#      kernels: the tasks dealt over the processes, each judged on its own GPU; correct share and time split.
# A run of about 20 minutes: start it with `bash benchmarks/detach.sh start two bash benchmarks/two_gpu.sh` and wait
# for it over later device commands. Writes to $JOB_OUT (detach.sh) or $OUT; PARTS="1 2 3" chooses the parts.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # no NVLink multicast
export KEVIN_CACHE_DIR=/tmp/kevin-two KEVIN_TEST_CACHE_DIR=/tmp/kevin-two
OUT=${JOB_OUT:-${OUT:-out}}; R=/tmp/kevin_two; mkdir -p "$OUT" "$R" "$KEVIN_CACHE_DIR"
PARTS=${PARTS:-"1 2 3"}
CHECK_MODEL=${CHECK_MODEL:-random:qwen2.5-1.5b}
TASKS=${TASKS:-"builtin:Matmul_3d_by_2d,AvgPool3d,Matmul_LayerNorm_GELU,Gemm_Sigmoid_Scaling_ResidualAdd"}
FSDP="accelerate launch --config_file recipes/configs/accelerate/fsdp2.yaml"
DDP="accelerate launch --multi_gpu --num_machines 1 --mixed_precision bf16 --dynamo_backend no"
has() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
log() { grep -v "it/s\]\|s/it\]" "$1" | tail -"${2:-8}"; }
starter_trained() {  # once, whichever part asks first
  if [ -n "$STARTER" ]; then wait "$STARTER"; echo "rc=$?" >> "$OUT/warmstart.log"; fi; STARTER=
}
{ nvidia-smi --query-gpu=name,memory.total --format=csv; nproc; } > "$OUT/env.txt" 2>&1
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 1000 > "$OUT/gpu_memory.txt" 2>/dev/null &
SMI=$!
trap 'kill $SMI 2>/dev/null' EXIT

warm() {  # the medium starter on GPU 0; a diverged one (non-finite weights) is trained again at a lower lr
  local lr
  for lr in 5e-4 2.5e-4; do
    CUDA_VISIBLE_DEVICES=0 timeout 330 python3 recipes/warmstart.py --backend cuda --model_shape medium --device cuda \
      --threads 8 --output_dir "$R/starter" --overwrite --deeper_refinements 0.5 --sharpen 1.0 --batch_size 8 \
      --lr "$lr" >> "$OUT/warmstart.log" 2>&1 && return 0
    grep -q "diverged" "$OUT/warmstart.log" || return 1
  done
  return 1
}
STARTER=
if has 3; then  # while part 1's rollout is made on GPU 1
  echo "== warm start of the medium starter on GPU 0 (t=$SECONDS s)"
  : > "$OUT/warmstart.log"; warm &
  STARTER=$!
fi

if has 1; then
  CHECK="--model $CHECK_MODEL --backend cuda --tasks_per_step 2 --n_trajectories 4 --n_turns 1 --max_new_tokens 256
    --micro_batch_size 4 --bf16 --gradient_checkpointing --generation_mode generate"
  echo "== part 1: a saved rollout, one step on GPU 1 (t=$SECONDS s)"
  # under the same launch as the checks, so that the random weights are drawn alike (FSDP draws them on the CPU)
  CUDA_VISIBLE_DEVICES=1 timeout 300 $FSDP --num_processes 1 recipes/train_multiturn.py $CHECK --steps 1 \
    --checkpoint_every 0 --output_dir "$R/saved" --overwrite > "$OUT/part1_saved.log" 2>&1
  echo "rc=$?" >> "$OUT/part1_saved.log"
  FB="$R/saved/rollouts/step_000001.jsonl.gz"
  echo "== part 1: the saved batch, FSDP2, 1 process (t=$SECONDS s)"
  CUDA_VISIBLE_DEVICES=1 timeout 300 $FSDP --num_processes 1 recipes/check_sharding.py $CHECK --rollout_file "$FB" \
    --output_dir "$R/check1" > "$OUT/part1_one.log" 2>&1; echo "rc=$?" >> "$OUT/part1_one.log"
  starter_trained  # both GPUs from here on
  echo "== part 1: the saved batch, FSDP2, 2 processes (t=$SECONDS s)"
  timeout 300 $FSDP --num_processes 2 recipes/check_sharding.py $CHECK --rollout_file "$FB" \
    --output_dir "$R/check2" > "$OUT/part1_two.log" 2>&1; echo "rc=$?" >> "$OUT/part1_two.log"
  grep -h '"debug/loss"\|rc=' "$OUT/part1_one.log" "$OUT/part1_two.log"
fi
starter_trained

if has 2; then
  echo "== part 2: random Qwen2.5-7B, full fine-tuning under FSDP2, 2 GPUs, 2 RL steps (t=$SECONDS s)"
  timeout 540 $FSDP --num_processes 2 recipes/train_multiturn.py --model random:qwen2.5-7b --backend cuda \
    --tasks_per_step 1 --n_trajectories 8 --n_turns 1 --max_new_tokens 512 --micro_batch_size 4 --steps 2 \
    --generation_mode generate --checkpoint_every 0 --bf16 --gradient_checkpointing --output_dir "$R/seven" \
    --overwrite > "$OUT/part2.log" 2>&1; echo "rc=$?" >> "$OUT/part2.log"
  cp "$R/seven/metrics.jsonl" "$OUT/part2_metrics.jsonl" 2>/dev/null; log "$OUT/part2.log"
fi

if has 3 && [ -f "$R/starter/starter.json" ]; then
  log "$OUT/warmstart.log" 3
  echo "== part 3: the starter with LoRA under DDP, 2 GPUs, real CUDA kernels (t=$SECONDS s)"
  timeout "${PART3_S:-900}" $DDP --num_processes 2 recipes/train_multiturn.py --model "$R/starter" --lora \
    --backend cuda --tasks "$TASKS" --tasks_per_step 4 --n_trajectories 8 --n_turns 2 --max_new_tokens 1024 \
    --steps "${PART3_STEPS:-4}" --lr 1e-4 --micro_batch_size 16 --generation_mode generate --output_dir "$R/lora" \
    --overwrite > "$OUT/part3.log" 2>&1; echo "rc=$?" >> "$OUT/part3.log"
  cp "$R/lora/metrics.jsonl" "$OUT/part3_metrics.jsonl" 2>/dev/null; log "$OUT/part3.log"
fi
has 3 && [ ! -f "$R/starter/starter.json" ] && echo "== part 3 not run: no starter (warmstart.log)"
echo "== done (t=$SECONDS s)"
