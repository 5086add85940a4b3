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

.PHONY: demo test test-repeat setup setup-test plugin-e2e bench clean asan

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first and pinned, so that nothing later pulls another build of it.
setup: $(BIN)/python
	$(PIP) install $(TORCH)
	$(PIP) install -e ".[torch]" $(foreach backend,$(BACKENDS),-e $(backend)) $(CUDA_CI)

# torchvision's and timm's architectures (zoo.build("torchvision:NAME")): without their dependencies, which
# would replace the pinned torch (docs/development.md); pillow above is the one torchvision imports.
FOREIGN := torchvision==0.28.0 timm==1.0.31

# The example C++ plugin, built by pip with scikit-build-core and CMake, so that the suite (its own tests included:
# pyproject.toml's testpaths) runs over it. Not editable: after changing its C++, run this line again.
EXAMPLES := ./examples/cpp_plugin

setup-test: setup
	$(PIP) install "pytest>=8" "mypy>=1.10" "scipy>=1.11" "scikit-learn>=1.3" safetensors pyyaml huggingface_hub pillow
	$(PIP) install --no-deps $(FOREIGN)
	$(PIP) install $(EXAMPLES)

demo: setup
	$(BIN)/algoswap demo

test: setup-test
	$(BIN)/python -m pytest
	$(MAKE) plugin-e2e

# Issue 15's "Done when": a fresh venv with the core and the NumPy backend, then a new plugin (Python and C++)
# scaffolded, installed, checked, conformance-tested and swapped into a torch model (.ci/plugin_e2e.sh).
plugin-e2e:
	PYTHON=$(PYTHON) .ci/plugin_e2e.sh

# The suite N times, each with a fresh seed; the seeds and outcomes are listed (a selection:
# make test-repeat N=100 TESTS="-x tests/test_conformance.py tests/test_gradients.py").
N ?= 10
test-repeat: setup-test
	PYTHON=$(BIN)/python tests/repeat.sh $(N) $(TESTS)

# ONNX Runtime next to the pinned torch (torch.onnx.export needs onnx) for benchmarks/models.py, which also
# needs setup-test's torchvision and timm.
BENCH_DEPS := matplotlib onnxruntime==1.32.0 onnx==1.23.2

bench: setup-test
	$(PIP) install $(TORCH) $(BENCH_DEPS)
	$(BIN)/python benchmarks/registry_overhead.py
	$(BIN)/python benchmarks/swap_models.py --plot docs/swap_models.png
	$(BIN)/python benchmarks/models.py --json docs/models.json --plot docs/models.png

# The oneDNN extension built with AddressSanitizer, and the tests that run it (README: "Sanitizer runs").
# build/asan/venv only supplies headers and libdnnl (the test run uses .venv); build/asan/pkg holds an
# instrumented copy of algoswap_dnnl, found on PYTHONPATH before the editable install.
ASAN := build/asan
ASAN_PKG := $(ASAN)/pkg/algoswap_dnnl
ASAN_TESTS ?= tests/test_conformance.py tests/test_layouts_fusion.py tests/test_dnnl.py tests/test_dnnl_ops.py tests/test_dnnl_caches.py \
	tests/test_dnnl_nonfinite.py tests/test_dnnl_bf16.py tests/test_sycl.py
# Leak checking off: CPython and torch keep memory until exit by design. libstdc++ is preloaded with
# libasan (else ASan's __cxa_throw interceptor aborts at the first C++ exception) and .venv/lib is put on
# LD_LIBRARY_PATH (ASan's dlopen hides the caller's RUNPATH: the SYCL runtime would find no OpenCL).
ASAN_OPTIONS_RUN := detect_leaks=0
asan: setup-test
	$(PYTHON) -m venv $(ASAN)/venv
	$(ASAN)/venv/bin/python -m pip --disable-pip-version-check --quiet install pybind11 onednn-devel-cpu-gomp==2023.2.0
	mkdir -p $(ASAN_PKG)
	cp plugins/dnnl_backend/algoswap_dnnl/*.py plugins/dnnl_backend/algoswap_dnnl/*.pyi $(ASAN_PKG)/
	g++ -std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=address -fopenmp -shared -fPIC -fvisibility=hidden \
		-I$(ASAN)/venv/include -I$$($(ASAN)/venv/bin/python -c 'import pybind11; print(pybind11.get_include())') \
		-I$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \
		plugins/dnnl_backend/src/*.cpp -L$(ASAN)/venv/lib -ldnnl -Wl,-rpath,$(abspath $(ASAN))/venv/lib \
		-o $(ASAN_PKG)/_dnnl$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
	PYTHONPATH=$(ASAN)/pkg LD_LIBRARY_PATH=$(abspath $(VENV))/lib ASAN_OPTIONS=$(ASAN_OPTIONS_RUN) \
		LD_PRELOAD=$$(gcc -print-file-name=libasan.so):$$(gcc -print-file-name=libstdc++.so) \
		$(BIN)/python -m pytest -q -p no:cacheprovider $(ASAN_TESTS)

clean:
	rm -rf $(VENV) build core/*.egg-info plugins/*/*.egg-info plugins/*/build
