"""The NumPy reference's pooling, normalisation, dropout and loss kernels against those of another
checkout, timed in turns in one run (median of 7 rounds, each the best of 3 calls).

    git worktree add /tmp/old main
    .venv/bin/python benchmarks/numpy_reference.py --against /tmp/old
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
import timeit
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import numpy as np

MODULES = ("pool", "norm", "dropout", "loss", "activation")


def load_other(checkout: Path) -> dict[str, ModuleType]:
    """The other checkout's algoswap_numpy modules, imported under the package name algoswap_numpy_other."""
    folder = Path(tempfile.mkdtemp())
    shutil.copytree(checkout / "plugins/numpy_backend/algoswap_numpy", folder / "algoswap_numpy_other")
    sys.path.insert(0, str(folder))
    return {name: importlib.import_module(f"algoswap_numpy_other.{name}") for name in MODULES}


def cases(rng: np.random.Generator) -> list[tuple[str, str, Callable[[Any], Any]]]:
    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    avg3 = dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), ceil_mode=False, count_include_pad=True, divisor_override=None)
    avg2 = dict(avg3, kernel_size=(2, 2), padding=(0, 0))
    x1, x2, x3, x4 = f32(8, 64, 56, 56), f32(8, 256, 28, 28), f32(8, 512, 7, 7), f32(8, 512, 13, 13)
    g1, g2, g4 = f32(8, 64, 28, 28), f32(8, 256, 14, 14), f32(8, 512, 7, 7)
    mean, var, w, b = f32(64), np.abs(f32(64)) + 0.5, f32(64), f32(64)
    logits, labels = f32(256, 1000), rng.integers(0, 1000, 256)
    return [
        ("avgpool2d 3x3/2 8x64x56x56", "pool", lambda m: m.avgpool2d(x1, **avg3)),
        ("avgpool2d 2x2/2 8x256x28x28", "pool", lambda m: m.avgpool2d(x2, **avg2)),
        ("avgpool2d_grad 3x3/2 8x64x56x56", "pool", lambda m: m.avgpool2d_grad(g1, input_size=x1.shape, **avg3)),
        ("avgpool2d_grad 2x2/2 8x256x28x28", "pool", lambda m: m.avgpool2d_grad(g2, input_size=x2.shape, **avg2)),
        ("adaptiveavgpool2d 8x512x7x7 -> 1", "pool", lambda m: m.adaptiveavgpool2d(x3, output_size=(1, 1))),
        ("adaptiveavgpool2d 8x512x13x13 -> 7", "pool", lambda m: m.adaptiveavgpool2d(x4, output_size=(7, 7))),
        ("adaptiveavgpool2d_grad 8x512x13x13 -> 7", "pool", lambda m: m.adaptiveavgpool2d_grad(g4, input_size=x4.shape)),
        ("batchnorm2d 8x64x56x56", "norm", lambda m: m.batchnorm2d(x1, mean, var, w, b, eps=1e-5)),
        ("batch_norm_train 8x64x56x56", "norm", lambda m: m.batch_norm_train(x1, w, b, eps=1e-5)),
        ("batch_norm_train_grad_input 8x64x56x56", "norm", lambda m: m.batch_norm_train_grad_input(x1, x1, w, eps=1e-5)),
        ("instance_norm 8x64x56x56", "norm", lambda m: m.instance_norm(x1, w, b, eps=1e-5)),
        ("group_norm 8x64x56x56 (1 group)", "norm", lambda m: m.group_norm(x1, w, b, num_groups=1, eps=1e-5)),
        ("dropout 8x64x56x56", "dropout", lambda m: m.dropout(x1, p=0.5, seed=1, training=True)),
        ("relu_grad 8x64x56x56", "activation", lambda m: m.relu_grad(x1, x1)),
        ("softmax_cross_entropy 256x1000", "loss", lambda m: m.softmax_cross_entropy(logits, labels, reduction="mean")),
        ("softmax_cross_entropy_grad 256x1000", "loss",
         lambda m: m.softmax_cross_entropy_grad(np.float32(1), logits, labels, reduction="mean")),
    ]


def best_of_three_ms(run: Callable[[], Any]) -> float:
    return min(timeit.repeat(run, number=1, repeat=3)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, required=True, help="the other checkout (its repository root)")
    args = parser.parse_args()
    other = load_other(args.against)
    this = {name: importlib.import_module(f"algoswap_numpy.{name}") for name in MODULES}
    print(f"{'case':<42}{'other ms':>10}{'this ms':>9}{'ratio':>7}")
    for label, module, run in cases(np.random.default_rng(0)):
        times: dict[str, list[float]] = {"other": [], "this": []}
        for _ in range(7):  # in turns, so that a busy moment costs both alike
            times["other"].append(best_of_three_ms(lambda: run(other[module])))
            times["this"].append(best_of_three_ms(lambda: run(this[module])))
        before, after = (sorted(times[key])[3] for key in ("other", "this"))
        print(f"{label:<42}{before:>10.2f}{after:>9.2f}{after / before:>7.2f}")


if __name__ == "__main__":
    main()
