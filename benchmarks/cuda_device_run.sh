#!/usr/bin/env bash
# Everything about the CUDA backend that needs a GPU, in one run: the conformance suite for every
# CUDA implementation, tests/test_cuda.py (engine names, TF32, DLPack, zoo models through
# swap_conv2d and swap_backend, training steps), the engine listing, the ResNet-50 benchmark (per
# layer, then whole-model inference: eager, swap_conv2d, swap_backend) and the per-call overhead.
#
#   bash benchmarks/cuda_device_run.sh [all|tests|layers|model|multi] [OUTDIR]
#     tests:  the conformance suites (finite, and NaN / inf) for every CUDA implementation (and NCCL at world size 1: tests/test_dist.py -k nccl), tests/test_cuda.py, tests/test_cuda_graphs.py,
#             the half-precision and channels-last tests (tests/test_cuda_half*.py, tests/test_cuda_nhwc.py, tests/test_cuda_transformer.py) and the executor's GPU training test
#     layers: the cuDNN engine listing and the per-layer ResNet-50 table (TF32 off and on)
#     model:  whole ResNet-50 (eager, swap_conv2d, swap_backend), the per-call overhead, float16's infinities (torch and
#             ours against float64: benchmarks/cuda_float16_infinities.py) and the cost of the padding NaN pass
#     all (default): the three in turn (about 12 minutes on an H200)
#     multi:  several GPUs (issue 20; not part of all): tests/test_dist.py's launches on NCCL, one process per GPU, at
#             2, 4 and 8 ranks as the GPUs allow (about 3.5 minutes at most), then benchmarks/dist_scaling.py on NCCL
#             (all-reduce bus bandwidth against torch's, the executor's DataParallel and DDP over swapped ResNet-50,
#             strong and weak scaling) within a 290 s budget: about 9 minutes in all. NVLink multicast stays off.
#
# Run from the repository root on a machine with an NVIDIA GPU, python3 with torch, CuPy and cuDNN.
# Without internet there, first fetch the cuDNN frontend and its one needed dependency as wheels
# into .whl/ (ignored by git) on a machine with internet, for the GPU machine's Python:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
#       --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 -d .whl nvidia-cudnn-frontend apache-tvm-ffi
set -uo pipefail
PART=all
case "${1:-}" in all|tests|layers|model|multi) PART=$1; shift ;; esac
OUT=${1:-${OUT:-benchmarks/results}}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/algoswap-site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/algoswap-site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . -e plugins/numpy_backend -e plugins/cuda_backend -e plugins/dist_backend || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import algoswap; r = algoswap.registry(); print('cuda backend:', r.backends['cuda'].availability())"

if [ "$PART" = all ] || [ "$PART" = tests ]; then
    echo "== tests (conformance of every CUDA implementation, with NaN and inf too; tests/test_cuda.py)"
    timeout 540 python3 -m pytest tests/test_cuda.py tests/test_cuda_graphs.py tests/test_cuda_half.py tests/test_cuda_half_conv.py tests/test_cuda_nhwc.py tests/test_cuda_transformer.py tests/test_cuda_benchmark.py tests/test_conformance.py tests/test_nonfinite.py tests/test_graph_executor.py tests/test_dist.py -k "cuda or gpu or half or tf32 or nccl" \
        -q -rfEs -p no:cacheprovider --durations=8 2>&1 | tee "$OUT/tests.log" | grep -v "^SKIPPED"
fi
if [ "$PART" = all ] || [ "$PART" = layers ]; then
    echo "== cuDNN engines per layer"
    timeout 150 python3 benchmarks/cuda_engines.py --out "$OUT/engines.json" > "$OUT/engines.log" 2>&1; echo "engines rc=$? (log in engines.log)"
    echo "== ResNet-50 conv layers"
    timeout 400 python3 benchmarks/cuda_conv_layers.py --skip-model --out "$OUT/conv_layers.json" 2>&1 | tee "$OUT/conv_layers.log"
fi
if [ "$PART" = all ] || [ "$PART" = model ]; then
    echo "== whole ResNet-50"
    timeout 150 python3 benchmarks/cuda_conv_layers.py --model-only --algorithms guess find --out "$OUT/model.json" 2>&1 | tee "$OUT/model.log"
    echo "== per-call overhead of a swapped layer"
    timeout 60 python3 benchmarks/cuda_call_overhead.py 2>&1 | tee "$OUT/overhead.log"
    echo "== where float16 convolutions should give infinity: torch eager and our probed plans against float64"
    timeout 90 python3 benchmarks/cuda_float16_infinities.py --json "$OUT/float16_infinities.json" 2>&1 | tee "$OUT/float16_infinities.log"
    echo "== the padding NaN pass after cuDNN convolutions (with and without, in turns)"
    timeout 300 python3 benchmarks/cuda_padding_nan.py 2>&1 | tee "$OUT/padding_nan.log"
fi
if [ "$PART" = multi ]; then
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # NVLink multicast off, everywhere
    echo "== tests/test_dist.py on NCCL, one process per GPU ($(python3 -c 'import torch; print(torch.cuda.device_count())') GPUs)"
    TESTS="ALGOSWAP_DIST_TEST_BACKEND=nccl timeout 210 python3 -m pytest tests/test_dist.py -k 'two_ranks or four_ranks or eight_ranks or restart' -q -rfEs -p no:cacheprovider --durations=8"
    echo "\$ $TESTS"
    eval "$TESTS" 2>&1 | tee "$OUT/dist_tests.log"
    echo "== scaling: all-reduce bus bandwidth, the executor's DataParallel, DDP over swapped ResNet-50"
    SCALING="timeout 320 python3 benchmarks/dist_scaling.py --backend nccl --world-sizes 1 2 4 8 --budget 290 --json $OUT/scaling.json --plot $OUT/scaling.png"
    echo "\$ $SCALING"
    $SCALING 2>&1 | tee "$OUT/scaling.log"
fi
