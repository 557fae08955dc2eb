# Two commands do all the set-up on a fresh machine:
#   make example   installs what it needs and runs the PyTorch example DAG on the local backend
#   make test      installs the test dependencies and runs the default test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: example test test-slow mxnet bench clean

$(VENV)/.installed-base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[torch]"
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed-base
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[test]"
	touch $@

example: $(VENV)/.installed-base
	$(PY) scripts/run_example.py example_pytorch_ddp

mxnet:
	bash scripts/mxnet-venv.sh $(PYTHON)

test: $(VENV)/.installed-test mxnet
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

test-slow: $(VENV)/.installed-test mxnet
	bash scripts/build-horovod.sh $(PY)
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

bench: $(VENV)/.installed-test
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .venvs .cache airflow-home
