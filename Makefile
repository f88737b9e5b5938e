# The two commands a fresh machine needs: `make test` and `make figures`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TORCH  := $(VENV)/.torch
# ecosim's matmuls are small: one BLAS thread per process is faster than a pool fighting over
# two cores (measured 4 vs 21 ms per MLP step under load). A value set by the user wins.
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1

.PHONY: test test-slow figures bench torch clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The optional torch backend: the pinned CPU build (a bare `pip install torch` may fetch a
# multi-GB CUDA build), then the extra, which that version satisfies.
$(TORCH): $(STAMP)
	$(PY) -m pip install --quiet 'torch==2.13.0'
	$(PY) -m pip install --quiet -e '.[test,torch]'
	touch $(TORCH)

torch: $(TORCH)

test: $(STAMP)
	$(PY) -m pytest -p no:cacheprovider

test-slow: $(STAMP)
	$(PY) -m pytest -p no:cacheprovider -m slow

# the language-model figures (lm_table, lm_pareto) train with the torch backend
figures: $(TORCH)
	$(PY) -m ecosim figures --out figures --jobs 2
	$(PY) -m ecosim readme

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) benchmarks/quantize.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
