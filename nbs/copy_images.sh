#!/bin/sh
# Quarto (and smalldocs) pre-render step: the diagrams live in the repository's top-level images/ (nbs/images is a
# symlink to it for Jupyter); nbdev's processing does not follow the symlink, so copy them into the rendered project.
set -e
src="$QUARTO_PROJECT_DIR/../images"
[ -d "$src" ] || src="$(dirname "$0")/../images"
mkdir -p "$QUARTO_PROJECT_DIR/images"
cp "$src"/*.png "$QUARTO_PROJECT_DIR/images/"
