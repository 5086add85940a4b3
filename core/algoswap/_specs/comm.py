"""Communication among the ranks of a group of processes: collectives, point-to-point exchange, and the
row routing of sharded embedding tables.

Every rank runs the same op on its own array, in the same order as the others (an executor runs a
graph's steps in one order on every rank that built the same graph). ``group`` names the ranks taking
part ("world": all of them; others come from ``algoswap.dist.new_group``); ``size`` is their number, by
default the named group's (``algoswap._groups``: a process set up by no ``algoswap.dist.init()`` is a
world of one), so that shape rules give the same shapes on every rank. The NumPy reference defines each
op for a group of one; the ``algoswap-dist`` plugin runs them on torch.distributed (gloo, NCCL).

Gradients follow the ops' meaning across ranks, as if the ranks' losses were added: allreduce's gradient
is allreduce of the gradients (sum for sum, mean for mean; max and min route it to the ranks holding the
extreme); allgather's is reduce_scatter and reduce_scatter's is allgather; broadcast's is the sum reduced
onto the root; all_to_all's is all_to_all; sendrecv's is sendrecv with its two peers swapped.
"""

from __future__ import annotations

from typing import Any, Sequence

from .._errors import InvalidSpec, OpDtypeError
from .._groups import WORLD, group_size
from .._spec import FLOAT_DTYPES, INT_DTYPES, Attr, GradRule, Input, OpCall, OpSpec, Shape, same_float_dtype
from ._convert import choice, expecting, integer, optional
from ._geometry import ANY_RANK, MAX_RANK

_FAMILY = "comm"
NUMERIC = FLOAT_DTYPES + INT_DTYPES
REDUCTIONS = ("sum", "mean", "max", "min")


@expecting("a group name (a non-empty str)")
def _group_name(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("a group name (a non-empty str)")
    return value


_GROUP = Attr("group", WORLD, _group_name, "the ranks taking part ('world': every rank)")
_SIZE = Attr("size", None, optional(integer(1)), "the group's number of ranks (None: the named group's)")
_AXIS = Attr("axis", 0, integer(), "the axis arrays are joined or split along (negative counts from the end)")
_ROOT = Attr("root", 0, integer(0), "the rank (in the group) whose array every rank receives")
_REDUCTION = Attr("reduction", "sum", choice(*REDUCTIONS), "how the ranks' arrays combine")


def numeric(op: str, names: Sequence[str], dtypes: Sequence[str | None]) -> str:
    """The dtype rule of data the ranks exchange: one floating or integer dtype, kept by the output."""
    present = [(n, d) for n, d in zip(names, dtypes) if d is not None]
    first_name, first = present[0]
    if first not in NUMERIC:
        raise OpDtypeError(op, first_name, first, "a floating or integer dtype")
    for name, dtype in present[1:]:
        if dtype != first:
            raise OpDtypeError(op, name, dtype, f"{first}, the dtype of '{first_name}'")
    return first


def _sized(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    """The attributes with ``size`` from the named group where it is not given, ``root`` checked against it."""
    size = group_size(attrs["group"]) if attrs["size"] is None else attrs["size"]
    if attrs.get("root", 0) >= size:
        raise InvalidSpec("root", attrs["root"], f"a rank of the group, in [0, {size - 1}]")
    return {**attrs, "size": size}


def _with_axis(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    resolved = _sized(shapes, attrs)
    rank = len(shapes["input"])
    if not -rank <= attrs["axis"] < rank:
        raise InvalidSpec("axis", attrs["axis"], f"an axis of the {rank}-D input, in [{-rank}, {rank - 1}]")
    return {**resolved, "axis": attrs["axis"] % rank}


def _same_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    """Every input has the first one's shape, which the output keeps."""
    (first_name, first), *rest = shapes.items()
    for name, shape in rest:
        if shape != first:
            raise InvalidSpec(name, f"shape {shape}", f"shape {first} like '{first_name}'")
    return tuple(first)


def _gathered(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    shape = list(shapes["input"])
    shape[attrs["axis"]] *= attrs["size"]
    return tuple(shape)


def _scattered(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    shape, axis, size = list(shapes["input"]), attrs["axis"], attrs["size"]
    if shape[axis] % size:
        raise InvalidSpec("input", f"shape {tuple(shape)}", f"a size along axis {axis} divisible by the group's {size} ranks")
    shape[axis] //= size
    return tuple(shape)


def _same(call: OpCall) -> dict[str, Any]:
    return dict(call.attrs)


def _comm(name: str, inputs: tuple[Input, ...], attrs: tuple[Attr, ...], shape_rule: Any, doc: str, *,
          resolve: Any = _sized, gradients: tuple[GradRule, ...] = (), grad_of: str | None = None,
          dtype_rule: Any = numeric) -> OpSpec:
    return OpSpec(name, inputs, attrs + (_GROUP, _SIZE), shape_rule=shape_rule, resolve=resolve, dtype_rule=dtype_rule,
                  family=_FAMILY, gradients=gradients, grad_of=grad_of, doc=doc)


allreduce = _comm(
    "allreduce", (Input("input"),), (_REDUCTION,), _same_shape,
    "Every rank gets the elementwise sum, mean, maximum or minimum of the ranks' arrays (like "
    "torch.distributed.all_reduce; mean: the sum divided by the group's size).",
    gradients=(GradRule("input", "allreduce_grad", ("grad_output", "input", "output"), _same),),
)
allreduce_grad = _comm(
    "allreduce_grad", (Input("grad_output"), Input("input"), Input("output")), (_REDUCTION,), _same_shape,
    "Gradient of allreduce: allreduce of grad_output with the same reduction for sum and mean; for max and "
    "min, the summed grad_output where input equals output, shared evenly among the ranks that hold it.",
    grad_of="allreduce", dtype_rule=same_float_dtype,
)
allreduce_start = _comm(
    "allreduce_start", (Input("input"),), (_REDUCTION,), _same_shape,
    "allreduce begun, not waited for: its result holds the reduction only once comm_wait has returned it, "
    "so that the computation in between overlaps the communication (data-parallel gradients).",
)
comm_wait = OpSpec(
    "comm_wait", (Input("input"),), (), shape_rule=_same_shape, dtype_rule=numeric, family=_FAMILY,
    doc="The array a *_start op returned, once its communication has finished (the array itself).",
)
allgather = _comm(
    "allgather", (Input("input", ANY_RANK),), (_AXIS,), _gathered,
    "The ranks' arrays joined along axis in rank order, on every rank (like torch.distributed.all_gather "
    "followed by a concatenation).",
    resolve=_with_axis, gradients=(GradRule("input", "reduce_scatter", attrs=_same),),
)
reduce_scatter = _comm(
    "reduce_scatter", (Input("input", ANY_RANK),), (_AXIS,), _scattered,
    "The sum of the ranks' arrays, split along axis into one part per rank: rank r keeps part r (like "
    "torch.distributed.reduce_scatter_tensor).",
    resolve=_with_axis, gradients=(GradRule("input", "allgather", attrs=_same),),
)
broadcast = _comm(
    "broadcast", (Input("input"),), (_ROOT,), _same_shape,
    "Every rank gets the root's array (like torch.distributed.broadcast); the others' inputs only give the shape.",
    gradients=(GradRule("input", "broadcast_grad", attrs=_same),),
)
broadcast_grad = _comm(
    "broadcast_grad", (Input("grad_output"),), (_ROOT,), _same_shape,
    "Gradient of broadcast: the sum of the ranks' grad_output on the root, zeros on the other ranks.",
    grad_of="broadcast", dtype_rule=same_float_dtype,
)


def _exchanged(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    _scattered(shapes, attrs)  # one equal part per rank
    return shapes["input"]


all_to_all = _comm(
    "all_to_all", (Input("input", ANY_RANK),), (_AXIS,), _exchanged,
    "The input split along axis into one equal part per rank: part j goes to rank j, and the output joins "
    "the parts received, in rank order (like torch.distributed.all_to_all_single).",
    resolve=_with_axis, gradients=(GradRule("input", "all_to_all", attrs=_same),),
)


def _peers(shapes: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    resolved = _sized(shapes, attrs)
    for name in ("send_to", "recv_from"):
        if attrs[name] is not None and attrs[name] >= resolved["size"]:
            raise InvalidSpec(name, attrs[name], f"a rank of the group, in [0, {resolved['size'] - 1}], or None")
    return resolved


def _swapped(call: OpCall) -> dict[str, Any]:
    return {**call.attrs, "send_to": call.attrs["recv_from"], "recv_from": call.attrs["send_to"]}


sendrecv = _comm(
    "sendrecv", (Input("input"),),
    (Attr("send_to", None, optional(integer(0)), "the rank the input goes to (None: nobody)"),
     Attr("recv_from", None, optional(integer(0)), "the rank the output comes from (None: nobody; the output is zeros)")),
    _same_shape,
    "Point-to-point: sends the input to rank send_to and returns the array of the same shape and dtype that "
    "rank recv_from sends (MPI_Sendrecv; send and recv are its halves: algoswap.dist.send, algoswap.dist.recv).",
    resolve=_peers, gradients=(GradRule("input", "sendrecv", attrs=_swapped),),
)


def _route_shape(shapes: dict[str, Any], attrs: dict[str, Any]) -> Shape:
    return (attrs["shards"],) + shapes["indices"]


def _ints(op: str, names: Sequence[str], dtypes: Sequence[str | None]) -> str:
    if dtypes[0] not in INT_DTYPES:
        raise OpDtypeError(op, names[0], dtypes[0], f"an integer dtype ({', '.join(INT_DTYPES)})")
    return str(dtypes[0])


shard_indices = OpSpec(
    "shard_indices", (Input("indices", tuple(range(MAX_RANK))),),
    (Attr("rows", convert=integer(1), doc="rows per shard: shard j holds rows [j * rows, (j + 1) * rows)"),
     Attr("shards", convert=integer(1), doc="the number of shards")),
    shape_rule=_route_shape, dtype_rule=_ints, family=_FAMILY,
    doc="Rows of a table split into shards of consecutive rows: out[j] is each index's row within shard j "
    "where shard j holds it, else rows (one past the shard's last row: a row that stays zero). An index "
    "outside [0, rows * shards) is an error when the op runs.",
)

SPECS = (allreduce, allreduce_grad, allreduce_start, comm_wait, allgather, reduce_scatter, broadcast, broadcast_grad,
         all_to_all, sendrecv, shard_indices)
