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
# The committed figures and the pinned digests were computed with AVX2 kernels: OpenBLAS's
# Haswell kernels for NumPy's matrix products, NumPy's own AVX2 (x86-64-v3) kernels for its
# element-wise math (exp, tanh, log...) and torch's AVX2 kernels for its CPU ops. On a machine
# with AVX-512 each library would pick wider kernels that sum or round in another order, and
# every figure built on them would differ in its last bits. Pinned to the AVX2 kernels on any
# x86-64 that has the x86-64-v3 instructions (AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE), the
# figures come out byte for byte and the pinned tests run on both kinds of machine. Elsewhere
# (ARM, an older x86-64) the pins stay unset: the kernels cannot run there (torch would warn
# that the value is invalid, NumPy would refuse to start). A value set by the user wins.
AVX2 := $(shell [ "$$(uname -m)" = x86_64 ] && for f in avx2 fma f16c bmi1 bmi2 abm movbe; \
	do grep -qw $$f /proc/cpuinfo 2>/dev/null || exit 1; done && echo yes)
ifeq ($(origin ATEN_CPU_CAPABILITY),undefined)
ATEN_CPU_CAPABILITY := $(if $(AVX2),avx2)
endif
ifneq ($(ATEN_CPU_CAPABILITY),)
export ATEN_CPU_CAPABILITY
endif
ifeq ($(origin OPENBLAS_CORETYPE),undefined)
OPENBLAS_CORETYPE := $(if $(AVX2),Haswell)
endif
ifneq ($(OPENBLAS_CORETYPE),)
export OPENBLAS_CORETYPE
endif
# NumPy refuses both variables at once, so either one set by the user leaves the pin unset
ifeq ($(origin NPY_ENABLE_CPU_FEATURES)$(origin NPY_DISABLE_CPU_FEATURES),undefinedundefined)
NPY_ENABLE_CPU_FEATURES := $(if $(AVX2),X86_V3)
endif
ifneq ($(NPY_ENABLE_CPU_FEATURES),)
export NPY_ENABLE_CPU_FEATURES
endif

.PHONY: test test-slow test-latest figures seed bench torch lock clean docs lab

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

# the language-model figures (lm_table, lm_pareto) train with the torch backend; their units
# are copied from the shipped seed cache where it holds them (`make seed`), else trained
figures: $(STAMP)
	$(PY) -m ecosim figures --out figures --jobs 2
	$(PY) -m ecosim readme

# retrain the seed cache (ecosim/data/seed_cache): after any edit to code the language-model
# experiments import, so that `make figures` keeps within its time; commit it with the code
seed: $(STAMP)
	$(PY) -m ecosim.experiments.seed --jobs 2

# the speed table (every rounding path with its peer, torch's CPU mirror included; ~1 min),
# then ecosim against gfloat and pychop
bench: $(STAMP)
	$(PY) benchmarks/bench_all.py
	$(PY) benchmarks/quantize.py --log2n 22

# The documentation site, built from the lock with every warning an error; the notebooks are
# rendered with the outputs they were committed with, never executed here (docs/conf.py).
docs: $(STAMP)
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html
	@echo "open docs/_build/html/index.html"

# JupyterLab on the notebooks, in the locked environment
lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks

# Refresh the lock to the newest releases the ranges admit (pip-tools' pip-compile, for this
# Python: the lock is for CPython 3.11), then run `make test` and `make figures` and commit the
# lock with the figures it produces.
lock:
	rm -rf .venv-lock
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet 'pip-tools==7.6.2'
	.venv-lock/bin/pip-compile --quiet --upgrade --extra test --extra torch --extra bench --extra cluster --extra docs \
		--strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links \
		-c requirements/torch-cpu.txt -o $(LOCK) pyproject.toml
	rm -rf .venv-lock

clean:
	rm -rf $(VENV) $(LATEST) .venv-lock .pytest_cache .hypothesis build *.egg-info docs/_build
