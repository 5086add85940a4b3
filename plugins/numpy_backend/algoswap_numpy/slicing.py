"""Reference slice, split, pad and transpose, and the gradients of slice (and split) and pad."""

import numpy as np

Pads = tuple[tuple[int, int], ...]
_NUMPY_MODE = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}


def _block(begin: tuple[int, ...], size: tuple[int, ...], step: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(b, b + (s - 1) * t + 1 if s else b, t) for b, s, t in zip(begin, size, step))


def slice_(x: np.ndarray, *, begin: tuple[int, ...], size: tuple[int, ...], step: tuple[int, ...]) -> np.ndarray:
    return x[_block(begin, size, step)].copy()


def slice_grad(dy: np.ndarray, *, begin: tuple[int, ...], input_size: tuple[int, ...], step: tuple[int, ...]) -> np.ndarray:
    """Zeros of input_size with dy placed at begin, every step."""
    grad = np.zeros(input_size, dtype=dy.dtype)
    grad[_block(begin, dy.shape, step)] = dy
    return grad


def split(x: np.ndarray, *, sections: tuple[int, ...], index: int, axis: int) -> np.ndarray:
    start = sum(sections[:index])
    return np.take(x, np.arange(start, start + sections[index]), axis=axis)


def pad(x: np.ndarray, *, pads: Pads, mode: str, value: float) -> np.ndarray:
    if mode == "constant":
        return np.pad(x, pads, mode="constant", constant_values=x.dtype.type(value))
    return np.pad(x, pads, mode=_NUMPY_MODE[mode])


def pad_grad(dy: np.ndarray, *, pads: Pads, mode: str, input_size: tuple[int, ...]) -> np.ndarray:
    """The adjoint of pad, one axis at a time: each padded position's gradient goes to the input
    position it copies (constant padding copies none)."""
    grad = dy
    for axis, (size, pair) in enumerate(zip(input_size, pads)):
        if pair == (0, 0):
            continue
        positions = np.arange(size)
        source = np.pad(positions, pair, constant_values=-1) if mode == "constant" else np.pad(positions, pair, mode=_NUMPY_MODE[mode])
        keep = source >= 0
        shape = list(grad.shape)
        shape[axis] = size
        reduced = np.zeros(shape, dtype=dy.dtype)
        index = (np.s_[:],) * axis + (source[keep],)
        np.add.at(reduced, index, np.compress(keep, grad, axis=axis))
        grad = reduced
    return np.array(grad, dtype=dy.dtype)


def transpose(x: np.ndarray, *, perm: tuple[int, ...]) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(x, perm))
