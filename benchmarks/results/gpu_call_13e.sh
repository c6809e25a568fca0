#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 13, call E): the GPU tests after the red-team and review fixes:
# kevin.core (new: static mode under bf16 autocast) and kevin.sandbox (the new static and built-library rules
# must still pass honest CUDA kernels).
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/t
timeout 200 python3 -m pytest -m gpu tests/core -v -p no:cacheprovider -p no:randomly > $O/t/core.log 2>&1; echo "rc=$?" >> $O/t/core.log
timeout 200 python3 -m pytest -m gpu tests/sandbox -v -p no:cacheprovider -p no:randomly > $O/t/sandbox.log 2>&1; echo "rc=$?" >> $O/t/sandbox.log
cp $O/t/*.log $OUT/
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/t/core.log | tail -20
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/t/sandbox.log | tail -12
grep -E "^E " $O/t/*.log | head -20 | cut -c1-300
