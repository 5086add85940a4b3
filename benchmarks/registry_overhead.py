"""What the registry costs: per-call overhead against calling the implementation directly,
a cold selection (no cached choice: predicates run, under the plugin time limit), the time of
`import algoswap`, and the time of the first plugin discovery.

    .venv/bin/python benchmarks/registry_overhead.py        (or: make bench)

Targets (issue 2): overhead <= 10 us per call with the selection cached. The no-op row isolates
the registry's own cost (a real kernel's run-to-run noise is larger than the overhead).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import timeit

import numpy as np


def per_call_us(fn, number: int = 20000, repeat: int = 7) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def _noop_conv(x, w, b, **attrs):
    return x


def _noop_supports(call) -> bool:
    return True


def _register_noop(registry) -> None:
    registry.add_backend("noop", priority=-100)  # never the default choice
    registry.add_implementation("conv2d", "noop", "noop", _noop_conv)
    registry.add_implementation("conv2d", "noop_checked", "noop", _noop_conv, supports=_noop_supports)


def overhead_rows() -> list[tuple[str, float, float]]:
    import types

    import algoswap

    noop = types.SimpleNamespace(algoswap_api_version=lambda: ">=1,<2", algoswap_register=_register_noop)
    algoswap.register_plugin(noop, name="noop")
    from algoswap_numpy import activation, conv

    x = np.random.default_rng(0).standard_normal(4).astype(np.float32)
    image = np.random.default_rng(1).standard_normal((1, 1, 4, 4)).astype(np.float32)
    weight = np.random.default_rng(2).standard_normal((1, 1, 3, 3)).astype(np.float32)
    conv_attrs = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1, padding_mode="zeros")
    cases = [
        ("relu (4,) default", lambda: algoswap.ops.relu(x), lambda: activation.relu(x)),
        ("relu (4,) 'numpy:direct'", lambda: algoswap.ops.relu(x, algorithm="numpy:direct"), lambda: activation.relu(x)),
        ("conv2d 1x1x4x4 'numpy:smm'", lambda: algoswap.ops.conv2d(image, weight, None, padding=1, algorithm="numpy:smm"),
         lambda: conv.conv2d_smm(image, weight, None, **conv_attrs)),
        ("conv2d, no-op implementation", lambda: algoswap.ops.conv2d(image, weight, None, padding=1, algorithm="noop:noop"),
         lambda: _noop_conv(image, weight, None, **conv_attrs)),
    ]
    for _, through, _ in cases:
        through()  # selection happens once, here
    return [(name, per_call_us(through), per_call_us(direct)) for name, through, direct in cases]


def cold_selection_rows() -> list[tuple[str, float]]:
    """Selection without the cache (``choose``: ranking, availability, predicates), per call."""
    import algoswap
    from algoswap._select import choose

    registry = algoswap.registry()
    conv = registry.spec("conv2d").bind([(1, 3, 16, 16), (8, 3, 3, 3), None], ["float32", "float32", None], {"padding": 1})
    relu = registry.spec("relu").bind([(4,)], ["float32"], {})
    cases = [
        ("relu, 'numpy:direct' (no predicate)", relu, "numpy:direct"),
        ("conv2d, 'noop:noop' (no predicate)", conv, "noop:noop"),
        ("conv2d, 'noop:noop_checked' (True)", conv, "noop:noop_checked"),
        ("conv2d, 'numpy:winograd' (predicate)", conv, "numpy:winograd"),
        ("conv2d, default (dnnl:auto here)", conv, "default"),
    ]
    return [(name, per_call_us(lambda: choose(registry, call, request), number=2000)) for name, call, request in cases]


def subprocess_seconds(code: str, runs: int = 7) -> float:
    times = [float(subprocess.check_output([sys.executable, "-c", code], text=True)) for _ in range(runs)]
    return statistics.median(times)


IMPORT = "import time; t = time.perf_counter(); import algoswap; print(time.perf_counter() - t)"
DISCOVER = "import time, algoswap; t = time.perf_counter(); algoswap.registry(); print(time.perf_counter() - t)"
DISCOVER_WARM = "import numpy, time, algoswap; t = time.perf_counter(); algoswap.registry(); print(time.perf_counter() - t)"


def main() -> None:
    print(f"{'call (tiny input)':<30} {'registry us':>12} {'direct us':>10} {'overhead us':>12} {'ratio':>6}")
    for name, through, direct in overhead_rows():
        print(f"{name:<30} {through:12.2f} {direct:10.2f} {through - direct:12.2f} {through / direct:6.2f}")
    print()
    print(f"{'cold selection (choose, no cache)':<40} {'us':>8}")
    for name, seconds in cold_selection_rows():
        print(f"{name:<40} {seconds:8.2f}")
    print()
    print(f"import algoswap (median of 7 fresh processes):          {subprocess_seconds(IMPORT) * 1e3:7.2f} ms")
    print(f"first discovery, incl. importing numpy and plugins:     {subprocess_seconds(DISCOVER) * 1e3:7.2f} ms")
    print(f"first discovery, numpy already imported:                {subprocess_seconds(DISCOVER_WARM) * 1e3:7.2f} ms")


if __name__ == "__main__":
    main()
