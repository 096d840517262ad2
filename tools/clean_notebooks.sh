#!/usr/bin/env bash
# Store notebooks in the form nbdev_clean writes (`make clean-nbs`; `make execute` runs
# it after executing): execution counts null, no run timestamps or language_info, cell
# metadata only where settings.ini allows it. nbval still compares every stored output:
# conftest.py tells it that a cleaned cell is a run reference. usage:
# tools/clean_notebooks.sh [NOTEBOOK.ipynb ...]   (default: every notebook of nbs/)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- nbs/*.ipynb
for nb in "$@"; do
  [ -f "$nb" ] || { echo "clean-nbs: no notebook $nb" >&2; exit 1; }
  # nbdev_clean only warns (exit 0) about a notebook it cannot read: make that an error
  err=$(.venv/bin/nbdev_clean --fname "$nb" 2>&1) || { echo "$err" >&2; exit 1; }
  if [ -n "$err" ]; then echo "clean-nbs: $nb: $err" >&2; exit 1; fi
done
echo "clean-nbs: $# notebook(s) in nbdev_clean's form"
