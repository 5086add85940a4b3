"""The list of timm families test_foreign_models.py converts: one model per family (a module of
``timm.models``), the one with the fewest parameters, and the smallest input side PyTorch runs it at.

    python tests/timm_families.py   # writes tests/timm_families.json (about 5 minutes on two cores)

Parameters are counted on the meta device (nothing allocated); the side is 64, 96 or 128 where the
model takes any size and PyTorch runs it there (224 too), else its configuration's own.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

LIST = Path(__file__).with_name("timm_families.json")
_SIDES = (64, 96, 128, 224)


def families() -> list[str]:
    """The model families (modules) of the installed timm's registry."""
    from timm.models import _registry

    return sorted(module for module, models in _registry._module_to_models.items() if models)


def _smallest(timm: Any, torch: Any, family: str) -> tuple[str, int] | None:
    from timm.models import _registry

    best: tuple[str, int] | None = None
    for name in sorted(_registry._module_to_models[family]):
        try:
            with torch.device("meta"):
                count = sum(p.numel() for p in timm.create_model(name, pretrained=False).parameters())
        except Exception:
            continue
        if best is None or count < best[1]:
            best = (name, count)
    return best


def _side(timm: Any, torch: Any, name: str) -> int:
    config = timm.get_pretrained_cfg(name)
    own = int(config.input_size[1]) if config is not None and config.input_size else 224
    if config is not None and getattr(config, "fixed_input_size", False):
        return own
    model = timm.create_model(name, pretrained=False).eval()
    for side in _SIDES:
        try:
            with torch.no_grad():
                model(torch.randn(1, 3, side, side))
            return side
        except Exception:
            continue
    return own


def generate() -> dict[str, dict[str, Any]]:
    from algoswap._zoo_foreign import import_library

    timm = import_library("timm")
    import torch

    found: dict[str, dict[str, Any]] = {}
    for family in families():
        best = _smallest(timm, torch, family)
        if best is not None:
            found[family] = {"model": best[0], "parameters": best[1], "side": _side(timm, torch, best[0])}
            print(family, found[family], flush=True)
    return found


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    LIST.write_text(json.dumps(generate(), indent=1, sort_keys=True) + "\n")
