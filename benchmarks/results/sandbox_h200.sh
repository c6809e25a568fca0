#!/usr/bin/env bash
# GPU proof of kevin.sandbox (results: benchmarks/results/sandbox_h200.md): every `pytest -m gpu` test of the
# repository, then benchmarks/sandbox_gpu.py with the candidate zygote on if its GPU test passed.
# Run from the repository root on a CUDA machine; pytest must be importable (the device image has none:
# see sandbox_h200.md for the wheels carried). Writes at most 8 files to $OUT.
set -u
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} KEVIN_CACHE_DIR=/tmp/kc KEVIN_TEST_CACHE_DIR=/tmp/kc PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/kevin_out}; mkdir -p "$OUT"
WORKERS=${WORKERS:-16}
{ nproc; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; git rev-parse HEAD 2>/dev/null; } > "$OUT/env.txt" 2>&1

echo "== pytest -m gpu (t=$SECONDS s)"
timeout "${TEST_S:-240}" python3 -m pytest -m gpu -v -p no:cacheprovider -p no:randomly \
  ${TESTS:-tests/sandbox tests/core/test_policy.py tests/data/test_builtin.py tests/data/test_synth.py} > "$OUT/gpu_tests.log" 2>&1
echo "rc=$?" >> "$OUT/gpu_tests.log"
grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/gpu_tests.log" | tail -30

PREFORK=off
grep -q "test_a_candidate_forked_from_the_zygote_runs_on_the_gpu PASSED" "$OUT/gpu_tests.log" && PREFORK=on
# Per-candidate overhead, timing noise and do_bench with the zygote on if its GPU test passed; the
# throughput phases with one fresh interpreter per candidate (prefork off), as in run 3's 16-worker phase.
echo "== benchmarks/sandbox_gpu.py, prefork $PREFORK (t=$SECONDS s)"
timeout "${BENCH_S:-150}" python3 benchmarks/sandbox_gpu.py --out "$OUT/a" --prefork "$PREFORK" \
  --phases "${PHASES:-warm,noise,dobench}" > "$OUT/bench_a.log" 2>&1
echo "rc=$? (t=$SECONDS s)" >> "$OUT/bench_a.log"
[ "${PHASES2:-}" = none ] && exit 0
echo "== benchmarks/sandbox_gpu.py, prefork ${PREFORK2:-off}, $WORKERS workers (t=$SECONDS s)"
timeout "${BENCH2_S:-300}" python3 benchmarks/sandbox_gpu.py --out "$OUT/b" --prefork "${PREFORK2:-off}" --workers "$WORKERS" \
  --n-single "${N_SINGLE:-2}" --phases "${PHASES2:-many,one}" > "$OUT/bench_b.log" 2>&1
echo "rc=$? (t=$SECONDS s)" >> "$OUT/bench_b.log"
# What honest CUDA extensions import from libc (for the CUDA side of kevin/sandbox/_symbols.py).
for so in $(find "$KEVIN_CACHE_DIR" -name '*.so' 2>/dev/null | head -4); do echo "== $so"; nm -D --undefined-only "$so" | grep -v ' U _Z'; done > "$OUT/cuda_symbols.txt" 2>&1
rm -f "$OUT"/a/sandbox_gpu.md "$OUT"/b/sandbox_gpu.md  # the .json holds the same; the device returns 8 files at most
grep -hv DEBUG "$OUT/bench_a.log" "$OUT/bench_b.log" | cut -c1-600 | tail -40
