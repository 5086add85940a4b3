"""The parameter blocks of the kernels: each call passes one buffer of 32-bit ints, the fields of its struct in
kernels/common.metal in the order given here (tests/test_metal_kernels.py checks that the two agree)."""

from __future__ import annotations

INT32_MAX = 2**31 - 1

LAYOUTS: dict[str, tuple[str, ...]] = {
    "ConvParams": ("n", "c", "h", "w", "o", "cg", "kh", "kw", "oh", "ow", "groups", "sh", "sw", "dh", "dw",
                   "top", "left", "mode", "has_bias", "has_residual", "activation"),
    "GemmParams": ("m", "n", "k", "groups", "a_group", "b_batch", "b_group", "c_batch", "c_group",
                   "has_bias", "has_residual", "activation"),
    "PoolParams": ("planes", "h", "w", "oh", "ow", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw"),
    "CountParams": ("count",),
}
# The constants of kernels/common.metal these name (checked there too).
PADDING_MODES = {"zeros": 0, "reflect": 1, "replicate": 2, "circular": 3}  # PAD_*
ACTIVATIONS = {"none": 0, "relu": 1, "relu6": 2, "silu": 3, "hardswish": 4}  # ACT_*


def pack(struct: str, fields: dict[str, int]) -> tuple[int, ...]:
    """The values of ``struct``'s fields in its order; a missing, unknown or out-of-range field is an error."""
    names = LAYOUTS[struct]
    if set(fields) != set(names):
        missing, unknown = sorted(set(names) - set(fields)), sorted(set(fields) - set(names))
        raise ValueError(f"{struct}: missing fields {missing}, unknown fields {unknown}")
    values = tuple(int(fields[name]) for name in names)
    for name, value in zip(names, values):
        if not -INT32_MAX - 1 <= value <= INT32_MAX:
            raise ValueError(f"{struct}.{name} = {value} does not fit a 32-bit int")
    return values
