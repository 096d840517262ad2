# The two commands of the README:  `make site`  builds the documentation site into _docs/,
#                                  `make test`  runs every test.
# `make bench` runs the benchmark of the chapter "Benchmark" and writes benchmarks/results/cpu.json.
# Both create .venv (pinned versions) when it is missing or out of date, and export the package from nbs/.
SHELL := /bin/bash
.DEFAULT_GOAL := site
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000

.PHONY: site test bench serve venv export execute clean

venv:
	@tools/venv.sh

export: venv
	@$(BIN)/nbdev_export

site: export
	@$(BIN)/python tools/build_site.py

test:
	@tools/test.sh

bench: export
	@$(BIN)/python benchmarks/run.py

# Optional: serve the built site on localhost.
serve:
	@[ -f _docs/index.html ] || $(MAKE) site
	@echo "serving _docs/ at http://127.0.0.1:$(PORT)/"
	@$(BIN)/python -m http.server $(PORT) --bind 127.0.0.1 --directory _docs

# For authors: run every notebook in place from a fresh kernel, storing its outputs (deterministic: same bytes each run).
execute: export
	@for nb in nbs/[0-9]*.ipynb nbs/index.ipynb; do echo "execute: $$nb"; \
	  $(BIN)/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=600 --ExecutePreprocessor.record_timing=False "$$nb" || exit 1; \
	  $(BIN)/python tools/strip_timing.py "$$nb"; done

clean:
	rm -rf _proc _docs .build artifacts
