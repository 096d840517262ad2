#!/usr/bin/env bash
# Create the project's virtual environment in .venv with pinned versions, unless it is already up to date.
# Idempotent: a stamp named after the hash of the files that define the environment says whether it is current.
# torch's version is pinned in one place, the `torch==` line of tools/constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
PY=${PYTHON:-python3}
hash=$(cat settings.ini setup.py pyproject.toml tools/constraints.txt tools/venv.sh | sha1sum | cut -c1-16)
stamp="$VENV/.stamp-$hash"
if [ -f "$stamp" ]; then exit 0; fi
TORCH=$(grep -m1 '^torch==' tools/constraints.txt) || { echo "venv: no torch== line in tools/constraints.txt" >&2; exit 1; }
echo "venv: creating $VENV ($TORCH CPU, then the pinned dev requirements)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
export PIP_DISABLE_PIP_VERSION_CHECK=1
quiet() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
# torch first, pinned, and its CPU build (an unpinned torch would download another release). On Linux, PyPI's
# torch is a CUDA build, about 3 GB with its nvidia-* packages; the CPU wheel is about 190 MB. So: a torch wheel
# pip's own configuration offers without an index (a --find-links folder, as on the machines this book is built
# on; its requirements then come from the usual indexes), else PyTorch's CPU index
# (https://pytorch.org/get-started/previous-versions/, "CPU only"); on macOS PyPI's wheels are the CPU build.
# TORCH_INDEX=<url> installs torch from that index instead (e.g. a CUDA one).
CPU_INDEX=https://download.pytorch.org/whl/cpu
if [ -n "${TORCH_INDEX:-}" ]; then
  quiet "$VENV/bin/pip" install -q "$TORCH" --index-url "$TORCH_INDEX"
elif "$VENV/bin/pip" install -q --no-index --no-deps "$TORCH" >/dev/null 2>&1; then
  quiet "$VENV/bin/pip" install -q "$TORCH"
elif [ "$(uname -s)" = Darwin ]; then
  quiet "$VENV/bin/pip" install -q "$TORCH"
else
  echo "venv: $TORCH from PyTorch's CPU index, $CPU_INDEX"
  # where that index cannot be reached (a machine that sees only the package registries), PyPI's build
  quiet "$VENV/bin/pip" install -q "$TORCH" --index-url "$CPU_INDEX" || {
    echo "venv: PyTorch's CPU index did not answer; $TORCH from the package index instead"
    quiet "$VENV/bin/pip" install -q "$TORCH"; }
fi
# The editable install is built with the pinned setuptools and wheel (no build isolation: no download of the
# newest setuptools into a throwaway environment).
quiet "$VENV/bin/pip" install -q -c tools/constraints.txt setuptools wheel
quiet "$VENV/bin/pip" install -q --no-build-isolation -c tools/constraints.txt -e ".[dev]"
# nbdev itself is stock: no .pth file patches it (earlier versions of this script installed two; remove them).
site=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
rm -f "$site/_tnb_nbdev_guard.pth" "$site/_tnb_nbdev_guard.py" "$site/_tnb_docstrings.py"
# Without `quarto` on the PATH, nbdev's nbdev_docs, nbdev_preview, nbdev_proc_nbs, nbdev_install and
# nbdev_install_quarto download Quarto and run `sudo dpkg -i` (then nbdev_install runs `pip install -e .[dev]`
# with the first pip on the PATH). Their launchers in .venv/bin, which pip wrote, are replaced by ones that stop
# first with one line while `quarto` is missing, and otherwise call nbdev's own function.
launcher() {  # command, function of nbdev.quarto
  cat > "$VENV/bin/$1" <<EOF
#!$(cd "$VENV" && pwd)/bin/python
# Written by tools/venv.sh in place of pip's launcher: without Quarto, nbdev would install it with sudo.
import shutil, sys
if shutil.which("quarto") is None:
    sys.exit("$1: needs Quarto, which is not on the PATH; stopped before nbdev runs sudo or pip "
             "to install it. Instead, build the site with \`make site\`, serve it with \`make serve\`.")
from nbdev.quarto import $2
sys.exit($2())
EOF
  chmod +x "$VENV/bin/$1"
}
launcher nbdev_docs nbdev_docs
launcher nbdev_preview nbdev_preview
launcher nbdev_proc_nbs nbdev_proc_nbs
launcher nbdev_install install
launcher nbdev_install_quarto install_quarto
rm -f "$VENV"/.stamp-*
touch "$stamp"
echo "venv: ready"
