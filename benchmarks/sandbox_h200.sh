#!/usr/bin/env bash
# The sandbox on an H200, in parts that each fit one 10-minute device command:
#   bash benchmarks/sandbox_h200.sh tests      # pytest -m gpu tests/sandbox; the Py* symbols honest builds import
#   bash benchmarks/sandbox_h200.sh fp         # false positives under full evaluate_many load (sandbox_false_positives.py)
#   bash benchmarks/sandbox_h200.sh deadline   # a 16-candidate batch with a hung load and a hung forward
#   bash benchmarks/sandbox_h200.sh cost       # per-candidate cost, timing noise, ratio to do_bench (sandbox_gpu.py)
# Results go to $OUT (or ./out). The build cache is shared between the parts of one machine (/tmp/kevin-h200).
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export KEVIN_CACHE_DIR=/tmp/kevin-h200 KEVIN_TEST_CACHE_DIR=/tmp/kevin-h200
OUT=${OUT:-out}; mkdir -p "$OUT" "$KEVIN_CACHE_DIR"
nvidia-smi --query-gpu=name,clocks.sm,memory.used --format=csv > "$OUT/gpu_$1.txt" 2>&1
case "$1" in
  tests)
    timeout 480 python3 -m pytest -m gpu tests/sandbox -v -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
    echo "rc=$?" >> "$OUT/gpu_tests.log"
    for so in "$KEVIN_CACHE_DIR"/ext/*/*.so; do
      echo "== $so"; nm -D --undefined-only "$so" | grep -E " _?Py" ; done > "$OUT/py_symbols.txt" 2>&1
    grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" "$OUT/gpu_tests.log" | tail -40 ;;
  fp)
    timeout 560 python3 benchmarks/sandbox_false_positives.py --device cuda ${FP_ARGS:-} --out "$OUT/fp_cuda.json" \
      > "$OUT/fp_cuda.log" 2>&1; echo "rc=$?" >> "$OUT/fp_cuda.log"; tail -40 "$OUT/fp_cuda.log" ;;
  deadline)
    timeout 560 python3 benchmarks/sandbox_deadline.py --device cuda --n 16 --deadline ${DEADLINE:-120} --out "$OUT" \
      > "$OUT/deadline.log" 2>&1; echo "rc=$?" >> "$OUT/deadline.log"; tail -30 "$OUT/deadline.log" ;;
  cost)
    timeout 560 python3 benchmarks/sandbox_gpu.py --phases warm,noise,dobench --out "$OUT" > "$OUT/cost.log" 2>&1
    echo "rc=$?" >> "$OUT/cost.log"; tail -30 "$OUT/cost.log" ;;
esac
echo "seconds $SECONDS"
