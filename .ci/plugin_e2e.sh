#!/usr/bin/env bash
# Issue 15's "Done when", done as a new user does it: a fresh venv with only the core and the NumPy
# reference installed from this repo's paths (and the pinned CPU torch, for swap_conv2d), then, for a
# Python and a C++ plugin: scaffold it, install it, check it, run the conformance kit on it, and
# swap it into a torch model, whose output must match torch's. The commands a user types are run
# through `user` and counted: fewer than five per plugin.
#
# A step whose command does not exist in this core yet is skipped with the reason (exit 0 still).
# PLUGIN_E2E_DIR=path keeps the venv there between runs (faster: torch is not reinstalled).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${PLUGIN_E2E_DIR:-$(mktemp -d)}
PYTHON=${PYTHON:-python3}
MOST_COMMANDS=4

reused=$([ -x "$WORK/venv/bin/python" ] && echo 1 || echo "")
[ -n "$reused" ] || "$PYTHON" -m venv "$WORK/venv"
# a state directory of its own: faults other programs left in the user's are not this run's business
export PATH="$WORK/venv/bin:$PATH" PIP_DISABLE_PIP_VERSION_CHECK=1 ALGOSWAP_STATE_DIR="$WORK/state"
pip install --quiet torch==2.13.0                 # pinned: a bare torch would pull a CUDA build
pip install --quiet "$REPO" "$REPO/plugins/numpy_backend"   # `pip install algoswap algoswap-numpy`, from the repo
if [ -n "$reused" ]; then  # the same versions are installed already: take this checkout's code
  pip install --quiet --force-reinstall --no-deps "$REPO" "$REPO/plugins/numpy_backend"
fi
cd "$WORK"

typed=0
user() {  # a command the user types
  typed=$((typed + 1))
  echo "+ $*"
  "$@"
}

skip() { echo "SKIP: $*"; }

matches_torch() {  # swap_conv2d(model, "NAME:direct") against the model run by torch
  python - "$1" <<'EOF'
import sys

import torch

import algoswap

name = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Conv2d(8, 6, 3, stride=2, padding=1, dilation=2, groups=2, bias=False)).eval()
x = torch.randn(2, 3, 17, 15)
with torch.no_grad():
    expected = model(x)
    swapped = algoswap.swap_conv2d(model, f"{name}:direct")
    got = swapped(x)
ran = {row.implementation for row in algoswap.explain(swapped) if row.op == "conv2d"}
error = float((got - expected).norm() / expected.norm())
print(f"swap_conv2d(model, '{name}:direct'): ran {sorted(ran)}, relative error to torch {error:.1e}")
# float32 sums of at most 36 products: torch and the plugin differ by rounding alone (~1e-7)
if ran != {f"{name}:direct"} or not error < 1e-5:
    sys.exit("FAILED: the plugin did not run every convolution, or its output does not match torch's")
EOF
}

try_plugin() {  # NAME [--cpp]
  local name=$1
  shift
  typed=0
  rm -rf "algoswap-$name"
  pip uninstall --quiet --yes "algoswap-$name" 2>/dev/null || true
  user algoswap new-plugin "$name" "$@"
  user pip install --quiet "./algoswap-$name"
  if algoswap check-plugin --help >/dev/null 2>&1; then
    user algoswap check-plugin "$name"
  else
    skip "algoswap check-plugin: not in this core yet"
    typed=$((typed + 1))
  fi
  if python -c "import algoswap.testing" 2>/dev/null; then
    user python -m algoswap.testing "$name"
  else
    skip "python -m algoswap.testing: not in this core yet"
    typed=$((typed + 1))
  fi
  matches_torch "$name"
  echo "algoswap-$name: $typed commands typed (at most $MOST_COMMANDS)"
  [ "$typed" -le "$MOST_COMMANDS" ]
}

# Issue 33: in this venv without CuPy, the CUDA plugin (installed without its GPU extras) offers what it declares:
# its cuDNN algorithms with their dtypes, unavailable here but not broken, and check-plugin checks it from its code.
offers_without_cupy() {
  pip install --quiet "$REPO/plugins/cuda_backend"
  python -c "import cupy" 2>/dev/null && { echo "FAILED: CuPy is importable in the fresh venv"; return 1; }
  algoswap check-plugin cuda
  algoswap caps --format json | python -c '
import json, sys
shown = json.load(sys.stdin)
assert shown["backends"]["cuda"]["status"] == "unavailable", shown["backends"]["cuda"]
for op in ("conv2d", "conv2d_fused"):
    for algorithm in ("guess", "find", "gemm", "implicit_gemm", "implicit_precomp_gemm", "fft", "fft_tiling", "winograd_nonfused"):
        cell = shown["ops"][op]["backends"]["cuda"][algorithm]
        assert cell["supported"] and cell["reason"] is None and cell["dtypes"], (op, algorithm, cell)
assert {"float16", "bfloat16"} <= set(shown["ops"]["conv2d"]["backends"]["cuda"]["guess"]["dtypes"])
print("cuda without CuPy: every cuDNN algorithm offered with its dtypes, unavailable here")
'
  pip uninstall --quiet --yes algoswap-cuda
}

try_plugin e2epy
try_plugin e2ecpp --cpp
offers_without_cupy
echo "plugin end-to-end: passed"
