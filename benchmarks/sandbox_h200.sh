#!/usr/bin/env bash
# The sandbox on an H200, in parts (several may be given; each part's time limit in seconds after a colon):
#   bash benchmarks/sandbox_h200.sh tests:280 deadline:120 redteam:150   # one 10-minute device command
#   bash benchmarks/sandbox_h200.sh fp:330 cost:150                       # another
# tests:    pytest -m gpu tests/sandbox, and the Py* symbols the honest builds import (for the symbol allow-list)
# deadline: a 16-candidate batch with a hung load and a hung forward (benchmarks/sandbox_deadline.py)
# redteam:  the CUDA attack candidates of benchmarks/redteam_cuda/ (run_attacks.py)
# fp:       false positives under full evaluate_many load (benchmarks/sandbox_false_positives.py, $FP_ARGS;
#           FP_OUT=file with FP_ARGS="--append ..." adds rounds to an earlier run's records)
# cost:     per-candidate cost, timing noise, ratio to do_bench (benchmarks/sandbox_gpu.py)
# Results go to $OUT (or ./out). The build cache is shared between the parts (/tmp/kevin-h200).
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export KEVIN_CACHE_DIR=/tmp/kevin-h200 KEVIN_TEST_CACHE_DIR=/tmp/kevin-h200
OUT=${OUT:-out}; mkdir -p "$OUT" "$KEVIN_CACHE_DIR"
nvidia-smi --query-gpu=name,clocks.sm,memory.used --format=csv > "$OUT/gpu.txt" 2>&1
for part in "$@"; do
  name=${part%%:*}; limit=${part#*:}; [ "$limit" = "$part" ] && limit=300
  echo "== $name (limit $limit s, at $SECONDS s)"
  case "$name" in
    tests)
      timeout "$limit" python3 -m pytest -m gpu tests/sandbox -v -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
      echo "rc=$?" >> "$OUT/gpu_tests.log"
      for so in "$KEVIN_CACHE_DIR"/ext/*/*.so; do
        echo "== $(basename "$so")"; nm -D --undefined-only "$so" | grep -E " _?Py" ; done > "$OUT/py_symbols.txt" 2>&1
      grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" "$OUT/gpu_tests.log" | tail -40 ;;
    deadline)
      timeout "$limit" python3 benchmarks/sandbox_deadline.py --device cuda --n 16 --deadline "${DEADLINE:-60}" \
        --out "$OUT" > "$OUT/deadline.log" 2>&1; echo "rc=$?" >> "$OUT/deadline.log"; tail -25 "$OUT/deadline.log" ;;
    redteam)
      timeout "$limit" python3 benchmarks/redteam_cuda/run_attacks.py --out "$OUT/redteam_cuda.json" \
        > "$OUT/redteam_cuda.log" 2>&1; echo "rc=$?" >> "$OUT/redteam_cuda.log"; tail -40 "$OUT/redteam_cuda.log" ;;
    fp)
      # FP_OUT with FP_ARGS="--append ...": continue the records of an earlier run kept in the tree
      timeout "$limit" python3 benchmarks/sandbox_false_positives.py --device cuda ${FP_ARGS:-} \
        --out "${FP_OUT:-$OUT/fp_cuda.json}" > "$OUT/fp_cuda.log" 2>&1; echo "rc=$?" >> "$OUT/fp_cuda.log"
      [ -n "${FP_OUT:-}" ] && cp "$FP_OUT" "$OUT/fp_cuda.json"; tail -40 "$OUT/fp_cuda.log" ;;
    cost)
      timeout "$limit" python3 benchmarks/sandbox_gpu.py --phases warm,noise,dobench --cv-runs 5 --out "$OUT" \
        > "$OUT/cost.log" 2>&1; echo "rc=$?" >> "$OUT/cost.log"; tail -30 "$OUT/cost.log" ;;
  esac
done
echo "seconds $SECONDS"
