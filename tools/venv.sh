#!/usr/bin/env bash
# Create the project's virtual environment in .venv with pinned versions, unless it is already up to date.
# Idempotent: a stamp named after the hash of the files that define the environment says whether it is current.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
PY=${PYTHON:-python3}
hash=$(cat settings.ini setup.py tools/constraints.txt tools/venv.sh | sha1sum | cut -c1-16)
stamp="$VENV/.stamp-$hash"
if [ -f "$stamp" ]; then exit 0; fi
echo "venv: creating $VENV (torch 2.13.0 CPU, then the pinned dev requirements)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
export PIP_DISABLE_PIP_VERSION_CHECK=1
# torch first, pinned: 2.13.0 resolves to the local CPU wheel; an unpinned torch would download CUDA builds.
"$VENV/bin/pip" install -q torch==2.13.0 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
"$VENV/bin/pip" install -q -c tools/constraints.txt -e ".[dev]" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
rm -f "$VENV"/.stamp-*
touch "$stamp"
echo "venv: ready"
