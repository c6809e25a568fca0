#!/usr/bin/env bash
# One device call on nvidia-h200 (stop 20, call B): the GPU tests of kevin.core with stop 20's code
# (Generation.in_thought read from the prompt's tail, load_model's disable_dropout).
set -u
export PYTHONUNBUFFERED=1
O=/tmp/o20b; mkdir -p $O
timeout 300 python3 -m pytest -m gpu tests/core -v -p no:cacheprovider -p no:randomly > $O/tests.log 2>&1; echo "rc=$?" >> $O/tests.log
cp $O/tests.log $OUT/
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/tests.log | tail -25
echo total $SECONDS
