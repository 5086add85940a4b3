"""timm families with issue 34's ops on the GPU: each converted with backends ["cuda", "numpy"] (every op the CUDA
backend has runs there), its error against PyTorch on the GPU in float32 and the backends that ran.

    python3 benchmarks/cuda_timm_families.py [family ...]   # on a machine with CUDA, CuPy and timm
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch

from algoswap import swap_backend, zoo

FAMILIES = json.loads((Path(__file__).resolve().parents[1] / "tests" / "timm_families.json").read_text())
DEFAULT = ["metaformer", "convnext", "swin_transformer", "crossvit", "byoanet", "volo", "mvitv2", "edgenext",
           "efficientvit_mit", "gcvit", "levit", "coat", "efficientformer_v2", "qwen3_vit"]


def main() -> None:
    warnings.filterwarnings("ignore")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    for family in sys.argv[1:] or DEFAULT:
        entry = FAMILIES[family]
        try:
            module = zoo.build(f"timm:{entry['model']}").cuda()
            shape = (2, 3, entry["side"], entry["side"])
            model = swap_backend(module, None, shape, backends=["cuda", "numpy"])
            x = torch.randn(shape, device="cuda")
            with torch.no_grad():
                ref = module(x)
            error = float((model(x) - ref).norm() / ref.norm())
            print(f"{family:<22} {entry['model']:<28} {model.tracer:<13} error {error:.1e}  backends {model.backends()}", flush=True)
        except Exception as exc:
            print(f"{family:<22} {entry['model']:<28} FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)


if __name__ == "__main__":
    main()
