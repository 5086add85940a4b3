"""Non-finite conformance: every registered implementation, on the conformance cases of its op with NaN,
+inf and -inf planted into its inputs, against torch's semantics, by the conformance kit
(algoswap/testing/_nonfinite_check.py says how).

The kit's own oracle is the NumPy reference; here it is torch (tests/torch_oracle.py) where the op has a
torch equivalent, else the NumPy reference. So every implementation, the reference too, is held to
torch's semantics, and the kit's reference oracle is held to them with it. The defects issue 12
reported are also checked on fixed inputs (KNOWN_CASES), and through a small model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import algoswap  # noqa: E402
from algoswap.testing._cases import cases_for, draw, implementation_params  # noqa: E402
from algoswap.testing._nonfinite import plantable  # noqa: E402
from algoswap.testing._nonfinite_check import TOLERANCE, Oracle, Prepared, judge, reference_oracle  # noqa: E402
from algoswap.testing._nonfinite_check import check_nonfinite as _check_nonfinite  # noqa: E402
from conftest import SEED  # noqa: E402
from helpers import fail, hardware_refusal  # noqa: E402
from torch_oracle import TORCH, to_torch  # noqa: E402

# Ops with no torch equivalent: the NumPy reference is their oracle.
REFERENCE_ORACLE = {
    **{f"{name}_update{kind}": "an optimizer step updates its state in place (torch.optim keeps its own)"
       for kind in ("", "_sparse") for name in ("sgd", "momentum", "nesterov", "adagrad", "adam")},
    **{op: "communication, checked in a group of one rank, where torch.distributed has nothing to compare with"
       for op in algoswap.FAMILIES["comm"]},
}
# Ops none of whose cases has a floating input to plant into.
NO_FLOAT_INPUT = {"one_hot": "its only input is integer indices", "shard_indices": "its only input is integer indices"}

# The algorithms that may mix many inputs into each intermediate, and so may declare nan="spreads".
SPREADING_ALGORITHMS = ("fft", "fft_tiling", "winograd", "winograd_nonfused", "guess", "find")


@pytest.mark.parametrize("impl, dtype", implementation_params(tuple(TOLERANCE)))
def test_nonfinite_inputs_follow_torch(impl: algoswap.ImplRecord, dtype: str) -> None:
    ran, failures = check_nonfinite(impl, dtype)
    if not ran and (refusal := hardware_refusal(impl.backend, dtype)):
        pytest.skip(refusal)  # every case refused where the CPU has no kernels for dtype; elsewhere: fails below
    assert ran, f"{impl.qualified} supports none of the cases of {impl.op} that have a floating input"
    if failures:
        fail("\n".join([f"{impl.op}, {impl.qualified} (nan={impl.nan!r}), {dtype}"] + failures))


def _torch_answer(call: algoswap.OpCall, inputs: list[Any], updated: list[int]) -> list[np.ndarray] | Exception:
    """torch's results in float64, or what it raised; the reference's for ops torch has no equivalent of."""
    if call.op not in TORCH:
        answer: list[np.ndarray] | Exception = reference_oracle.run(call, inputs, updated)
        return answer
    try:
        out = TORCH[call.op](*[to_torch(a) for a in inputs], **call.attrs)
    except RuntimeError as error:
        return error
    return [out.detach().numpy()]


TORCH_ORACLE = Oracle("torch", _torch_answer)


def check_nonfinite(impl: algoswap.ImplRecord, dtype: str) -> tuple[int, list[str]]:
    return _check_nonfinite(impl, dtype, SEED, TORCH_ORACLE)


def _nan_at(shape: tuple[int, ...], *where: tuple[int, ...], value: float = np.nan) -> np.ndarray:
    x = np.random.default_rng(SEED).standard_normal(shape).astype(np.float32)
    for position in where:
        x[position] = value
    return x


def _nan_and_minus_inf(shape: tuple[int, ...]) -> np.ndarray:
    """NaN at [0, 0] and -inf at [0, 2] (the dense operand of the H200 probe of cuSPARSE's SpMM)."""
    x = _nan_at(shape, (0, 0))
    x[0, 2] = -np.inf
    return x


def _one_entry_a_row() -> Any:
    """A 5x4 CSR matrix with one stored entry a row, the last row's in column 3."""
    import scipy.sparse

    return scipy.sparse.csr_matrix((_nan_at((5,)), [0, 1, 2, 0, 3], [0, 1, 2, 3, 4, 5]), shape=(5, 4))


def _rows_masked(shape: tuple[int, int], row: int) -> np.ndarray:
    """A bool attention mask taking every key but for the queries of ``row``, which take none."""
    mask = np.ones(shape, bool)
    mask[row] = False
    return mask


_POOL = {"kernel_size": 2, "stride": 2}
# The defects issue 12 reports (and others this suite found), as fixed inputs: (op, inputs, attrs).
KNOWN_CASES: dict[str, tuple[str, list[Any], dict[str, Any]]] = {
    "relu of nan": ("relu", [np.array([np.nan, -1, 1], np.float32)], {}),
    "softmax row with a nan": ("softmax", [np.array([[np.nan, 1, 2]], np.float32)], {"axis": 1}),
    "maxpool window with a nan": ("maxpool2d", [_nan_at((1, 1, 4, 4), (0, 0, 1, 1))], _POOL),
    "maxpool window of -inf by the padding": ("maxpool2d", [_nan_at((1, 1, 5, 5), (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0),
                                                                      (0, 0, 1, 1), value=-np.inf)],
                                              {"kernel_size": 3, "stride": 2, "padding": 1}),
    "maxpool gradient of two nans in a window": ("maxpool2d_grad", [_nan_at((1, 1, 2, 2)), _nan_at((1, 1, 4, 4), (0, 0, 0, 0),
                                                                                                       (0, 0, 1, 1))], _POOL),
    "avgpool of one nan": ("avgpool2d", [_nan_at((1, 1, 6, 6), (0, 0, 2, 3))], _POOL),
    "adaptive avgpool of one nan": ("adaptiveavgpool2d", [_nan_at((1, 1, 6, 6), (0, 0, 2, 3))], {"output_size": 3}),
    "cross entropy with -inf beside the label": ("softmax_cross_entropy", [_nan_at((2, 3), (0, 2), value=-np.inf),
                                                                           np.array([0, 1])], {"reduction": "none"}),
    # cuDNN's engines skip the taps in the zero padding, where PyTorch multiplies: 0 * inf is NaN
    "conv2d with an inf weight by the zero padding": (
        "conv2d", [_nan_at((1, 2, 5, 5)), _nan_at((3, 2, 3, 3), (1, 0, 0, 2), value=np.inf), _nan_at((3,))], {"padding": 1}),
    "conv2d weight gradient of an inf grad_output by the zero padding": (
        "conv2d_grad_weight", [_nan_at((1, 3, 5, 5), (0, 1, 0, 3), value=np.inf), _nan_at((1, 2, 5, 5))],
        {"weight_size": (3, 2, 3, 3), "padding": 1}),
    # cuSPARSE's SpMM (CUDA 13, H200) added 0 * dense[0, :] to the product's last row
    "csrmm with nan and -inf in the dense first row": ("csrmm", [_one_entry_a_row(), _nan_and_minus_inf((4, 3))], {}),
    "csrmm gradient with nan and -inf in the first row": ("csrmm_grad_dense", [_one_entry_a_row(), _nan_and_minus_inf((5, 3))],
                                                          {}),
    "reduce_max of a row with a nan and of a row of -inf": (
        "reduce_max", [_nan_at((3, 4), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3), value=-np.inf), ], {"axes": 1}),
    # torch's safe softmax: a query whose scores are all -inf attends to nothing (zeros); 0 * inf is still NaN
    "attention of a fully masked query, an inf value": (
        "scaled_dot_product_attention", [_nan_at((2, 3, 4)), _nan_at((2, 5, 4)), _nan_at((2, 5, 2), (0, 1, 0), value=np.inf),
                                         _rows_masked((3, 5), 1)], {}),
    "attention of a fully masked query with a nan key": (
        "scaled_dot_product_attention", [_nan_at((1, 3, 4)), _nan_at((1, 5, 4), (0, 2, 1)), _nan_at((1, 5, 2)),
                                         np.where(_rows_masked((3, 5), 0), 0, -np.inf).astype(np.float32)], {}),
    "attention gradient of a fully masked query": (
        "scaled_dot_product_attention_grad_query", [_nan_at((2, 3, 2)), _nan_at((2, 3, 4)), _nan_at((2, 5, 4)),
                                                    _nan_at((2, 5, 2)), _rows_masked((3, 5), 2)], {}),
    # torch multiplies the neighbour of a clamped coordinate by weight 0: an inf there is NaN
    "bilinear upscale with an inf beside the edge": (
        "interpolate", [_nan_at((1, 1, 2, 3), (0, 0, 0, 1), value=np.inf)], {"size": (2, 6), "mode": "bilinear"}),
    # timm's pad_same fills with -inf before a max pool; the fill is written as given, NaN too
    "pad with -inf": ("pad", [_nan_at((1, 2, 3, 4), (0, 1, 2, 3))], {"pads": ((0, 1), (1, 0)), "value": -np.inf}),
    "pad with nan": ("pad", [_nan_at((3, 4), (1, 1), value=np.inf)], {"pads": ((1, 1), (0, 2)), "value": np.nan}),
    # bicubic at the same size still reads four neighbours, the outer ones by weight 0: NaN around an inf
    "bicubic at the same size with an inf": (
        "interpolate", [_nan_at((1, 1, 4, 5), (0, 0, 1, 1), value=np.inf)], {"size": (4, 5), "mode": "bicubic"}),
}


def _known_cases() -> list[Any]:
    params = []
    implementations = implementation_params(tuple(TOLERANCE))
    for name, (op, _, _) in KNOWN_CASES.items():
        for param in implementations:
            impl, dtype = param.values
            if impl.op == op and dtype == "float32":
                params.append(pytest.param(name, impl, marks=param.marks, id=f"{name}-{impl.qualified}"))
    return params


@pytest.mark.parametrize("name, impl", _known_cases())
def test_known_cases_follow_torch(name: str, impl: algoswap.ImplRecord) -> None:
    op, inputs, attrs = KNOWN_CASES[name]
    call = algoswap.registry().spec(op).bind([a.shape for a in inputs], [str(a.dtype) for a in inputs], attrs)
    if impl.check(call) is not True:
        pytest.skip(f"{impl.qualified} does not serve this case: {impl.check(call)}")
    case = Prepared(call, [], 0.0, [], TORCH_ORACLE.name)
    problem = judge(impl, case, inputs, _torch_answer(call, inputs, []), TOLERANCE["float32"])
    assert not problem, f"{name}: {problem}"


def test_every_op_has_nonfinite_cases_and_an_oracle(rng: np.random.Generator) -> None:
    registry = algoswap.registry()
    for op in registry.ops:
        floating = any(plantable(draw(rng, s, "float32")) for shapes, _ in cases_for(op) for s in shapes)
        if op in NO_FLOAT_INPUT:
            assert not floating, f"{op} has floating inputs now: remove it from NO_FLOAT_INPUT"
            continue
        assert floating, f"no case of {op} has a floating input to plant NaN into: add one to core/algoswap/testing/_cases.py"
        assert op in TORCH or op in REFERENCE_ORACLE, f"{op} has no oracle: map it in tests/torch_oracle.py"


def test_spreading_is_declared_only_by_mixing_algorithms() -> None:
    for impl in algoswap.registry().implementations():
        mixing = impl.op.startswith("conv2d") and impl.algorithm in SPREADING_ALGORITHMS
        assert (impl.nan == "spreads") == mixing, f"{impl.op} {impl.qualified} declares nan={impl.nan!r}"


def _record(op: str, fn: Any, nan: str = "exact") -> algoswap.ImplRecord:
    return algoswap.ImplRecord(op, "wrong", "numpy", fn, nan=nan)


def test_the_suite_catches_lost_and_invented_nan() -> None:
    drops_nan = _record("relu", lambda x: np.fmax(x, 0))  # fmax returns the number where one argument is NaN
    failures = check_nonfinite(drops_nan, "float32")[1]
    assert failures and all("not as torch has them" in f for f in failures)
    spec = algoswap.registry().spec("avgpool2d")

    def all_nan(x: np.ndarray, **attrs: Any) -> np.ndarray:
        return np.full(spec.bind([x.shape], [str(x.dtype)], attrs).out_shape, np.nan, x.dtype)

    assert check_nonfinite(_record("avgpool2d", all_nan), "float64")[1]
    assert not check_nonfinite(_record("avgpool2d", all_nan, nan="spreads"), "float64")[1]


def test_the_suite_catches_an_inf_turned_nan_or_finite() -> None:
    inf_to_nan = _record("neg", lambda x: np.where(np.isinf(x), np.nan, -x))
    clipped = _record("neg", lambda x: -np.clip(x, -1e30, 1e30))
    assert check_nonfinite(inf_to_nan, "float64")[1]
    assert not check_nonfinite(_record("neg", inf_to_nan.callable, nan="spreads"), "float64")[1]
    assert check_nonfinite(clipped, "float32")[1]
    assert check_nonfinite(_record("neg", clipped.callable, nan="spreads"), "float32")[1]


def test_the_suite_expects_a_refusal_where_torch_refuses() -> None:
    silent = _record("binary_cross_entropy", lambda x, t, reduction: np.asarray(np.mean(x), dtype=x.dtype))
    failures = check_nonfinite(silent, "float64")[1]
    assert failures and any("oracle refuses" in f for f in failures)


def test_the_capability_matrix_shows_how_each_implementation_treats_nan() -> None:
    matrix = algoswap.capabilities("conv2d")
    cells = matrix.to_dict()["ops"]["conv2d"]["backends"]["numpy"]
    assert cells["fft"]["nan"] == cells["winograd"]["nan"] == "spreads" and cells["smm"]["nan"] == "exact"
    assert matrix.to_dict()["ops"]["conv2d"]["backends"]["dnnl"]["winograd"]["nan"] is None  # declared unsupported
    row = next(line for line in matrix.to_text().splitlines() if line.startswith("numpy"))
    assert row.split()[1:] == [("✓~" if a in ("fft", "winograd") else "✓" if a in ("direct", "smm") else "✗")
                               for a in matrix.tables["conv2d"].algorithms]
    assert "~ spreads NaN" in matrix.to_markdown() and "~ spreads NaN" not in algoswap.capabilities("relu").to_text()


def _small_convnet() -> Any:
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 5)).eval()


@pytest.mark.parametrize("request_", ["default", "numpy:default", "sycl:default"])
def test_a_nan_pixel_reaches_the_logits_where_torch_has_it(request_: str) -> None:
    """The issue's model: conv2d, relu, maxpool2d, flatten, linear. "default" runs all but flatten
    on dnnl where it is installed (fused conv and relu, oneDNN's max pooling and inner product)."""
    backend = request_.partition(":")[0]
    available = algoswap.registry().backends[backend].availability() if backend != "default" else True
    if available is not True:
        pytest.skip(f"{backend} unavailable: {available}")
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        net, x = _small_convnet(), torch.randn(2, 3, 8, 8)
    x[1, 0, 3, 4] = float("nan")
    model = algoswap.swap_backend(net, request_, sample_input_shape=tuple(x.shape))
    with torch.no_grad():
        expected, got = net(x).numpy(), model(x).numpy()
    assert np.isnan(expected[1]).all() and not np.isnan(expected[0]).any()  # the sample's logits, and only its
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
