"""Memory of the oneDNN backend while one 3x3 convolution runs over many distinct input shapes: the
process's RSS and the entries of every cache the backend keeps, printed as it goes, so that one can see
it level off (issue 12: one reordered weight copy per input shape grew RSS by 456 MB over 200 shapes).

    .venv/bin/python benchmarks/dnnl_cache_memory.py                          # ops.conv2d, 256 -> 256, 200 shapes
    .venv/bin/python benchmarks/dnnl_cache_memory.py --model                  # a swap_backend Model of that conv
    ALGOSWAP_CACHE_DNNL_PLANS=64 .venv/bin/python benchmarks/dnnl_cache_memory.py --channels 32 --shapes 2000

The weight is frozen (algoswap.freeze; a Model's weights are frozen by swap_backend), so its reordered
copies are cached: one per packed layout, shared by every input shape whose primitive reads that layout.
The plans (oneDNN primitives with their reorders) are bounded by the dnnl_plans cache kind (1024 by
default; ALGOSWAP_CACHE_DNNL_PLANS above lowers it to show the plateau sooner); idle output buffers (1 MiB and
more, kept for reuse) by dnnl_idle_buffer_mib (1024 MiB, the least recently released freed first). The whole
process over ever new shapes, every CPU backend: benchmarks/cache_memory.py.
"""

from __future__ import annotations

import os

os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # before torch loads libgomp: see algoswap._cli.quiet_openmp_spinning

import argparse
from typing import Any, Callable

import numpy as np

import algoswap


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def shapes(count: int, channels: int) -> list[tuple[int, int, int, int]]:
    """``count`` distinct (1, channels, H, W) input shapes, H and W from 8 up."""
    side = int(np.ceil(np.sqrt(count)))
    return [(1, channels, 8 + i // side, 8 + i % side) for i in range(count)]


def ops_runner(w: np.ndarray) -> Callable[[np.ndarray], Any]:
    frozen = algoswap.freeze(w)
    return lambda x: algoswap.ops.conv2d(x, frozen, None, padding=1, algorithm="dnnl:auto")


def model_runner(w: np.ndarray) -> Callable[[np.ndarray], Any]:
    import torch

    conv = torch.nn.Conv2d(w.shape[1], w.shape[0], 3, padding=1, bias=False)
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(w))
    model = algoswap.swap_backend(torch.nn.Sequential(conv).eval(), sample_input_shape=(1, w.shape[1], 8, 8))
    frozen = all(algoswap.is_frozen(a) for a in model.constants.values())
    print(f"swap_backend Model; its weights are {'frozen' if frozen else 'NOT frozen (reordered at every call)'}")

    def run(x: np.ndarray) -> Any:
        with torch.no_grad():
            return model(torch.from_numpy(x))

    return run


def counts() -> str:
    from algoswap_dnnl import conv
    from algoswap_dnnl._ext import dnnl

    return (f"plans {dnnl.cache_size():>5}  packed weights {conv.packed_weights_count():>3}  "
            f"conv calls {len(conv._calls):>5}  idle output buffers {dnnl.pooled_idle_bytes() / 2**20:6.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=256)
    parser.add_argument("--shapes", type=int, default=200)
    parser.add_argument("--every", type=int, default=25, help="print a line every this many shapes")
    parser.add_argument("--model", action="store_true", help="run a swap_backend Model rather than ops.conv2d")
    parser.add_argument("--layout", default="any", choices=["any", "auto", "plain"],
                        help="ALGOSWAP_DNNL_LAYOUT: 'any' (default here) makes every primitive read packed weights")
    args = parser.parse_args()
    os.environ["ALGOSWAP_DNNL_LAYOUT"] = args.layout
    rng = np.random.default_rng(0)
    w = rng.standard_normal((args.channels, args.channels, 3, 3)).astype(np.float32)
    run = (model_runner if args.model else ops_runner)(w)
    start = rss_mib()
    for i, shape in enumerate(shapes(args.shapes, args.channels), 1):
        run(rng.standard_normal(shape).astype(np.float32))
        if i == 1:  # the backend's cache kinds are declared by now
            limits = sorted((name, kind.size) for name, kind in algoswap.cache_limits().items() if name.startswith("dnnl"))
            print("cache limits: " + ", ".join(f"{name} {size}" for name, size in limits))
            print(f"{'shapes':>7}  {'RSS MiB':>8}  {'grown':>7}  caches")
        if i % args.every == 0 or i == args.shapes:
            now = rss_mib()
            print(f"{i:>7}  {now:>8.1f}  {now - start:>+7.1f}  {counts()}", flush=True)


if __name__ == "__main__":
    main()
