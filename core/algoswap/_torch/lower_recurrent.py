"""``nn.LSTM`` unrolled over the sample's sequence length onto registry ops (timm's Sequencer).

Per layer and direction: one ``linear`` of the whole input by the input weights, then per step a slice of it,
the ``linear`` of the last hidden state by the hidden weights, the four gates (``split``, ``sigmoid``,
``tanh``), the cell and the hidden state (``mul``, ``add``); the hidden states joined in time order, the two
directions side by side. The sequence length is the sample's: another length is refused when planned (the
number of steps is the graph's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import fx, nn

from .lower_shapes import reshape
from .lowered import Alias, Deferred, Lowered, LoweredOp, Parts, Unsupported, signature

if TYPE_CHECKING:
    from .lowering import Lowerer


def step_window(array: Any, time: int, step: int, steps: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(begin, size) of step ``step`` along axis ``time`` of an (N, T, F) or (T, N, F) array of ``steps`` steps."""
    if int(array.shape[time]) != steps:
        raise ValueError(f"the LSTM was unrolled over {steps} steps at conversion; this input has {int(array.shape[time])} "
                         "(convert the model again with a sample input of this sequence length)")
    begin, size = [0, 0, 0], [int(n) for n in array.shape]
    begin[time], size[time] = step, 1
    return tuple(begin), tuple(size)


def _window_begin(array: Any, time: int, step: int, steps: int) -> tuple[int, ...]:
    return step_window(array, time, step, steps)[0]


def _window_size(array: Any, time: int, step: int, steps: int) -> tuple[int, ...]:
    return step_window(array, time, step, steps)[1]


def _flat_step(array: Any, time: int) -> tuple[int, int]:
    """One step's (N, F) of an (N, T, F) or (T, N, F) array."""
    return int(array.shape[1 - time]), int(array.shape[2])


def _one_step(array: Any, time: int) -> tuple[int, ...]:
    """An (N, F) step as (N, 1, F) or (1, N, F)."""
    n, features = int(array.shape[0]), int(array.shape[1])
    return (n, 1, features) if time == 1 else (1, n, features)


def _direction(x: Any, m: nn.LSTM, layer: int, reverse: bool, time: int, steps: int) -> LoweredOp:
    suffix = f"_l{layer}" + ("_reverse" if reverse else "")
    w_ih, w_hh = getattr(m, f"weight_ih{suffix}"), getattr(m, f"weight_hh{suffix}")
    b_ih, b_hh = (getattr(m, f"bias_ih{suffix}"), getattr(m, f"bias_hh{suffix}")) if m.bias else (None, None)
    projected = LoweredOp("linear", [x, w_ih, b_ih], {})
    hidden: Any = None
    cell: Any = None
    outputs: list[Any] = []
    for step in reversed(range(steps)) if reverse else range(steps):
        window = LoweredOp("slice", [projected], {"begin": Deferred(_window_begin, (projected, time, step, steps)),
                                                  "size": Deferred(_window_size, (projected, time, step, steps))})
        gates: Any = reshape(window, Deferred(_flat_step, (projected, time)))
        if hidden is not None:
            gates = LoweredOp("add", [gates, LoweredOp("linear", [hidden, w_hh, b_hh], {})], {})
        elif b_hh is not None:
            gates = LoweredOp("add", [gates, b_hh], {})
        i, f, g, o = (LoweredOp("split", [gates], {"sections": 4, "index": k, "axis": -1}) for k in range(4))
        update = LoweredOp("mul", [LoweredOp("sigmoid", [i], {}), LoweredOp("tanh", [g], {})], {})
        cell = update if cell is None else LoweredOp("add", [LoweredOp("mul", [LoweredOp("sigmoid", [f], {}), cell], {}), update], {})
        hidden = LoweredOp("mul", [LoweredOp("sigmoid", [o], {}), LoweredOp("tanh", [cell], {})], {})
        outputs.append(reshape(hidden, Deferred(_one_step, (hidden, time))))
    ordered = outputs[::-1] if reverse else outputs
    return ordered[0] if len(ordered) == 1 else LoweredOp("concat", ordered, {"axis": time})


def lstm(lw: Lowerer, node: fx.Node, m: nn.LSTM) -> Lowered:
    """The LSTM's output (item 0 of what it returns); its final states (item 1) are not lowered."""
    bound = lw.bind(signature("input", hx=None), node)
    if bound["hx"] is not None or m.proj_size:
        raise Unsupported("LSTM with initial states or proj_size (only zero initial states, no projection, are lowered)")
    shape = lw.shape(bound["input"])
    if shape is None or len(shape) != 3:
        raise Unsupported("an LSTM is unrolled over its sequence length, known from a batched 3-D sample input")
    lw.check_users_index(node)
    if any(user.args[1] != 0 and user.users for user in node.users):
        raise Unsupported("the LSTM's final states are read (only its output is lowered)")
    time = 1 if m.batch_first else 0
    steps = int(shape[time])
    x: Any = bound["input"]
    for layer in range(m.num_layers):
        directions = [_direction(x, m, layer, reverse, time, steps) for reverse in ((False, True) if m.bidirectional else (False,))]
        x = directions[0] if len(directions) == 1 else LoweredOp("concat", directions, {"axis": -1})
    output = x
    return Parts(lambda i: output if i == 0 else Alias(None))  # item 1, the final states: read by nothing (checked above)


__all__ = ["lstm"]
