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
done
# One process for all; nbdev_clean only warns (exit 0) on a notebook it cannot read: fail
.venv/bin/python - "$@" <<'EOF_PY'
import sys, warnings
from nbdev.clean import nbdev_clean
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    warnings.simplefilter("ignore", ResourceWarning)  # nbdev leaves files to the GC
    for nb in sys.argv[1:]: nbdev_clean.__wrapped__(fname=nb)
if caught:
    sys.exit("clean-nbs: " + "; ".join(str(w.message) for w in caught))
print(f"clean-nbs: {len(sys.argv) - 1} notebook(s) in nbdev_clean's form")
EOF_PY
