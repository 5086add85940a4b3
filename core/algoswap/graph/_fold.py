"""Values planning computes once: an op node whose every input is a frozen weight (or such a value) and
that runs in host memory, such as ViT's class token broadcast over the batch (``expand(n, -1, -1)`` of a
weight, with n known only once the input's shape is). It is computed when the program is planned, frozen,
and uploaded once where a device step reads it, as weights are. Run at every call instead, it would be a
host step and a transfer in a device program, which keep the program from being captured (CUDA graphs).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .._frozen import freeze
from .._global import get_registry
from .._runner import Runner
from .._select import Selection
from ._node import Node
from ._program import Step

NOTE = "computed once, when planning: its inputs are weights (no step at each call)"


def folded(node: Node, chosen: Selection, arrays: Sequence[Any]) -> tuple[np.ndarray, Runner] | None:
    """The node's frozen value from ``arrays`` (its inputs' frozen host arrays, None for an absent optional
    one) and the runner that computed it; None where it is not folded: an implementation outside host memory
    (it then runs on the device from the uploaded weights), attributes computed at each run, an in-place
    update, or a failure (raised again, with the node's name, when the step runs)."""
    if not chosen.backend.memory.is_host or node.dynamic is not None or get_registry().spec(chosen.call.op).in_place:
        return None
    runner = Runner(chosen)
    try:
        value = runner.run(list(arrays))
    except Exception:  # noqa: BLE001 - planned as a step instead, which fails when it runs
        return None
    return (freeze(value), runner) if isinstance(value, np.ndarray) else None


def planned_step(node: Node, runner: Runner, slot: int) -> Step:
    """What ``explain`` shows of a folded node: the implementation that computed it, when planning."""
    call, selection = runner.selection.call, runner.selection
    return Step(node.name, str(node.op), (), slot, runner.fn, dict(call.attrs), selection.backend.memory, call.out_shape,
                call.out_dtype, "op", selection.impl.backend, selection.impl.algorithm, selection.backend.device,
                selection.kernel, node, note=NOTE, runner=runner, input_shape=call.shapes[0] if call.shapes else None,
                request=selection.request)
