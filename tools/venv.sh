#!/usr/bin/env bash
# Create the project's virtual environment in .venv with pinned versions, unless it is already up to date.
# Idempotent: a stamp named after the hash of the files that define the environment says whether it is current.
# torch's version is pinned in one place, the `torch==` line of tools/constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
PY=${PYTHON:-python3}
hash=$(cat settings.ini setup.py pyproject.toml tools/constraints.txt tools/venv.sh tools/nbdev_guard.py \
       tools/nbdev_docstrings.py \
       | sha1sum | cut -c1-16)
stamp="$VENV/.stamp-$hash"
if [ -f "$stamp" ]; then exit 0; fi
TORCH=$(grep -m1 '^torch==' tools/constraints.txt) || { echo "venv: no torch== line in tools/constraints.txt" >&2; exit 1; }
echo "venv: creating $VENV ($TORCH CPU, then the pinned dev requirements)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
export PIP_DISABLE_PIP_VERSION_CHECK=1
quiet() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
# torch first, pinned: 2.13.0 resolves to the local CPU wheel; an unpinned torch would download CUDA builds.
quiet "$VENV/bin/pip" install -q "$TORCH"
# The editable install is built with the pinned setuptools and wheel (no build isolation: no download of the
# newest setuptools into a throwaway environment).
quiet "$VENV/bin/pip" install -q -c tools/constraints.txt setuptools wheel
quiet "$VENV/bin/pip" install -q --no-build-isolation -c tools/constraints.txt -e ".[dev]"
# nbdev_docs/nbdev_preview/nbdev_readme… without Quarto stop with one line instead of running sudo and pip.
site=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
cp tools/nbdev_guard.py "$site/_tnb_nbdev_guard.py"
# ...and nbdev_export writes docstrings for help() from the docments (tools/nbdev_docstrings.py).
cp tools/nbdev_docstrings.py "$site/_tnb_docstrings.py"
echo "import _tnb_nbdev_guard; _tnb_nbdev_guard.install()" > "$site/_tnb_nbdev_guard.pth"
rm -f "$VENV"/.stamp-*
touch "$stamp"
echo "venv: ready"
