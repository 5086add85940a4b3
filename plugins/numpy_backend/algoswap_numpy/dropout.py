"""Reference dropout with the counter-based mask every backend can reproduce (see the spec)."""

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's output function on uint64 arrays (wrapping arithmetic)."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def keep_mask(shape: tuple[int, ...], p: float, seed: int) -> np.ndarray:
    """True where element i (row-major) is kept: splitmix64(splitmix64(seed) + i) / 2**64 >= p."""
    key = _splitmix64(np.array([seed], dtype=np.uint64))
    with np.errstate(over="ignore"):
        bits = _splitmix64(np.arange(int(np.prod(shape)), dtype=np.uint64) + key)
    uniform = (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return (uniform >= p).reshape(shape)


def _scaled(keep: np.ndarray, p: float, dtype: np.dtype) -> np.ndarray:
    """The mask as the factor each element is multiplied by: 1 / (1 - p) where kept, else 0 (so
    that, as in PyTorch, a dropped NaN or inf stays non-finite)."""
    return np.where(keep, dtype.type(1 / (1 - p)), dtype.type(0))


def dropout(x: np.ndarray, *, p: float, seed: int, training: bool) -> np.ndarray:
    if not training or p == 0:
        return x.copy()
    return x * _scaled(keep_mask(x.shape, p, seed), p, x.dtype)


def dropout_grad(dy: np.ndarray, *, p: float, seed: int, training: bool) -> np.ndarray:
    """The same mask and scale applied to dy (dropout is linear in its input)."""
    return dropout(dy, p=p, seed=seed, training=training)


def dropout2d(x: np.ndarray, *, p: float, seed: int, training: bool) -> np.ndarray:
    """Whole channels of NCHW input zeroed: channel (n, c) follows element n * C + c of the mask."""
    if not training or p == 0:
        return x.copy()
    return x * _scaled(keep_mask(x.shape[:2], p, seed), p, x.dtype)[:, :, None, None]


def dropout2d_grad(dy: np.ndarray, *, p: float, seed: int, training: bool) -> np.ndarray:
    return dropout2d(dy, p=p, seed=seed, training=training)
