#!/usr/bin/env bash
# `make test`: every test of the project, in stages, each timed. Sets up what it needs on a fresh machine
# (the pinned .venv, Debian's chromium for the browser test, KaTeX from npm for the site).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
export TNB_REQUIRE_SITE=1  # the site is built below: a missing site fails the site tests instead of skipping them
declare -a NAMES=() SECS=()
T0=$(date +%s.%N)
stage() {  # stage NAME COMMAND...: run and time one stage
  local name=$1; shift
  echo; echo "=== stage: $name"
  local t=$(date +%s.%N) rc=0
  "$@" || rc=$?
  local dt=$(python3 -c "print(f'{$(date +%s.%N) - $t:.1f}')")
  NAMES+=("$name"); SECS+=("$dt${rc:+$( [ $rc = 0 ] || echo " (FAILED)")}")
  echo "=== stage: $name took ${dt}s"
  return $rc
}
summary() {
  echo; echo "=== time per stage"
  for i in "${!NAMES[@]}"; do printf '  %-28s %7ss\n' "${NAMES[$i]}" "${SECS[$i]}"; done
  printf '  %-28s %7ss\n' "total" "$(python3 -c "print(f'{$(date +%s.%N) - $T0:.1f}')")"
  # CPU time (user + system) of every process this script waited for: the figure issue 39 halves; on a shared
  # machine it moves far less than the wall time does
  local t=.build/times.txt; mkdir -p .build; times >"$t"   # not in $(...): a subshell's children start at zero
  local cpu; cpu=$(tail -1 "$t" | python3 -c "import re, sys
m = lambda s: int(s[0]) * 60 + float(s[1])
u, s = [m(x) for x in re.findall(r'(\d+)m([\d.]+)s', sys.stdin.read())]
print(f'{u + s:.0f}s (user {u:.0f}s, system {s:.0f}s)')")
  printf '  %-28s %s\n' "CPU, all processes" "$cpu"
}
trap summary EXIT

sync_check() {  # the package is exactly what the notebooks export: exporting changes nothing in transformer_nb/
  local before after
  before=$(cd transformer_nb && find . -name '*.py' -type f | sort | xargs sha1sum)
  $BIN/nbdev_export
  after=$(cd transformer_nb && find . -name '*.py' -type f | sort | xargs sha1sum)
  if [ "$before" != "$after" ]; then
    echo "nbdev_export changed transformer_nb/ -- the package was out of step with nbs/ (now re-exported):"
    diff <(echo "$before") <(echo "$after") || true
    return 1
  fi
  echo "transformer_nb/ is in sync with nbs/ ($(echo "$after" | wc -l) files)"
}

browser_deps() {  # Debian's chromium drives the browser test (Playwright's own browser download cannot work offline)
  if [ -x /usr/bin/chromium ]; then echo "chromium: $(/usr/bin/chromium --version 2>/dev/null)"; return; fi
  local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
  echo "chromium: $(/usr/bin/chromium --version 2>/dev/null)"
}

stage "venv"                 tools/venv.sh
stage "export + sync check"  sync_check
stage "lint (ruff)"          $BIN/ruff check --no-cache nbs transformer_nb tests tools benchmarks
# The site: what writes into the repository (exercises, diagrams, nbdev's files) first; then the pages, in the
# background beside pytest, which has a core to spare now and then: the tests of the site wait for them (the `docs`
# fixture of tests/conftest.py reads the exit status that TNB_SITE_STATUS names).
stage "site: prepare"        $BIN/python tools/build_site.py prepare
SITE_LOG=.build/site.log; export TNB_SITE_STATUS=$PWD/.build/site.status
mkdir -p .build; rm -f "$TNB_SITE_STATUS"
SITE_T0=$(date +%s.%N)
( rc=0; $BIN/python tools/build_site.py pages >"$SITE_LOG" 2>&1 || rc=$?
  python3 -c "print(f'{$(date +%s.%N) - $SITE_T0:.1f}')" >.build/site.seconds
  echo $rc >"$TNB_SITE_STATUS.tmp"; mv "$TNB_SITE_STATUS.tmp" "$TNB_SITE_STATUS" ) &
SITE_PID=$!
site_pages() {  # the background build's outcome, as a stage of its own: its log, its time, its exit status
  wait $SITE_PID || true
  grep -v "^ *warn(\|^---\|Found cells containing" "$SITE_LOG" | tail -12
  local rc; rc=$(cat "$TNB_SITE_STATUS" 2>/dev/null || echo 1)
  NAMES+=("site: pages (beside pytest)"); SECS+=("$(cat .build/site.seconds 2>/dev/null || echo '?')$([ "$rc" = 0 ] || echo ' (FAILED)')")
  [ "$rc" = 0 ] || { echo "the site build failed (exit $rc): $SITE_LOG"; return 1; }
}
stage "browser dependencies" browser_deps
# Two pytest workers on two cores, each test process and notebook kernel on one thread: torch's default of two
# threads per process would put four busy threads on two cores, which slows these small models several times.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# The kernels the stored outputs were computed with (AVX2), whatever the processor: see tools/kernels.sh.
source tools/kernels.sh
# One pytest run on two workers: unit tests, the site and browser checks, and nbval, which executes every notebook
# once and compares each cell's output with the stored one (a notebook's cells stay together: --dist loadscope).
rc=0
stage "pytest + nbval"       $BIN/python -m pytest -p no:cacheprovider tests nbs --nbval -q -n 2 --dist loadscope --no-loadscope-reorder \
                             --durations=15 ${TNB_JUNIT:+--junitxml=$TNB_JUNIT} \
                             -o console_output_style=classic || rc=$?
echo; echo "=== the site's pages, built beside pytest"
site_pages || rc=1
exit $rc
