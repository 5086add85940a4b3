"""The oneDNN backend's one setting: the memory layout its convolutions use (light: imports nothing)."""

from __future__ import annotations

import os

LAYOUTS = ("auto", "plain", "any", "nhwc")
_layout: str | None = None


def set_layout(name: str | None) -> None:
    """Force the layout of convolution primitives: "auto" (per primitive, oneDNN's blocked layouts or
    plain NCHW, whichever measured faster when it was made), "plain", "any" (blocked) or "nhwc"; None
    reads ALGOSWAP_DNNL_LAYOUT again (at the next call)."""
    global _layout
    if name is not None and name not in LAYOUTS:
        raise ValueError(f"algoswap_dnnl.set_layout: layout must be one of {', '.join(LAYOUTS)} or None, got {name!r}")
    _layout = name


def conv_layout() -> str:
    """The layout in force: set_layout's, else ALGOSWAP_DNNL_LAYOUT (read once), else "auto"."""
    global _layout
    if _layout is None:
        chosen = os.environ.get("ALGOSWAP_DNNL_LAYOUT", "auto")
        _layout = chosen if chosen in LAYOUTS else "auto"
    return _layout
