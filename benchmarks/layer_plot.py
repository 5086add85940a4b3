"""A per-layer bar chart of time ratios (ours / a baseline), shared by the per-layer benchmarks."""

from __future__ import annotations

from typing import Sequence


def ratio_panels(panels: Sequence[tuple[str, list[str], dict[str, list[float | None]]]], path: str, ylabel: str,
                 target: float | None = None) -> None:
    """One panel per (title, layer labels, {series: ratio per layer}); a line at 1 (and at ``target``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    figure, axes = plt.subplots(len(panels), 1, figsize=(12, 3.6 * len(panels)), squeeze=False)
    for axis, (title, layers, series) in zip(axes[:, 0], panels):
        width = 0.8 / len(series)
        for index, (name, values) in enumerate(series.items()):
            heights = [np.nan if v is None else v for v in values]
            axis.bar(np.arange(len(layers)) + index * width, heights, width, label=name)
        axis.axhline(1.0, color="black", linewidth=0.8)
        if target is not None:
            axis.axhline(target, color="red", linewidth=0.8, linestyle="--", label=f"target {target:g}x")
        axis.set_xticks(np.arange(len(layers)) + 0.4 - width / 2, layers, rotation=35, ha="right", fontsize=7)
        axis.set_ylabel(ylabel)
        axis.set_title(title, fontsize=9)
        axis.legend(fontsize=7, ncol=len(series) + 1)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"plot written to {path}")
