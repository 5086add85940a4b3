"""The extension itself: what it refuses, the kernel it names, and every blocking of its kernel against
the NumPy reference (the conformance kit's cases are small: they do not reach every block size)."""

import os

import numpy as np
import pytest

import algoswap

_kernels = pytest.importorskip("algoswap_cppconv._kernels",
                               reason="examples/cpp_plugin is not installed: pip install ./examples/cpp_plugin")

SEED = int(os.environ.get("ALGOSWAP_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
REPLAY = f"ALGOSWAP_TEST_SEED={SEED} pytest examples/cpp_plugin/tests"


def arrays(rng: np.random.Generator, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    return [rng.standard_normal(shape, dtype=np.float32) for shape in shapes]


def relative_error(got: np.ndarray, expected: np.ndarray) -> float:
    return float(np.linalg.norm(got - expected) / np.linalg.norm(expected))


# (input, weight, attributes): output channels per group of 1 to 40 (blocks of 1, 2, 4 and 8 channels, partial
# last blocks), outputs narrower than one 16-column step and wider than two (partial last steps), strides and
# dilations (phase-split columns), uneven padding
LAYERS = [
    ((2, 16, 20, 37), (24, 16, 3, 3), {"padding": 1}),
    ((1, 32, 7, 7), (40, 32, 3, 3), {"padding": 1}),
    ((1, 12, 9, 6), (20, 12, 1, 1), {}),
    ((1, 8, 23, 19), (6, 8, 5, 3), {"stride": (2, 3), "padding": ((2, 1), (0, 3)), "dilation": (1, 2)}),
    ((2, 6, 15, 30), (6, 1, 3, 3), {"groups": 6, "padding": 1, "stride": 2}),
    ((1, 9, 11, 18), (15, 3, 3, 3), {"groups": 3, "padding": 2, "dilation": 2}),
    ((1, 3, 40, 40), (16, 3, 7, 7), {"stride": 2, "padding": 3}),
    ((2, 4, 9, 33), (6, 2, 3, 3), {"groups": 2, "padding": (0, 1)}),
]


@pytest.mark.parametrize("x_shape, w_shape, attrs", LAYERS)
def test_matches_reference(x_shape, w_shape, attrs):
    rng = np.random.default_rng([SEED, LAYERS.index((x_shape, w_shape, attrs))])
    x, w, b = arrays(rng, x_shape, w_shape, (w_shape[0],))
    got = algoswap.ops.conv2d(x, w, b, algorithm="cppconv:direct", **attrs)
    expected = algoswap.ops.conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64),
                                   algorithm="numpy:direct", **attrs)
    terms = w_shape[1] * w_shape[2] * w_shape[3]
    # float32 sums of `terms` products: each rounding at most 2**-24, error growing at most like sqrt(terms)
    bound = 8 * 2.0**-24 * np.sqrt(terms)
    error = relative_error(got, expected)
    assert error < bound, f"relative error {error:.2e} > {bound:.2e}; replay: {REPLAY}"


def test_refuses_wrong_dtype_and_layout_instead_of_copying():
    rng = np.random.default_rng(SEED)
    x, w = arrays(rng, (1, 2, 5, 5), (3, 2, 3, 3))
    out = np.empty((1, 3, 3, 3), np.float32)
    args = ((1, 1), (0, 0), (1, 1), 1)
    _kernels.conv2d(x, w, None, out, *args)  # the arrays as algoswap hands them over
    for wrong in (x.astype(np.float64), np.asfortranarray(x), x[:, :, :, ::-1]):
        with pytest.raises(TypeError, match="incompatible function arguments"):
            _kernels.conv2d(wrong, w, None, out, *args)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        _kernels.conv2d(x, w, None, np.empty((1, 3, 3, 6), np.float32)[..., ::2], *args)  # out a strided view


def test_refuses_shapes_that_disagree():
    x, w = np.zeros((1, 2, 5, 5), np.float32), np.zeros((3, 2, 3, 3), np.float32)
    with pytest.raises(ValueError, match=r"argument 'out' has shape \(1, 4, 3, 3\); expected \(1, 3, Ho, Wo\)"):
        _kernels.conv2d(x, w, None, np.empty((1, 4, 3, 3), np.float32), (1, 1), (0, 0), (1, 1), 1)
    with pytest.raises(ValueError, match=r"argument 'bias' has shape \(2,\); expected \(3,\)"):
        _kernels.conv2d(x, w, np.zeros(2, np.float32), np.empty((1, 3, 3, 3), np.float32), (1, 1), (0, 0), (1, 1), 1)


def test_declares_zero_padding_only():
    x, w = np.zeros((1, 2, 5, 5), np.float32), np.zeros((3, 2, 3, 3), np.float32)
    with pytest.raises(algoswap.NoImplementationError, match="pads with zeros only; got padding_mode='reflect'"):
        algoswap.ops.conv2d(x, w, padding=1, padding_mode="reflect", algorithm="cppconv:direct")


def test_names_its_kernel():
    torch = pytest.importorskip("torch")
    layer = torch.nn.Conv2d(16, 32, 3, padding=1)
    swapped = algoswap.swap_conv2d(layer, "cppconv:direct")
    swapped(torch.randn(1, 16, 12, 12))
    kernel = algoswap.explain(swapped)[0].kernel
    assert kernel.startswith("cppconv direct, 8 channels x 16 columns per step") and "OpenMP" in kernel, kernel
