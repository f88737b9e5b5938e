# The two commands a fresh machine needs: `make test` and `make figures`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test test-slow figures bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -p no:cacheprovider

test-slow: $(STAMP)
	$(PY) -m pytest -p no:cacheprovider -m slow

figures: $(STAMP)
	$(PY) -m ecosim figures --out figures

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) benchmarks/quantize.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
