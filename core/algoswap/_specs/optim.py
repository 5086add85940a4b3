"""Optimizer updates as ops: sgd, momentum, nesterov, adagrad and adam, each dense (a gradient of
the parameter's shape) and sparse (the pair (indices, rows) that embedding's gradient gives).

They update the parameter and their state in place and return the parameter (``OpSpec.in_place``
names what they write): an optimizer's state is as large as its parameters, and a training loop
holds on to both anyway. The formulas are PyTorch's (torch.optim.SGD, with and without nesterov,
Adagrad, Adam); the caller keeps state arrays (zeros at first) and adam's step count.

Sparse updates are lazy, like torch.optim.SparseAdam: only the rows named by indices change, in
parameter and state; repeated indices have their rows added first. For sgd and adagrad this is
exactly the dense update with the densified gradient; for momentum, nesterov and adam, rows not
named keep their state instead of decaying it.
"""

from __future__ import annotations

from typing import Any

from .._errors import InvalidSpec
from .._spec import Attr, Input, OpSpec, Shape
from ._convert import integer, real
from ._dtypes import typed
from ._geometry import ANY_RANK

_FAMILY = "optimizer"
_LR = Attr("lr", convert=real(0.0), doc="the learning rate")
_MOMENTUM = Attr("momentum", 0.9, real(0.0), "the velocity's decay")
_ATTRS: dict[str, tuple[Attr, ...]] = {
    "sgd": (_LR,),
    "momentum": (_LR, _MOMENTUM),
    "nesterov": (_LR, _MOMENTUM),
    "adagrad": (_LR, Attr("eps", 1e-10, real(0.0, open_min=True), "added to the root of the accumulator")),
    "adam": (
        _LR,
        Attr("beta1", 0.9, real(0.0, 1.0, open_max=True), "decay of the first moment"),
        Attr("beta2", 0.999, real(0.0, 1.0, open_max=True), "decay of the second moment"),
        Attr("eps", 1e-8, real(0.0, open_min=True), "added to the root of the second moment"),
        Attr("step", convert=integer(1), doc="this update's number, from 1 (for the bias corrections)"),
    ),
}
_STATE = {"sgd": (), "momentum": ("velocity",), "nesterov": ("velocity",), "adagrad": ("accumulator",), "adam": ("m", "v")}
_DOCS = {
    "sgd": "param -= lr * grad.",
    "momentum": "velocity = momentum * velocity + grad; param -= lr * velocity (torch.optim.SGD with momentum).",
    "nesterov": "velocity = momentum * velocity + grad; param -= lr * (grad + momentum * velocity) "
    "(torch.optim.SGD with nesterov=True).",
    "adagrad": "accumulator += grad**2; param -= lr * grad / (sqrt(accumulator) + eps) (torch.optim.Adagrad).",
    "adam": "m = beta1 m + (1 - beta1) grad; v = beta2 v + (1 - beta2) grad**2; param -= lr * m / (1 - beta1**step) "
    "/ (sqrt(v / (1 - beta2**step)) + eps) (torch.optim.Adam).",
}


def _like_param(shapes: dict[str, Any], names: tuple[str, ...]) -> Shape:
    param: Shape = shapes["param"]
    for name in names:
        if shapes[name] != param:
            raise InvalidSpec(name, f"shape {shapes[name]}", f"shape {param} like 'param'")
    return param


def _dense_shape(state: tuple[str, ...]) -> Any:
    return lambda shapes, attrs: _like_param(shapes, ("grad",) + state)


def _sparse_shape(state: tuple[str, ...]) -> Any:
    def rule(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
        expected = shapes["indices"] + shapes["param"][1:]
        if shapes["rows"] != expected:
            raise InvalidSpec("rows", f"shape {shapes['rows']}", f"{expected}: one row of param {shapes['param']} per index")
        return _like_param(shapes, state)

    return rule


def _update(name: str, sparse: bool) -> OpSpec:
    state = _STATE[name]
    grads = (Input("indices", ANY_RANK), Input("rows", ANY_RANK)) if sparse else (Input("grad"),)
    return OpSpec(
        f"{name}_update{'_sparse' if sparse else ''}",
        (Input("param", ANY_RANK if sparse else None),) + grads + tuple(Input(s) for s in state),
        _ATTRS[name],
        shape_rule=_sparse_shape(state) if sparse else _dense_shape(state),
        dtype_rule=typed(ints=("indices",)),
        family=_FAMILY,
        in_place=("param",) + state,
        doc=_DOCS[name] + (" Lazy sparse form: only rows named by indices change." if sparse else "")
        + " In place; returns param.",
    )


SPECS = tuple(_update(name, sparse) for sparse in (False, True) for name in _STATE)
