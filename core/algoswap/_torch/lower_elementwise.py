"""Elementwise rules: arithmetic between tensors (broadcasting as the registry's ops do) and with
Python numbers (the ``*_scalar`` ops), activations, softmax, and dropout (the identity in inference),
in their function and method forms; modules are in ``lower_modules``."""

from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import fx

from .lowered import Alias, Constant, Handler, Lowered, LoweredOp, PythonCall, Unsupported, deferred, signature

if TYPE_CHECKING:
    from .lowering import Lowerer


def negated(value: Any) -> float:
    return -float(value)


def reciprocal(value: Any) -> float:
    if value == 0:
        raise ZeroDivisionError("a tensor divided by a Python number computed as 0 when planning (convert with a sample "
                                "input of this shape: a zero known at conversion divides as torch does)")
    return 1.0 / float(value)


def _scalar(lw: Lowerer, value: Any) -> bool:
    if isinstance(value, bool):
        raise Unsupported("arithmetic with a Python bool")
    return isinstance(value, (int, float)) or (isinstance(value, fx.Node) and lw.is_python(value))


def _tensor(lw: Lowerer, value: Any) -> Any:
    if isinstance(value, fx.Node) or isinstance(value, (torch.Tensor, LoweredOp)):
        return value
    raise Unsupported(f"an operand of type {type(value).__name__}")


def arithmetic(lw: Lowerer, kind: str, a: Any, b: Any) -> Lowered:
    """``a <kind> b`` (kind: add, sub, mul, div) between tensors and Python numbers, one of which is a tensor."""
    if _scalar(lw, b):
        if kind == "div" and not isinstance(b, fx.Node) and b == 0:  # infinities of the zero's sign, NaN for 0 and NaN
            return LoweredOp("div", [_tensor(lw, a), torch.tensor(float(b))], {})
        value = deferred(negated, b) if kind == "sub" else deferred(reciprocal, b) if kind == "div" else b
        return LoweredOp("mul_scalar" if kind in ("mul", "div") else "add_scalar", [_tensor(lw, a)], {"value": value})
    if _scalar(lw, a):
        b = _tensor(lw, b)
        if kind == "sub":
            return LoweredOp("add_scalar", [LoweredOp("neg", [b], {})], {"value": a})
        return LoweredOp({"add": "add_scalar", "mul": "mul_scalar", "div": "rdiv_scalar"}[kind], [b], {"value": a})
    return LoweredOp(kind, [_tensor(lw, a), _tensor(lw, b)], {})


_PYTHON = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv}


def _binary(kind: str, alpha: bool = False, rounding: bool = False, swapped: bool = False) -> Handler:
    """``torch.add(a, b, alpha=)``, ``a * b``, ``x.div_(y)``, ``torch.rsub`` (``swapped``): Python numbers stay Python."""
    extra: dict[str, Any] = {"alpha": 1} if alpha else {"rounding_mode": None} if rounding else {}
    sig = signature("input", "other", **extra)

    def handler(lw: Lowerer, node: fx.Node) -> Lowered:
        bound = lw.bind(sig, node)
        a, b = (bound["other"], bound["input"]) if swapped else (bound["input"], bound["other"])
        if bound.get("rounding_mode") is not None:
            raise Unsupported(f"rounding_mode={bound['rounding_mode']!r} (only true division is lowered)")
        scale = bound.get("alpha", 1)
        if lw.is_python(a) and lw.is_python(b) and scale == 1:
            return PythonCall(_PYTHON[kind], (a, b))
        if scale != 1:
            if not _scalar(lw, scale) or lw.is_python(b):
                raise Unsupported(f"alpha={scale!r} with these operands")
            b = LoweredOp("mul_scalar", [_tensor(lw, b)], {"value": scale})
        return arithmetic(lw, kind, a, b)

    return handler


def _unary(op: str, *names: str, **defaults: Any) -> Handler:
    """A one-input op; the other arguments (except ``inplace``) become its attributes."""
    sig = signature("input", *names, **defaults)

    def handler(lw: Lowerer, node: fx.Node) -> Lowered:
        bound = lw.bind(sig, node)
        bound.pop("inplace", None)  # a new value either way (lower_in_place)
        return LoweredOp(op, [bound.pop("input")], bound)

    return handler


def _number(lw: Lowerer, value: Any) -> Any:
    """A one-element constant tensor (Gemma's clipping bounds, buffers) as the Python number it holds."""
    constant = lw.constants.get(value) if isinstance(value, fx.Node) else value
    if isinstance(constant, torch.Tensor) and constant.numel() == 1 and constant.is_floating_point():
        return float(constant.item())
    return value


def _full_like(lw: Lowerer, node: fx.Node) -> Lowered:
    """``torch.full_like(x, v)`` (torch.export's ``x[:, :1] = v``: a fill of the window): ones_like(x) * v, exactly v."""
    bound = lw.bind(signature("input", "fill_value", dtype=None, layout=None, device=None, pin_memory=None,
                              memory_format=None, requires_grad=False), node)
    value = _number(lw, bound["fill_value"])
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise Unsupported(f"full_like with fill value {value!r} (a finite number is lowered)")
    if bound["dtype"] not in (None, lw.dtype):
        raise Unsupported(f"full_like with dtype={bound['dtype']} (the model computes in {lw.dtype})")
    ones = LoweredOp("ones_like", [bound["input"]], {})
    return ones if value == 1 else LoweredOp("mul_scalar", [ones], {"value": float(value)})


def _clamp(lw: Lowerer, node: fx.Node) -> Lowered:
    """``torch.clamp(x, min, max)`` with numbers: clamp_min, hardtanh with both bounds (NaN stays NaN in both),
    or, with max alone, -clamp_min(-x, -max)."""
    bound = lw.bind(signature("input", min=None, max=None), node)
    x, low, high = bound["input"], _number(lw, bound["min"]), _number(lw, bound["max"])
    if not all(v is None or isinstance(v, (int, float)) for v in (low, high)):
        raise Unsupported("torch.clamp is lowered with bounds that are numbers or one-element constants only")
    low, high = (None if low == -math.inf else low), (None if high == math.inf else high)
    if low is None and high is None:
        return Alias(x)
    if low is not None and high is not None:
        return LoweredOp("hardtanh", [x], {"min_val": float(low), "max_val": float(high)})
    if low is not None:
        return LoweredOp("clamp_min", [x], {"value": float(low)})
    assert high is not None  # for mypy: not both None
    return LoweredOp("neg", [LoweredOp("clamp_min", [LoweredOp("neg", [x], {})], {"value": -float(high)})], {})


def _hardtanh(low: float | None = None, high: float | None = None) -> Handler:
    """``F.hardtanh(x, min_val, max_val)``; ``F.relu6`` is hardtanh(0, 6)."""
    sig = signature("input", inplace=False) if low is not None else signature("input", min_val=-1.0, max_val=1.0, inplace=False)

    def handler(lw: Lowerer, node: fx.Node) -> Lowered:
        bound = lw.bind(sig, node)
        bounds = {"min_val": low, "max_val": high} if low is not None else {"min_val": bound["min_val"], "max_val": bound["max_val"]}
        return LoweredOp("hardtanh", [bound["input"]], bounds)

    return handler


def _pow(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", "exponent"), node)
    base, exponent = bound["input"], bound["exponent"]
    if lw.is_python(base) and lw.is_python(exponent):
        return PythonCall(operator.pow, (base, exponent))
    if not _scalar(lw, exponent) or lw.is_python(base):
        raise Unsupported("a power with a tensor exponent (only tensor ** number is lowered)")
    return LoweredOp("pow_scalar", [base], {"exponent": exponent})


def _neg(lw: Lowerer, node: fx.Node) -> Lowered:
    x = node.args[0]
    return PythonCall(operator.neg, (x,)) if lw.is_python(x) else LoweredOp("neg", [x], {})


def _softmax(op: str) -> Handler:
    sig = signature("input", dim=None, _stacklevel=3, dtype=None)

    def handler(lw: Lowerer, node: fx.Node) -> Lowered:
        bound = lw.bind(sig, node)
        if bound["dim"] is None:
            raise Unsupported(f"{op} without dim (PyTorch's implicit choice of dimension is deprecated)")
        if bound["dtype"] is not None:
            raise Unsupported(f"{op} with dtype={bound['dtype']} (it computes in the model's dtype)")
        return LoweredOp(op, [bound["input"]], {"axis": bound["dim"]})

    return handler


def _addcmul(divide: bool) -> Handler:
    """``torch.addcmul(input, t1, t2, value=v)``: input + v * t1 * t2 (``addcdiv``: t1 / t2)."""
    sig = signature("input", "tensor1", "tensor2", value=1)

    def handler(lw: Lowerer, node: fx.Node) -> Lowered:  # value scales tensor1 first, in torch's order
        bound = lw.bind(sig, node)
        first = bound["tensor1"] if bound["value"] == 1 else arithmetic(lw, "mul", bound["tensor1"], bound["value"])
        return arithmetic(lw, "add", bound["input"], arithmetic(lw, "div" if divide else "mul", first, bound["tensor2"]))

    return handler


# ---------------------------------------------------------------------------- casts


def model_dtype(lw: Lowerer, x: Any) -> torch.dtype:
    """The dtype a tensor has in the Model: the compute dtype where torch's is floating (weights are rounded
    to it, and every op computes in it), else torch's (from a sample input's run)."""
    value = lw.constants.get(x, x) if isinstance(x, fx.Node) else x
    if isinstance(value, torch.Tensor):
        seen: torch.dtype | None = value.dtype
    elif isinstance(value, fx.Node):
        seen = getattr(value.meta.get("tensor_meta", value.meta.get("val")), "dtype", None)
    else:
        raise Unsupported(f"the dtype of a {type(value).__name__}")
    if seen is None:
        raise Unsupported("it reads a tensor's dtype, known only with a sample_input_shape")
    return lw.dtype if seen.is_floating_point else seen


def cast(lw: Lowerer, x: Any, dtype: Any) -> Lowered:
    """A cast to the dtype ``x`` has in the Model is the same values (an alias); any other is refused, since
    no registry op changes a dtype and keeping the compute dtype would compute other values than asked
    (timm's ``x.float()`` around a norm: exact in float32, refused when converting with dtype=float16)."""
    dtype = lw.constants.get(dtype, dtype) if isinstance(dtype, fx.Node) else dtype
    if dtype is None:
        return Alias(x)
    if not isinstance(dtype, torch.dtype):
        raise Unsupported(f"a cast to {dtype!r} (a dtype computed in forward, or not a dtype)")
    have = model_dtype(lw, x)
    if dtype != have:
        raise Unsupported(f"a cast from {have} to {dtype}: the Model computes in {lw.dtype}, and no registry op changes a "
                          "dtype (only casts to the dtype a value already has are lowered: no-ops)")
    return Alias(x)


def tensor_dtype(lw: Lowerer, x: Any) -> Lowered:
    """``x.dtype``: the dtype ``x`` has in the Model, a constant."""
    return Constant(model_dtype(lw, x))


def _to(lw: Lowerer, node: fx.Node) -> Lowered:
    """``x.to(dtype)``, ``x.to(other)``, ``x.to(device, dtype)``, ``x.to(dtype=...)``: a cast; devices, memory
    formats, ``copy`` and ``non_blocking`` change no value (the Model places its values itself)."""
    x, *rest = node.args
    dtype = node.kwargs.get("dtype")
    for arg in rest:
        value = lw.constants.get(arg, arg) if isinstance(arg, fx.Node) else arg
        if isinstance(value, torch.dtype):
            dtype = value
        elif isinstance(value, torch.Tensor) or isinstance(value, fx.Node) and lw.is_tensor(value):
            dtype = model_dtype(lw, value)
        elif not isinstance(value, (str, torch.device, bool)):
            raise Unsupported(f"Tensor.to with an argument {value!r}")
    return cast(lw, x, dtype)


def _type(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("self", dtype=None, non_blocking=False), node)
    if bound["dtype"] is None:
        raise Unsupported("Tensor.type() without a dtype (it returns the type's name)")
    return cast(lw, bound["self"], bound["dtype"])


def _cast_to(dtype: torch.dtype) -> Handler:
    """``x.float()``, ``x.half()``, ``x.long()``, ...: a cast to one dtype."""
    return lambda lw, node: cast(lw, node.args[0], dtype)


_CASTS = {"float": torch.float32, "double": torch.float64, "half": torch.float16, "bfloat16": torch.bfloat16,
          "bool": torch.bool, "byte": torch.uint8, "char": torch.int8, "short": torch.int16, "int": torch.int32,
          "long": torch.int64}


def _identity_unless_training(lw: Lowerer, node: fx.Node) -> Lowered:
    bound = lw.bind(signature("input", p=0.5, training=True, inplace=False), node)
    if bound["training"] is not False:
        raise Unsupported("dropout with training=True (random); pass training=self.training and convert in eval mode")
    return Alias(bound["input"])


_RELU = _unary("relu", inplace=False)
_SIGMOID, _TANH = _unary("sigmoid"), _unary("tanh")
_ADD, _SUB, _MUL, _DIV = _binary("add", alpha=True), _binary("sub", alpha=True), _binary("mul"), _binary("div", rounding=True)
_ACTIVATIONS: dict[Any, Handler] = {
    F.relu: _RELU, torch.relu: _RELU, torch.relu_: _RELU,
    F.relu6: _hardtanh(0.0, 6.0), F.hardtanh: _hardtanh(), F.hardtanh_: _hardtanh(),
    F.silu: _unary("silu", inplace=False), F.mish: _unary("mish", inplace=False),
    F.gelu: _unary("gelu", approximate="none"),
    F.hardswish: _unary("hardswish", inplace=False), F.hardsigmoid: _unary("hardsigmoid", inplace=False),
    F.elu: _unary("elu", alpha=1.0, inplace=False),
    F.leaky_relu: _unary("leaky_relu", negative_slope=0.01, inplace=False),
    torch.sigmoid: _SIGMOID, F.sigmoid: _SIGMOID, torch.tanh: _TANH, F.tanh: _TANH,
    torch.sqrt: _unary("sqrt"), torch.rsqrt: _unary("rsqrt"),
    F.softmax: _softmax("softmax"), torch.softmax: _softmax("softmax"),
    F.log_softmax: _softmax("log_softmax"), torch.log_softmax: _softmax("log_softmax"),
}  # fmt: skip

FUNCTIONS: dict[Any, Handler] = {
    **_ACTIVATIONS,
    operator.add: _ADD, operator.iadd: _ADD, torch.add: _ADD,
    operator.sub: _SUB, operator.isub: _SUB, torch.sub: _SUB, torch.subtract: _SUB, torch.rsub: _binary("sub", swapped=True),
    operator.mul: _MUL, operator.imul: _MUL, torch.mul: _MUL, torch.multiply: _MUL,
    operator.truediv: _DIV, operator.itruediv: _DIV, torch.div: _DIV, torch.divide: _DIV, torch.true_divide: _DIV,
    operator.pow: _pow, torch.pow: _pow,
    operator.neg: _neg, torch.neg: _neg, torch.negative: _neg,
    torch.clamp: _clamp, torch.clip: _clamp, torch.clamp_min: _clamp, torch.full_like: _full_like,
    torch.addcmul: _addcmul(divide=False), torch.addcdiv: _addcmul(divide=True),
    F.dropout: _identity_unless_training, F.dropout1d: _identity_unless_training, F.dropout2d: _identity_unless_training,
    F.dropout3d: _identity_unless_training, F.alpha_dropout: _identity_unless_training, F.feature_alpha_dropout: _identity_unless_training,
}  # fmt: skip


# Method forms: the tensor is the first argument, as in the function forms.
METHODS: dict[str, Handler] = {
    **{name: rule for names, rule in (
        (("add", "add_"), _ADD), (("sub", "sub_", "subtract"), _SUB), (("mul", "mul_", "multiply"), _MUL),
        (("div", "div_", "divide", "true_divide"), _DIV), (("pow",), _pow), (("neg", "negative"), _neg),
        (("clamp", "clip", "clamp_min"), _clamp),
        (("relu", "relu_"), _RELU), (("sigmoid", "sigmoid_"), _SIGMOID), (("tanh", "tanh_"), _TANH),
        (("sqrt",), _unary("sqrt")), (("rsqrt",), _unary("rsqrt")),
        (("softmax",), _softmax("softmax")), (("log_softmax",), _softmax("log_softmax")),
        (("addcmul",), _addcmul(divide=False)), (("addcdiv",), _addcmul(divide=True)),
    ) for name in names},
    "to": _to, "type": _type, "type_as": lambda lw, node: cast(lw, node.args[0], model_dtype(lw, node.args[1])),
    **{name: _cast_to(dtype) for name, dtype in _CASTS.items()},
}  # fmt: skip
