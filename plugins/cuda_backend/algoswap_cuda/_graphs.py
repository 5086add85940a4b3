"""CUDA graphs: the CUDA memory space's ``capture`` (``algoswap.graph._capture`` says when an executor
calls it: at the second run of an input signature, after an eager run has built every plan).

``capture(run, inputs)`` copies the inputs into buffers of its own and records ``run`` on them on a
private non-blocking stream, with a private memory pool as CuPy's allocator (every buffer the graph
writes is the graph's: nothing else is ever handed that memory) and the cuDNN handle's stream
switched to the capturing stream for the while. Anything raised while recording (a step that reads a
device value on the host: "D2H transfers are disallowed") abandons the capture: the graph CUDA may
still return is discarded and the error goes to the executor, which runs those inputs eagerly.

A replay copies the new inputs into the captured input buffers, launches the graph on the current
stream (the null stream, as every eager step and torch's default stream) and returns copies of the
captured outputs, so a later replay never overwrites what an earlier call returned. It keeps alive
everything whose address the graph holds: its buffers and pool, the stream, the planned weights (the
executor's program holds them), and the device memory our modules share between calls (the cuDNN
workspace, interpolate's tap tables: ``_shared_buffers``; a module that caches device memory its
kernels read must be listed there). It is stale, and captured again, when the GPU, the TF32 setting or
the benchmark setting (``_runtime.benchmark``) differs from those it was captured with. One replay runs at
a time (a lock).

CuPy refuses every cuBLAS call while a stream captures ("calling cuBLAS API during stream capture is
currently unsupported", CuPy 14.2: its wrappers set the handle's stream first, and refuse a capturing
one), although cuBLAS supports capture. So our modules call cuBLAS through ``_cublas``: the library CuPy
loaded, called directly.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import cupy as cp

from . import _cublas, _runtime

Run = Callable[[Sequence[Any]], list[Any]]
_DEFAULT = 4  # cudaMemcpyDefault: the addresses say where each side is (unified addressing)
_recording = threading.local()


class Replay:
    """A captured program: call it with new inputs (CuPy arrays of the captured shapes and dtypes)."""

    __slots__ = ("graph", "inputs", "outputs", "settings", "_keep", "_lock")

    def __init__(self, graph: Any, inputs: list[Any], outputs: list[Any], settings: tuple[int, bool, bool, bool], keep: tuple[Any, ...]) -> None:
        self.graph, self.inputs, self.outputs, self.settings = graph, inputs, outputs, settings
        self._keep = keep  # the pool, the stream and shared buffers the graph reads
        self._lock = threading.Lock()

    def __call__(self, inputs: Sequence[Any]) -> list[Any]:
        with self._lock:
            stream = cp.cuda.get_current_stream()
            for captured, given in zip(self.inputs, inputs):
                _copy(captured, given, stream)
            self.graph.launch(stream)
            return [_fresh(value, stream) for value in self.outputs]

    def stale(self) -> str:
        """Why the graph no longer applies ("" while it does): another GPU is current, or TF32 or benchmark mode was switched."""
        now = _settings()
        return "" if now == self.settings else f"captured on {_describe(self.settings)}, now {_describe(now)}"


def capture(run: Run, inputs: Sequence[Any]) -> Replay:
    """Record ``run`` on copies of ``inputs`` as a CUDA graph (see the module's docstring)."""
    for x in inputs:
        if not isinstance(x, cp.ndarray):
            raise TypeError(f"an input is a {type(x).__name__}, not a CuPy array")
    settings = _settings()
    pool, stream = cp.cuda.MemoryPool(), cp.cuda.Stream(non_blocking=True)
    with cp.cuda.using_allocator(pool.malloc):
        captured = [cp.empty(x.shape, x.dtype) for x in inputs]
        for target, x in zip(captured, inputs):
            _copy(target, x, cp.cuda.get_current_stream())
        graph, outputs = _record(run, captured, stream)
    return Replay(graph, captured, outputs, settings, (pool, stream, *_shared_buffers()))


def capturing() -> bool:
    """Whether this thread is recording a graph now."""
    return bool(getattr(_recording, "on", False))


def _record(run: Run, inputs: list[Any], stream: Any) -> tuple[Any, list[Any]]:
    """The graph of ``run(inputs)`` recorded on ``stream``, and the outputs it writes."""
    with stream, _cudnn_on(stream):
        stream.begin_capture()
        _recording.on = True
        try:
            outputs = run(inputs)
        except BaseException:
            _abandon(stream)
            raise
        finally:
            _recording.on = False
            _cublas.back_on_null()
        graph = stream.end_capture()
    return graph, outputs


def _abandon(stream: Any) -> None:
    """End a failed capture and drop what it recorded (the stream stays usable)."""
    try:
        stream.end_capture()
    except Exception:  # noqa: BLE001 - the capture's own error is the one to report
        pass


@contextmanager
def _cudnn_on(stream: Any) -> Iterator[None]:
    """cuDNN launches on ``stream`` for the while (where a step has used cuDNN: the warm-up imported it)."""
    module = sys.modules.get(f"{__package__}._cudnn")
    if module is None:
        yield
        return
    import cudnn

    handle = module.handle()
    cudnn.set_stream(handle=handle, stream=stream.ptr)
    try:
        yield
    finally:
        cudnn.set_stream(handle=handle, stream=cp.cuda.Stream.null.ptr)


def _shared_buffers() -> tuple[Any, ...]:
    """The device memory our modules keep between calls, which a captured graph may read or write."""
    found: list[Any] = []
    cudnn_module = sys.modules.get(f"{__package__}._cudnn")
    if cudnn_module is not None:
        found.append(cudnn_module._state.get("workspace"))
    resample = sys.modules.get(f"{__package__}.resample")
    if resample is not None:
        found += [resample._tables.get(key) for key in resample._tables.keys()]
    return tuple(buffer for buffer in found if buffer is not None)


def _copy(target: Any, source: Any, stream: Any) -> None:
    """``source`` into ``target`` (same shape and dtype), on ``stream``."""
    if source is target:
        return
    if source.flags.c_contiguous and source.dtype == target.dtype:
        cp.cuda.runtime.memcpyAsync(target.data.ptr, source.data.ptr, target.nbytes, _DEFAULT, stream.ptr)
    else:
        cp.copyto(target, source)


def _fresh(value: Any, stream: Any) -> Any:
    """A new copy of a captured output (outputs in lists and tuples too; Python values as they are)."""
    if isinstance(value, cp.ndarray):
        copy = cp.empty(value.shape, value.dtype)
        _copy(copy, value, stream)
        return copy
    if isinstance(value, (list, tuple)):
        return type(value)(_fresh(v, stream) for v in value)
    return value


def _settings() -> tuple[int, bool, bool, bool]:
    return cp.cuda.runtime.getDevice(), _runtime.tf32("conv"), _runtime.tf32("matmul"), bool(_runtime.benchmark())


def _describe(settings: tuple[int, bool, bool, bool]) -> str:
    device, conv, matmul, timed = settings
    return (f"GPU {device} with TF32 {'on' if conv else 'off'} for convolutions, {'on' if matmul else 'off'} for matrix "
            f"products, engines chosen {'by timing' if timed else 'by heuristics'}")


