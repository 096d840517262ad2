#!/usr/bin/env bash
# `make hooks`: git's pre-commit hook (tools/pre-commit: the package in step with the
# notebooks, notebooks clean, ruff), and what nbdev_install_hooks would set up for git, run
# with this project's .venv. .gitattributes (committed) sends notebook merge conflicts to the merge driver
# `nbdev-merge`; this defines it as .venv/bin/nbdev_merge by its full path, so that it
# works without activating the environment (nbdev_install_hooks writes a bare
# `nbdev_merge`, found only on an activated PATH, and cannot install its post-merge hook
# in a git worktree). Until this has run, git merges notebooks with its ordinary text
# merge. Note: the repository's config is shared by all its worktrees.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
[ -x .venv/bin/nbdev_merge ] || {
  echo "hooks: .venv/bin/nbdev_merge missing: run make venv" >&2; exit 1; }
grep -qxF '*.ipynb merge=nbdev-merge' .gitattributes || {
  echo "hooks: .gitattributes lacks the line '*.ipynb merge=nbdev-merge'" >&2; exit 1; }
git config --local merge.nbdev-merge.name "resolve conflicts with nbdev_fix"
git config --local merge.nbdev-merge.driver \
  "\"$root/.venv/bin/nbdev_merge\" %O %A %B %P"
echo "hooks: git now merges notebooks with $root/.venv/bin/nbdev_merge"
# The hooks folder is shared by every worktree of the repository: the hook runs the
# tools/pre-commit of the worktree that commits.
hooks=$(git rev-parse --path-format=absolute --git-common-dir)/hooks
mkdir -p "$hooks"
if [ -e "$hooks/pre-commit" ] && ! grep -q "tools/pre-commit" "$hooks/pre-commit"; then
  echo "hooks: $hooks/pre-commit exists and is not ours: left alone" >&2
else
  printf '#!/bin/sh\nexec "$(git rev-parse --show-toplevel)/tools/pre-commit"\n' >"$hooks/pre-commit"
  chmod +x "$hooks/pre-commit"
  echo "hooks: pre-commit runs tools/pre-commit (export, clean, ruff) before each commit"
fi
