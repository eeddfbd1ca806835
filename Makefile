# Two commands: `make demo` (the main job on the synthetic world) and `make test`.
# Both bootstrap .venv in the repo when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
# pip warns once per package about find-links folders that a machine's pip configuration names
# but that do not exist; those lines say nothing about this install, so they are dropped (pip's
# own exit status still decides: pipefail).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PIP_QUIET := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }

.PHONY: venv demo compare compare-clip test lint format bench gpu-check clean

venv: $(STAMP)

$(STAMP): setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel $(PIP_QUIET)
	$(PIP) install -q -c constraints.txt torch==2.14.1 torchvision==0.29.1 $(PIP_QUIET)
	$(PIP) install -q -c constraints.txt -e ".[test]" $(PIP_QUIET)
	touch $(STAMP)

# The CPU kernels are pinned to AVX2 (torch's vectorised kernels and MKL's code path), so every
# x86 machine with AVX2 computes the same numbers for a seed (docs/reproducibility.md).
PIN_CPU := ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2

demo: $(STAMP)
	$(PIN_CPU) $(PY) tools/demo.py --jobs 2 --threads 1 --write-results

# The controls and every registered method on both backbones, one noisy split, one step budget
# per backbone, three seeds, the CPU kernels pinned as for the demo; the report folder (runs/compare/: compare.md with the computed
# claims, .csv, .json and PNG plots), then the README's and docs/comparison.md's result blocks.
# A rerun resumes. QUICK=1: one seed on a smaller world (runs/compare-quick/); FULL=1: 20/50/80%
# noise, 1000 images (runs/compare-full/). WORLD="--generator counting": another world
# (tools/make_synthetic.py options), its own folder; without rendered images: SGRAF only.
compare: $(STAMP)
	$(PIN_CPU) $(PY) tools/compare.py --plan $(if $(FULL),full,$(if $(QUICK),quick,default)) --jobs 2 \
		--write-results $(if $(WORLD),--world="$(WORLD)")

# The CLIP track on the two CLIP worlds in the regime of real fine-tuning (docs/comparison.md):
# the counting world and the default generator's world with fuller captions, each at 0, 20 and
# 50% noise, three seeds; the report folders runs/compare-clip-{counting,fuller}/ and the
# README's and docs/comparison.md's blocks of the same names. The stand-in's pool calls red
# "crimson" (--pool-shift renamed), so the fine-tune has a word to teach. Both worlds run even
# where a cell of the first fails (the exit status is 1 then, as for make compare).
CLIP_TRACK := $(PIN_CPU) $(PY) tools/compare.py --plan default --backbone clip --ratios 0.2 0.5 \
	--pool-shift renamed --jobs 2 --write-results
compare-clip: $(STAMP)
	rc=0; \
	$(CLIP_TRACK) --world "--generator counting" --out runs/compare-clip-counting \
		--block compare-clip-counting || rc=1; \
	$(CLIP_TRACK) --world "--partialness 0.3" --out runs/compare-clip-fuller \
		--block compare-clip-fuller || rc=1; \
	exit $$rc

# pytest's exit code 5 (no test collected) passes through as 5, which .ci/run reports.
test: $(STAMP)
	@echo "$(PY) -m pytest -q tests"
	@$(PY) -m pytest -q tests; rc=$$?; [ $$rc -ne 5 ] || echo "pytest collected no tests (exit 5)"; exit $$rc

# lint_prose: no words about how the project is developed, no citations of files outside it.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) tools/lint_prose.py

format: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

bench: $(STAMP)
	$(PY) tools/bench.py scoring --quick --json

# The CUDA path (methods x backbones with amp, scorers, throughput) as one table; without
# CUDA it says so and exits 0.
gpu-check: $(STAMP)
	$(PY) tools/gpu_check.py

clean:
	rm -rf runs data/synthetic .pytest_cache
