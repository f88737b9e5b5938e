# The two commands a fresh machine needs: `make test` and `make figures`.
# Both install the locked environment (requirements/lock.txt: exact versions of every package,
# the torch CPU build included) into .venv, so a fresh machine gets the set that was tested and
# the committed figures reproduce byte for byte. pyproject.toml keeps compatible ranges for
# `pip install ecosim` into your own environment; `make test-latest` checks those ranges against
# the newest releases.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
LOCK   := requirements/lock.txt
STAMP  := $(VENV)/.installed
LATEST := .venv-latest
# ecosim's matmuls are small: one BLAS thread per process is faster than a pool fighting over
# two cores (measured 4 vs 21 ms per MLP step under load). A value set by the user wins.
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1
# torch's CPU ops run kernels built for the CPU's vector width, and an AVX-512 kernel sums in
# another order than the AVX2 one the committed figures were built with: pinned to AVX2 on an
# x86-64 that has it, the language-model figures come out byte for byte on both kinds of
# machine (measured on an AMD EPYC with AVX-512: all LM figures equal, none slower). Elsewhere
# (ARM, an x86-64 without AVX2) it stays unset: torch would warn that the value is invalid
# there, and the suite turns warnings into errors. A value set by the user wins.
ifeq ($(origin ATEN_CPU_CAPABILITY),undefined)
ATEN_CPU_CAPABILITY := $(shell [ "$$(uname -m)" = x86_64 ] && grep -qw avx2 /proc/cpuinfo 2>/dev/null && echo avx2)
endif
ifneq ($(ATEN_CPU_CAPABILITY),)
export ATEN_CPU_CAPABILITY
endif

.PHONY: test test-slow test-latest figures bench torch lock clean

# The lock pins setuptools too, so the editable install builds offline from the venv's own.
$(STAMP): pyproject.toml $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# torch is part of the lock; kept as a name for older instructions
torch: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -p no:cacheprovider

test-slow: $(STAMP)
	$(PY) -m pytest -p no:cacheprovider -m slow

# The newest releases that pyproject.toml's ranges admit, in a venv of their own, then the
# suite: drift is found by a command, not by a user. torch excepted: the newest build on the
# package index is a CUDA build of several GB, so the CPU build of requirements/torch-cpu.txt
# stays (pass TORCH_PIN=... to try another).
TORCH_PIN ?= requirements/torch-cpu.txt
test-latest:
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install --quiet --upgrade pip
	$(LATEST)/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager \
		-c $(TORCH_PIN) -e '.[test,torch,bench,cluster]'
	$(LATEST)/bin/python -m pip freeze --exclude-editable > $(LATEST)/versions.txt
	@echo "newest versions under test: $$(grep -Ei '^(numpy|scipy|ml.dtypes|matplotlib|torch|gfloat|hypothesis|pytest)=' $(LATEST)/versions.txt | tr '\n' ' ')"
	$(LATEST)/bin/python -m pytest -p no:cacheprovider

# the language-model figures (lm_table, lm_pareto) train with the torch backend
figures: $(STAMP)
	$(PY) -m ecosim figures --out figures --jobs 2
	$(PY) -m ecosim readme

# the speed table (every rounding path with its peer, torch's CPU mirror included; ~1 min),
# then ecosim against gfloat and pychop
bench: $(STAMP)
	$(PY) benchmarks/bench_all.py
	$(PY) benchmarks/quantize.py --log2n 22

# Refresh the lock to the newest releases the ranges admit (pip-tools' pip-compile, for this
# Python: the lock is for CPython 3.11), then run `make test` and `make figures` and commit the
# lock with the figures it produces.
lock:
	rm -rf .venv-lock
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet 'pip-tools==7.6.2'
	.venv-lock/bin/pip-compile --quiet --upgrade --extra test --extra torch --extra bench --extra cluster \
		--strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links \
		-c requirements/torch-cpu.txt -o $(LOCK) pyproject.toml
	rm -rf .venv-lock

clean:
	rm -rf $(VENV) $(LATEST) .venv-lock .pytest_cache .hypothesis build *.egg-info
