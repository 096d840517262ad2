#!/usr/bin/env bash
# `make test-chapter NB=02_attention`: the tests of one chapter, each timed -- its unit
# tests (tests/test_attention.py, where it exists), nbdev_test on the notebook (runs
# every cell without a `notest` flag), and nbval on the notebook (runs it in a fresh
# kernel and compares each output with the stored one).
set -euo pipefail
cd "$(dirname "$0")/.."
NB=${1:-}
NB=${NB%.ipynb}; NB=${NB#nbs/}
[ -n "$NB" ] && [ -f "nbs/$NB.ipynb" ] || {
  echo "usage: make test-chapter NB=<notebook>, e.g. NB=02_attention;" \
       "got '${1:-}', which is not in nbs/:" >&2
  (cd nbs && ls *.ipynb | sed 's/\.ipynb$//' | tr '\n' ' ') >&2; echo >&2; exit 2; }
BIN=.venv/bin
source tools/kernels.sh  # the kernels the stored outputs were computed with
# one thread per process, as in make test and make execute: on 2 cores torch's default of
# two threads makes the small models of chapters 3-7 many times slower (and nbval time out)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
name=$(echo "$NB" | sed -E 's/^[0-9]+[a-zA-Z0-9]*_//')
rc=0
timed() {  # timed LABEL COMMAND...
  local label=$1; shift; local t=$(date +%s.%N) r=0
  echo "=== $label: $*"
  "$@" || r=$?
  local dt=$(python3 -c "print(f'{$(date +%s.%N) - $t:.1f}')")
  echo "=== $label: $([ $r = 0 ] && echo passed || echo FAILED) in ${dt}s"
  [ $r = 0 ] || rc=1
}
if [ -f "tests/test_$name.py" ]; then
  timed "unit tests" $BIN/python -m pytest -p no:cacheprovider -q "tests/test_$name.py"
else
  echo "=== unit tests: none (no tests/test_$name.py)"
fi
timed "nbdev_test" $BIN/nbdev_test --path "nbs/$NB.ipynb"
timed "nbval" $BIN/python -m pytest -p no:cacheprovider -q --nbval "nbs/$NB.ipynb"
exit $rc
