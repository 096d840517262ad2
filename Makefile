# The two commands of the README:  `make site`  builds the documentation site into _docs/,
#                                  `make test`  runs every test.
# `make bench` runs the benchmark of the chapter "Benchmark" and writes benchmarks/results/cpu.json; then chapter 11f's
# GPT-2 and Llama-style models against transformers' (benchmarks/modern_bench.py: its figures and profiles go to
# benchmarks/results/modern_bench.json, which chapter 11f reads).
# Both create .venv (pinned versions) when it is missing or out of date, and export the package from nbs/.
SHELL := /bin/bash
.DEFAULT_GOAL := site
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000

.PHONY: site test bench serve venv export execute clean clean-nbs test-chapter test-torch hooks

venv:
	@tools/venv.sh

export: venv
	@$(BIN)/nbdev_export

site: export
	@$(BIN)/python tools/build_site.py

test:
	@tools/test.sh

# The benchmark's own dependency (transformers, for GPT-2), pinned in tools/bench-constraints.txt; `make venv` installs
# it too (a dev requirement since chapter 11f's converters), so this line only helps an older .venv.
bench: export
	@$(BIN)/python -c "import transformers" 2>/dev/null || \
	  $(BIN)/pip install -q -c tools/bench-constraints.txt "transformers==5.23.0"
	@$(BIN)/python benchmarks/run.py
	@$(BIN)/python benchmarks/run.py --gpt
	@$(BIN)/python benchmarks/modern_bench.py --runs 3 --profile --threads 1 --save benchmarks/results/modern_bench.json

# Optional: serve the built site on localhost.
serve:
	@[ -f _docs/index.html ] || $(MAKE) site
	@echo "serving _docs/ at http://127.0.0.1:$(PORT)/"
	@$(BIN)/python -m http.server $(PORT) --bind 127.0.0.1 --directory _docs

# For authors: run notebooks in place from a fresh kernel, storing their outputs in nbdev_clean's form
# (deterministic: same bytes each run, with the AVX2 kernels of tools/kernels.sh). All of them, or one:
# `make execute NB=02_attention`.
NBS = $(if $(NB),nbs/$(NB:.ipynb=).ipynb,nbs/[0-9]*.ipynb nbs/index.ipynb)
execute: export
	@source tools/kernels.sh; for nb in $(NBS); do echo "execute: $$nb"; \
	  OMP_NUM_THREADS=1 $(BIN)/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=600 --ExecutePreprocessor.record_timing=False "$$nb" || exit 1; \
	  tools/clean_notebooks.sh "$$nb" || exit 1; done

# Store every notebook (or NB=...) as nbdev_clean writes it, as tests/test_package.py requires.
clean-nbs: venv
	@tools/clean_notebooks.sh $(if $(NB),nbs/$(NB:.ipynb=).ipynb)

# One chapter's tests, each timed: `make test-chapter NB=02_attention` (unit tests, nbdev_test, nbval).
test-chapter: export
	@tools/test_chapter.sh "$(NB)"

# The unit tests against another torch in .build/torch-VERSION: `make test-torch TORCH=2.14.1` (about 3 GB download).
test-torch:
	@tools/test_torch.sh "$(TORCH)"

# nbdev's git merge driver and post-merge hook, run with this project's .venv (instead of `nbdev_install_hooks`).
hooks: venv
	@tools/hooks.sh

clean:
	rm -rf _proc _docs .build artifacts
