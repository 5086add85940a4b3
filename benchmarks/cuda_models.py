"""Architectures nobody here wrote, on the GPU: torchvision (and timm, where installed) models through
``swap_backend(model, fallback="torch")`` against PyTorch eager, side by side in one run.

For each model it prints the time per batch (median of CUDA-event timings), the ratio to eager,
the relative error, and what the placement policy did: how many conv2d ran on cuda, how many nodes
ran in torch and on which device, and how many activations moved between memory spaces (weights'
uploads, made once and cached, are not counted).

    python3 benchmarks/cuda_models.py                         # mobilenet_v2 batch 64 (the issue-13 case)
    python3 benchmarks/cuda_models.py --models mobilenet_v2 resnet50 timm:efficientnet_b0 --batch 64

TF32 is off on both sides (torch.backends.cudnn.allow_tf32 = False): the CUDA backend keeps it off
unless ALGOSWAP_CUDA_TF32=1.
"""

from __future__ import annotations

import argparse
import torch

import algoswap
from cuda_conv_layers import timed  # CUDA-event medians


def build(name: str) -> torch.nn.Module:
    if name.startswith("timm:"):
        import timm

        return timm.create_model(name[5:], pretrained=False)
    import torchvision

    return getattr(torchvision.models, name)(weights=None)


def placement(model: algoswap.Model) -> dict[str, int]:
    rows = list(model.explain())
    program = getattr(model, "program", None)  # the Model of one executor program (issue 13)
    if program is None:
        moved = [r for r in rows if "inputs moved" in r.note]
    else:
        moved = [s for s in program.steps if s.is_transfer and s.inputs and not _uploads_a_weight(program, s)]
    return {
        "conv2d": sum(r.op.startswith("conv2d") for r in rows),
        "conv2d on cuda": sum(r.op.startswith("conv2d") and r.implementation.startswith("cuda:") for r in rows),
        "torch nodes": sum(r.implementation.startswith("torch") for r in rows),
        "torch on cuda": sum(r.implementation.startswith("torch (fallback) on cuda") for r in rows),
        "activation moves": len(moved),
    }


def _uploads_a_weight(program, step) -> bool:
    sources = {slot: node for slot, node in program.sources}
    node = sources.get(step.inputs[0])
    return node is not None and node.kind == "constant"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["mobilenet_v2"])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3, help="calls before timing (each side)")
    args = parser.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    print(f"{'model':24} {'eager ms':>9} {'algoswap ms':>12} {'ratio':>6} {'rel. error':>10}  placement")
    for name in args.models:
        module = build(name).cuda().eval()
        x = torch.randn(args.batch, 3, args.size, args.size, device="cuda")
        with torch.no_grad():
            expected = module(x)
            eager = timed(lambda: module(x), args.reps, args.warmup, inner=1)
        model = algoswap.swap_backend(module, fallback="torch")
        got = model(x)
        error = float((got - expected).norm() / expected.norm())
        ours = timed(lambda: model(x), args.reps, args.warmup, inner=1)
        print(f"{name:24} {eager:9.2f} {ours:12.2f} {ours / eager:6.2f} {error:10.1e}  {placement(model)}", flush=True)


if __name__ == "__main__":
    main()
