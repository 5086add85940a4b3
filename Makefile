# The README's quick start: `make demo` and `make test`. Both set up .venv in the repo root.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned to the CPU wheel this machine keeps; a bare `torch` would pull a CUDA build.
TORCH := torch==2.13.0
# Every backend that can run on this machine.
BACKENDS := plugins/numpy_backend plugins/dnnl_backend plugins/sycl_backend
# The CUDA backend without a GPU: CuPy (137 MB wheel; no cuDNN, no frontend) lets the tests prove that it
# loads, says why it is unavailable and is never chosen. On a GPU: pip install "plugins/cuda_backend[cu12]".
CUDA_CI := -e plugins/cuda_backend cupy-cuda12x==14.2.0
PIP := $(BIN)/python -m pip --disable-pip-version-check --quiet

.PHONY: demo test test-repeat setup setup-test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first and pinned, so that nothing later pulls another build of it.
setup: $(BIN)/python
	$(PIP) install $(TORCH)
	$(PIP) install -e ".[torch]" $(foreach backend,$(BACKENDS),-e $(backend)) $(CUDA_CI)

setup-test: setup
	$(PIP) install "pytest>=8" "mypy>=1.10" "scipy>=1.11" "scikit-learn>=1.3"

demo: setup
	$(BIN)/algoswap demo

test: setup-test
	$(BIN)/python -m pytest

# The suite N times, each with a fresh seed; the seeds and outcomes are listed (a selection:
# make test-repeat N=100 TESTS="-x tests/test_conformance.py tests/test_gradients.py").
N ?= 10
test-repeat: setup-test
	PYTHON=$(BIN)/python tests/repeat.sh $(N) $(TESTS)

bench: setup
	$(PIP) install matplotlib
	$(BIN)/python benchmarks/registry_overhead.py
	$(BIN)/python benchmarks/swap_models.py --plot docs/swap_models.png

clean:
	rm -rf $(VENV) build core/*.egg-info plugins/*/*.egg-info plugins/*/build
