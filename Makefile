# The README's quick start: `make demo` and `make test`. Both set up .venv in the repo root.
#
# Each set-up step leaves a stamp file, .venv/.stamp-<step> (ignored with .venv): make redoes a step only when a
# file it installs from (a pyproject.toml, setup.py, the C++ sources of an extension, or this Makefile for the
# pinned third-party requirements) is newer than its stamp, so a second `make test` installs nothing and does
# not recompile the oneDNN extension. A step that fails leaves no stamp. `make clean` (or deleting a stamp)
# redoes it all.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.stamp-
# pip's own progress (what it collects, downloads, builds and installs) is shown: no --quiet.
PIP := $(BIN)/python -m pip --disable-pip-version-check
# torch is pinned to the CPU wheel this machine keeps; a bare `torch` would pull a CUDA build.
TORCH := torch==2.13.0
# Every backend plugin, installed editable (a change to its Python needs no reinstall). The CUDA backend without
# its GPU libraries and the Metal one off a Mac: each loads, says why it is unavailable and is never chosen (their
# kernels are checked on the host by the tests). On a machine with an NVIDIA GPU:
# .venv/bin/python -m pip install -e "plugins/cuda_backend[cu12]" (or [cu13]); on a Mac:
# plugins/metal_backend/verify_on_mac.sh.
# The communication plugin (gloo; NCCL where the CUDA plugin has a GPU) uses the pinned torch.
BACKENDS := numpy_backend dnnl_backend sycl_backend cuda_backend metal_backend dist_backend
# What the scripts in examples/ need beyond the core and torch (examples/train_digits.py and
# examples/train_distributed.py: scikit-learn's digits; its --plot needs matplotlib, which `make bench` installs).
EXAMPLE_DEPS := "scikit-learn>=1.3"
# The test suite's own requirements.
TEST_DEPS := "pytest>=8" "mypy>=1.10" "scipy>=1.11" safetensors pyyaml huggingface_hub pillow
# torchvision's and timm's architectures (zoo.build("torchvision:NAME")): without their dependencies, which
# would replace the pinned torch (docs/development.md); pillow above is the one torchvision imports.
FOREIGN := torchvision==0.28.0 timm==1.0.31
# CuPy without a GPU, for the tests only: the CUDA backend's kernel modules import it, and
# tests/test_cuda_activation_code.py compiles their C statements on the host against the reference.
CUPY := cupy-cuda12x==14.2.0
# The example C++ plugin, built by pip with scikit-build-core and CMake, so that the suite (its own tests included:
# pyproject.toml's testpaths) runs over it. Not editable: reinstalled when any of these files changed.
EXAMPLE_PLUGIN := examples/cpp_plugin
EXAMPLE_PLUGIN_FILES := $(wildcard $(addprefix $(EXAMPLE_PLUGIN)/,pyproject.toml CMakeLists.txt src/* algoswap_cppconv/*.py))
# ONNX Runtime next to the pinned torch (torch.onnx.export needs onnx) for benchmarks/models.py, which also
# needs setup-test's torchvision and timm.
BENCH_DEPS := matplotlib onnxruntime==1.32.0 onnx==1.23.2
# Where `make bench` writes its figures and tables (ignored by git). The committed ones in docs/ are updated by
# hand with the commands in docs/benchmarks.md.
BENCH_OUT := bench-out
# The documentation site (mkdocs.yml, pages in docs/), built into the ignored site-out/ with --strict: a warning
# (a broken link or anchor, a page missing from the nav) fails it. docs/development.md says why MkDocs.
DOCS_DEPS := mkdocs==1.6.1 mkdocs-material==9.8.2
DOCS_OUT := site-out

.PHONY: demo test test-repeat setup setup-test plugin-e2e bench docs clean asan
# pip installs into one venv: never two at once, even under make -j.
.NOTPARALLEL:

# ------------------------------------------------------------------------------------------------ the targets

# The core (with the swap API) and every backend plugin.
setup: $(STAMP)core $(addprefix $(STAMP),$(BACKENDS))

# setup, the examples' requirements, the test suite's, and the example C++ plugin.
setup-test: setup $(STAMP)examples $(STAMP)test-deps $(STAMP)cupy $(STAMP)cpp_plugin

# The README's first command: the demo on the set-up venv (then examples/ runs as the README shows).
demo: setup $(STAMP)examples
	$(BIN)/algoswap demo

# What CI runs (.ci/run): the whole suite, then the plugin round trip, then the documentation site.
test: setup-test
	$(BIN)/python -m pytest
	$(MAKE) plugin-e2e
	$(MAKE) docs

# The manual as a site in $(DOCS_OUT)/ (about 2 s once MkDocs is installed); the pages' Python blocks are run by
# tests/test_readme.py.
docs: $(STAMP)docs-deps
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(DOCS_OUT)

# Issue 15's "Done when": a fresh venv with the core and the NumPy backend, then a new plugin (Python and C++)
# scaffolded, installed, checked, conformance-tested and swapped into a torch model (.ci/plugin_e2e.sh).
plugin-e2e:
	PYTHON=$(PYTHON) .ci/plugin_e2e.sh

# The suite N times, each with a fresh seed; the seeds and outcomes are listed (a selection:
# make test-repeat N=100 TESTS="-x tests/test_conformance.py tests/test_gradients.py").
N ?= 10
test-repeat: setup-test
	PYTHON=$(BIN)/python tests/repeat.sh $(N) $(TESTS)

# The first three benchmark scripts, their figures and tables in $(BENCH_OUT)/ (never over the committed ones).
bench: setup-test $(STAMP)bench-deps
	mkdir -p $(BENCH_OUT)
	$(BIN)/python benchmarks/registry_overhead.py
	$(BIN)/python benchmarks/swap_models.py --plot $(BENCH_OUT)/swap_models.png
	$(BIN)/python benchmarks/models.py --json $(BENCH_OUT)/models.json --plot $(BENCH_OUT)/models.png

# --------------------------------------------------------------------------------- the set-up steps (stamps)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first and pinned, so that nothing later pulls another build of it.
$(STAMP)torch: Makefile | $(BIN)/python
	$(PIP) install $(TORCH)
	touch $@

# The core, editable, with its torch extra.
$(STAMP)core: pyproject.toml | $(STAMP)torch
	$(PIP) install -e ".[torch]"
	touch $@

# One backend plugin, editable: plugins/<name>/pyproject.toml changed, or it was never installed.
$(STAMP)%_backend: plugins/%_backend/pyproject.toml | $(STAMP)core
	$(PIP) install -e plugins/$*_backend
	touch $@

# The oneDNN plugin is also rebuilt when its extension's sources changed (pip compiles it in place).
$(STAMP)dnnl_backend: plugins/dnnl_backend/setup.py $(wildcard plugins/dnnl_backend/src/*)

# The rules below install the requirement lists defined at the top.
$(STAMP)examples: Makefile | $(STAMP)core
	$(PIP) install $(EXAMPLE_DEPS)
	touch $@

$(STAMP)test-deps: Makefile | $(STAMP)core
	$(PIP) install $(TEST_DEPS)
	$(PIP) install --no-deps $(FOREIGN)
	touch $@

$(STAMP)cupy: Makefile | $(STAMP)cuda_backend
	$(PIP) install $(CUPY)
	touch $@

$(STAMP)cpp_plugin: $(EXAMPLE_PLUGIN_FILES) | $(STAMP)core
	$(PIP) install ./$(EXAMPLE_PLUGIN)
	touch $@

$(STAMP)docs-deps: Makefile | $(BIN)/python
	$(PIP) install $(DOCS_DEPS)
	touch $@

$(STAMP)bench-deps: Makefile | $(STAMP)core
	$(PIP) install $(TORCH) $(BENCH_DEPS)
	touch $@

# The oneDNN extension built with AddressSanitizer, and the tests that run it (README: "Sanitizer runs").
# build/asan/venv only supplies headers and libdnnl (the test run uses .venv); build/asan/pkg holds an
# instrumented copy of algoswap_dnnl, found on PYTHONPATH before the editable install. Its steps leave stamps
# build/asan/.stamp-<step> as the set-up's do: a second `make asan` only runs the tests; a changed source of the
# extension recompiles it, a changed Python file of the plugin is copied again, this Makefile redoes them all.
ASAN := build/asan
ASAN_VENV := $(ASAN)/venv
ASAN_STAMP := $(ASAN)/.stamp-
ASAN_PKG := $(ASAN)/pkg/algoswap_dnnl
ASAN_TESTS ?= tests/test_conformance.py tests/test_layouts_fusion.py tests/test_dnnl.py tests/test_dnnl_ops.py tests/test_dnnl_caches.py \
	tests/test_dnnl_nonfinite.py tests/test_dnnl_bf16.py tests/test_sycl.py
# Leak checking off: CPython and torch keep memory until exit by design. libstdc++ is preloaded with
# libasan (else ASan's __cxa_throw interceptor aborts at the first C++ exception) and .venv/lib is put on
# LD_LIBRARY_PATH (ASan's dlopen hides the caller's RUNPATH: the SYCL runtime would find no OpenCL).
ASAN_OPTIONS_RUN := detect_leaks=0
asan: setup-test $(ASAN_STAMP)package $(ASAN_STAMP)extension
	PYTHONPATH=$(ASAN)/pkg LD_LIBRARY_PATH=$(abspath $(VENV))/lib ASAN_OPTIONS=$(ASAN_OPTIONS_RUN) \
		LD_PRELOAD=$$(gcc -print-file-name=libasan.so):$$(gcc -print-file-name=libstdc++.so) \
		$(BIN)/python -m pytest -q -p no:cacheprovider $(ASAN_TESTS)

# The scratch venv with pybind11's and oneDNN's headers and libdnnl (pinned here: this Makefile is its source).
$(ASAN_STAMP)venv: Makefile
	$(PYTHON) -m venv $(ASAN_VENV)
	$(ASAN_VENV)/bin/python -m pip --disable-pip-version-check install pybind11 onednn-devel-cpu-gomp==2023.2.0
	touch $@

# The plugin's Python files, next to the instrumented extension.
$(ASAN_STAMP)package: $(wildcard plugins/dnnl_backend/algoswap_dnnl/*.py plugins/dnnl_backend/algoswap_dnnl/*.pyi)
	mkdir -p $(ASAN_PKG)
	cp plugins/dnnl_backend/algoswap_dnnl/*.py plugins/dnnl_backend/algoswap_dnnl/*.pyi $(ASAN_PKG)/
	touch $@

# The extension compiled with -fsanitize=address: again when a source of it, the scratch venv or the flags here changed.
$(ASAN_STAMP)extension: $(wildcard plugins/dnnl_backend/src/*) $(ASAN_STAMP)venv Makefile | $(STAMP)core
	mkdir -p $(ASAN_PKG)
	g++ -std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=address -fopenmp -shared -fPIC -fvisibility=hidden \
		-I$(ASAN_VENV)/include -I$$($(ASAN_VENV)/bin/python -c 'import pybind11; print(pybind11.get_include())') \
		-I$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \
		plugins/dnnl_backend/src/*.cpp -L$(ASAN_VENV)/lib -ldnnl -Wl,-rpath,$(abspath $(ASAN_VENV))/lib \
		-o $(ASAN_PKG)/_dnnl$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
	touch $@

# The venv (its stamps with it) and every build folder: the next target sets up from scratch.
clean:
	rm -rf $(VENV) build core/*.egg-info plugins/*/*.egg-info plugins/*/build
