#!/usr/bin/env bash
# Everything about the CUDA backend that needs a GPU, in one run: the conformance suite for every
# CUDA implementation, tests/test_cuda.py (engine names, TF32, DLPack, zoo models through
# swap_conv2d and swap_backend, training steps), the engine listing, the ResNet-50 benchmark (per
# layer, then whole-model inference: eager, swap_conv2d, swap_backend) and the per-call overhead.
#
#   bash benchmarks/cuda_device_run.sh [OUTDIR]
#   bash benchmarks/cuda_device_run.sh --model-only [OUTDIR]   # install, the swap_backend tests, whole ResNet-50, overhead
#
# Run from the repository root on a machine with an NVIDIA GPU, python3 with torch, CuPy and cuDNN.
# Without internet there, first fetch the cuDNN frontend and its one needed dependency as wheels
# into .whl/ (ignored by git) on a machine with internet, for the GPU machine's Python:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
#       --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 -d .whl nvidia-cudnn-frontend apache-tvm-ffi
set -uo pipefail
MODEL_ONLY=0
if [ "${1:-}" = "--model-only" ]; then MODEL_ONLY=1; shift; fi
OUT=${1:-${OUT:-benchmarks/results}}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/algoswap-site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/algoswap-site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . -e plugins/numpy_backend -e plugins/cuda_backend || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import algoswap; r = algoswap.registry(); print('cuda backend:', r.backends['cuda'].availability())"

if [ "$MODEL_ONLY" = 1 ]; then
    timeout 70 python3 -m pytest tests/test_cuda.py -k "swap_backend or without_copies or (swap_conv2d and resnet18 and guess) or (training and resnet18)" -q -rfEs -p no:cacheprovider 2>&1 | tee "$OUT/tests.log"
    timeout 75 python3 benchmarks/cuda_conv_layers.py --model-only --algorithms guess --out "$OUT/model.json" 2>&1 | tee "$OUT/model.log"
    timeout 20 python3 benchmarks/cuda_call_overhead.py 2>&1 | tee "$OUT/overhead.log"
    exit 0
fi
echo "== tests (conformance of every CUDA implementation, tests/test_cuda.py)"
timeout 420 python3 -m pytest tests/test_cuda.py tests/test_conformance.py -k cuda -q -rfEs -p no:cacheprovider \
    --durations=8 2>&1 | tee "$OUT/tests.log" | grep -v "^SKIPPED"
echo "== cuDNN engines per layer"
timeout 150 python3 benchmarks/cuda_engines.py --out "$OUT/engines.json" > "$OUT/engines.log" 2>&1; echo "engines rc=$? (log in engines.log)"
echo "== ResNet-50 conv layers"
timeout 400 python3 benchmarks/cuda_conv_layers.py --out "$OUT/conv_layers.json" 2>&1 | tee "$OUT/conv_layers.log"
echo "== per-call overhead of a swapped layer"
timeout 60 python3 benchmarks/cuda_call_overhead.py 2>&1 | tee "$OUT/overhead.log"
