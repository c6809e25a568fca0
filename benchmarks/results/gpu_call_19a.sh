#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 19, call A): the GPU tests of kevin.core (new: release_memory gives the
# memory back and the next call samples exactly; a longer cache lets the shorter one go), then what
# release_memory frees and costs at the 1.5B benchmark shape (benchmarks/release_memory.py).
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o; mkdir -p $O/t $O/m
timeout 230 python3 -m pytest -m gpu tests/core -v -p no:cacheprovider -p no:randomly > $O/t/tests.log 2>&1; echo "rc=$?" >> $O/t/tests.log
timeout $((580 - SECONDS)) python3 benchmarks/release_memory.py --shape 1.5b --out $O/m > $O/m/release.log 2>&1
cp $O/t/tests.log $O/m/release_memory.json $O/m/release.log $OUT/ 2>/dev/null
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/t/tests.log | tail -30
tail -30 $O/m/release.log | cut -c1-600
echo total $SECONDS
