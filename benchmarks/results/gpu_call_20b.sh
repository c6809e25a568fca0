#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 20, call B): the GPU tests of kevin.core with the final code of stop 20 (Generation.in_thought from the prompt tail, disable_dropout in load_model; was: the review's
# fixes: Inductor's CUDA-graph rerecord limit patched while sampling).
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o20b; mkdir -p $O
timeout 300 python3 -m pytest -m gpu tests/core -v -p no:cacheprovider -p no:randomly > $O/tests.log 2>&1; echo "rc=$?" >> $O/tests.log
cp $O/tests.log $OUT/
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/tests.log | tail -25
echo total $SECONDS
