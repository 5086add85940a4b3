#!/usr/bin/env bash
# What only a Mac can show about algoswap-metal, in one report to send back (nothing here has run on a Mac yet:
# the plugin's README says what was verified where). On a Mac with Apple silicon, from anywhere:
#
#     plugins/metal_backend/verify_on_mac.sh            # writes metal-report.txt in the repository root
#
# It makes a venv (.venv-metal; VENV=... picks another), installs torch from PyPI (its macOS wheels are built with
# MPS), the core, the NumPy reference and this plugin, then runs, each step's output and exit status in the report:
#   1. the machine, torch and the two backends' status (`algoswap backends`);
#   2. the conformance kit on the real device: every implementation of mps and metal against the reference
#      (values, NaN and infinities, gradients, refusals): `python -m algoswap.testing mps metal`;
#   3. the repository's suites for them: tests/test_metal.py, tests/test_metal_kernels.py (the kernels on the host
#      through Apple's clang: strict check, AddressSanitizer, ThreadSanitizer), and the conformance, non-finite and
#      gradient suites (torch's own semantics as the oracle) restricted to mps and metal;
#   4. benchmarks/metal_layers.py at batch 1 and 8: ResNet-18's conv layers and the whole model against torch's mps.
# A step that fails does not stop the others. Needs Python 3.10 or later (PYTHON=... picks it) and the network.
set -uo pipefail
cd "$(dirname "$0")/../.."
REPORT="${REPORT:-$PWD/metal-report.txt}"
VENV="${VENV:-.venv-metal}"
PYTHON="${PYTHON:-python3}"
BIN="$VENV/bin"
: > "$REPORT"

step() { printf '\n== %s\n' "$*" | tee -a "$REPORT"; }
run() {
    step "$*"
    "$@" 2>&1 | tee -a "$REPORT"
    echo "exit status ${PIPESTATUS[0]}" | tee -a "$REPORT"
}

step "machine"
{ sw_vers; uname -m; sysctl -n machdep.cpu.brand_string; system_profiler SPDisplaysDataType 2>/dev/null | grep -E "Chipset|Cores|Metal"; } \
    2>&1 | tee -a "$REPORT"
run git log -1 --format='%H %s'

[ -x "$BIN/python" ] || run "$PYTHON" -m venv "$VENV"
run "$BIN/python" -m pip install --upgrade pip
run "$BIN/python" -m pip install torch "pytest>=8" "scipy>=1.11" -e ".[torch]" -e plugins/numpy_backend -e plugins/metal_backend
run "$BIN/python" -c "import torch; print('torch', torch.__version__, 'mps built', torch.backends.mps.is_built(), 'available', torch.backends.mps.is_available())"
run "$BIN/algoswap" backends

step "the conformance kit on the device"
run "$BIN/python" -m algoswap.testing mps metal
step "the repository's suites"
run "$BIN/python" -m pytest -q -p no:cacheprovider tests/test_metal.py tests/test_metal_kernels.py
run "$BIN/python" -m pytest -q -p no:cacheprovider tests/test_conformance.py tests/test_nonfinite.py tests/test_gradients.py -k "mps or metal"

step "benchmarks (median ms; error: relative to torch's own mps output)"
run "$BIN/python" benchmarks/metal_layers.py --batch 1 --out metal_layers_b1.json
run "$BIN/python" benchmarks/metal_layers.py --batch 8 --skip-model --out metal_layers_b8.json

step "done: please send $REPORT (and metal_layers_b1.json, metal_layers_b8.json)"
