#!/usr/bin/env bash
# `make test-torch TORCH=2.14.1`: the unit tests against another release of torch, in a
# side environment .build/torch-VERSION (the pinned dev requirements of
# tools/constraints.txt, with that torch instead of the pinned one). Left out: the site
# and browser tests (they check the built site, not torch), the packaging and
# nbdev-command tests (they check the project's own .venv). Releases other than the
# pinned one come from PyPI as CUDA builds: about 3 GB to download and 6 GB on disk per
# release; `rm -rf .build/torch-*` frees it.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=${1:-}
[ -n "$TORCH" ] || {
  echo "usage: make test-torch TORCH=<version>, e.g. TORCH=2.14.1 (got none)" >&2; exit 2
}
VENV=.build/torch-$TORCH
PY=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1
quiet() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
t0=$(date +%s)
if [ ! -f "$VENV/.ready" ]; then
  echo "test-torch: creating $VENV with torch==$TORCH"
  rm -rf "$VENV"; mkdir -p .build
  "$PY" -m venv "$VENV"
  grep -v '^torch==' tools/constraints.txt > "$VENV/constraints.txt"
  quiet "$VENV/bin/pip" install -q "torch==$TORCH"
  quiet "$VENV/bin/pip" install -q -c "$VENV/constraints.txt" setuptools wheel
  quiet "$VENV/bin/pip" install -q --no-build-isolation -c "$VENV/constraints.txt" \
    -e ".[dev]"
  touch "$VENV/.ready"
fi
got=$("$VENV/bin/python" -c "import torch; print(torch.__version__)")
echo "test-torch: torch $got ($(( $(date +%s) - t0 ))s to set up); unit tests:"
rc=0
"$VENV/bin/python" -m pytest -p no:cacheprovider -q -o console_output_style=classic \
  tests \
  --ignore=tests/test_site.py --ignore=tests/test_browser.py \
  --ignore=tests/test_packaging.py --ignore=tests/test_nbdev_commands.py || rc=$?
verdict=$([ $rc = 0 ] && echo passed || echo "FAILED (pytest exit $rc)")
echo "test-torch: torch $got: $verdict in $(( $(date +%s) - t0 ))s"
exit $rc
