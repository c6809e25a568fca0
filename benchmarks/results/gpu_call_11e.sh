#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 11, call E): what the image's toolchain links into every extension, then the
# PCH and symbol tests on this host's torch (call D's honest CPU extension was rejected for importing open and
# syscall), then the sandbox GPU tests as far as the time allows.
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0
O=/tmp/o; mkdir -p $O
{ c++ --version | head -1; f=$(c++ -print-file-name=libstdc++.so); echo "$f"; head -c 300 "$f" | strings | head -5
  python3 -c "from kevin.sandbox import _symbols; print('toolchain_imports', sorted(_symbols.toolchain_imports()))"; } > $O/toolchain.txt 2>&1
timeout 120 python3 -m pytest tests/sandbox/test_pch.py tests/sandbox/test_symbols.py -q -p no:cacheprovider -p no:randomly > $O/test_pch.log 2>&1; echo "rc=$?" >> $O/test_pch.log
timeout $((265 - SECONDS)) python3 -m pytest -m gpu tests/sandbox -v -p no:cacheprovider -p no:randomly > $O/gpu_tests.log 2>&1; echo "rc=$?" >> $O/gpu_tests.log
tar czf "$OUT/all.tgz" -C $O .
cat $O/toolchain.txt; tail -3 $O/test_pch.log
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/gpu_tests.log | tail -14
