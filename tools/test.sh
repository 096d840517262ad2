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
stage "lint (ruff)"          $BIN/ruff check --no-cache transformer_nb tests tools benchmarks
stage "site build"           $BIN/python tools/build_site.py
stage "browser dependencies" browser_deps
# Two pytest workers on two cores, each test process and notebook kernel on one thread: torch's default of two
# threads per process would put four busy threads on two cores, which slows these small models several times.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# One pytest run on two workers: unit tests, the site and browser checks, and nbval, which executes every notebook
# once and compares each cell's output with the stored one (a notebook's cells stay together: --dist loadscope).
stage "pytest + nbval"       $BIN/python -m pytest -p no:cacheprovider tests nbs --nbval -q -n 2 --dist loadscope \
                             --durations=15 \
                             -o console_output_style=classic
