# Two commands do all the set-up on a fresh machine (make test also builds .venvs/mxnet, .venvs/paddle,
# .venvs/paddle-ps, .venvs/mlflow, .venvs/launchers, and the Kubernetes control plane and real node the tests run
# against, cached under ~/.cache):
#   make example   installs what it needs and runs the PyTorch example DAG on the local backend
#   make test      installs the test dependencies and runs the default test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: example test test-slow test-all horovod lint wheel mxnet paddle paddle-ps mlflow tensorboard launchers browser kube bench gpu-carry clean

# pip's output goes to a log that is shown only when the install fails. --no-compile: pip's byte-compiling of every
# module installed was half the environment's install (98 s -> 53 s); Python compiles what is imported, once, as it
# is imported. For that, no recipe inherits PYTHONDONTWRITEBYTECODE: with it, every process (each test's replicas
# among them) would compile torch, TensorFlow and Airflow from their sources again at every import.
PIP_INSTALL = $(PY) -m pip install --quiet --disable-pip-version-check --no-compile
unexport PYTHONDONTWRITEBYTECODE

$(VENV)/.installed-base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -e ".[torch]" > $(VENV)/pip.log 2>&1 || (cat $(VENV)/pip.log; exit 1)
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed-base
	$(PIP_INSTALL) -e ".[test]" > $(VENV)/pip.log 2>&1 || (cat $(VENV)/pip.log; exit 1)
	touch $@

example: $(VENV)/.installed-base
	$(PY) scripts/run_example.py example_pytorch_ddp

mxnet:
	bash scripts/framework-venv.sh mxnet $(PYTHON)

paddle:
	bash scripts/framework-venv.sh paddle $(PYTHON)

paddle-ps:
	bash scripts/framework-venv.sh paddle-ps $(PYTHON)

# The MLflow tracking server the MLflow tests start (about 50 s to build once; the tests build it too when missing).
mlflow:
	bash scripts/framework-venv.sh mlflow $(PYTHON)

# TensorBoard's server and event writer for the slow TensorBoard test (about 20 s to build once; the test builds it
# too when missing).
tensorboard:
	bash scripts/framework-venv.sh tensorboard $(PYTHON)

# DeepSpeed and Accelerate over the CPU torch for the launcher tests (about 25 s to install, plus DeepSpeed's
# shared-memory collectives compiled once into torch's extension cache: 40 s of CPU; the tests build it when missing).
launchers:
	bash scripts/framework-venv.sh launchers $(PYTHON)

# The browser test drives Debian's Chromium; installed when missing and we may (root), else that test skips.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq chromium chromium-driver >/dev/null) || echo "no chromium: the browser test will skip"; }

# A real kube-apiserver, kube-controller-manager and kube-scheduler (v1.20.2 from Debian's source package) and etcd:
# built once into ~/.cache/airflow-distributed/kube/ (5-10 min on 2 cores), reused by every clone after that.
# Then a real node for tests/kube_node: Debian's containerd, runc, CNI plugins and registry, a kubelet from the same
# source (10-20 min on 2 shared cores) and the pods' images (about 7 min: debootstrap, the CPU torch wheel, the
# project), cached the same way; a later run rebuilds only the project's small layer when its sources changed.
kube:
	bash scripts/build-kube-control-plane.sh
	bash scripts/build-kube-node.sh
	nice -n 10 bash scripts/build-kube-node-images.sh >/dev/null

test: $(VENV)/.installed-test mxnet paddle paddle-ps mlflow launchers browser kube
	$(PY) -m pytest -m "not slow" --durations=30 $(PYTEST_ARGS)

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The built wheel in a clean virtualenv outside the checkout: the example DAGs parse with what users install.
wheel:
	bash scripts/check-wheel.sh $(PYTHON)

# Horovod for torch 2.13, built once per machine (2-10 min) and cached outside the checkout.
horovod: $(VENV)/.installed-test
	bash scripts/build-horovod.sh $(PY)

test-slow: $(VENV)/.installed-test mxnet paddle paddle-ps tensorboard launchers horovod
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

# The default and the slow tests in one pytest session (CI's run): the same tests as `make test` then `make test-slow`,
# but what each session sets up is set up once: the collection (it imports TensorFlow, torch and JAX: 30-90 s on 2
# busy cores), the Airflow database, the control planes, the real node, the Ray cluster and each module's servers.
test-all: $(VENV)/.installed-test mxnet paddle paddle-ps mlflow tensorboard launchers browser kube horovod
	$(PY) -m pytest --durations=30 $(PYTEST_ARGS)

bench: $(VENV)/.installed-test
	$(PY) bench/run.py

# The wheels the GPU check (bench/gpu_check) needs on a GPU machine without a network: Airflow, this checkout's wheel
# and their closure for CPython 3.12, into ~/.cache/airflow-distributed/gpu-carry (bench/README.md says how to run).
gpu-carry: $(VENV)/.installed-base
	$(PY) bench/gpu_check/carry.py build

clean:
	rm -rf $(VENV) .venvs .cache airflow-home
