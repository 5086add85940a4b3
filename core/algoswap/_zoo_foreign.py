"""Architectures nobody here wrote: torchvision's and timm's models by name, with random weights.

``zoo.build("torchvision:mobilenet_v2")`` and ``zoo.build("timm:efficientnet_b0")`` come here. The
model is made by its library's own constructor (``weights=None`` / ``pretrained=False``) under a
fixed seed, with the global RNG left as it was; batch-norm running statistics are then drawn at
random, not left at the trivial (0, 1), so that batch-norm folding bugs change the outputs, and
layers initialised to zero (torchvision's ViT head) get random weights, so that outputs are not constant.

torchvision's wheel for this torch is a CUDA build whose compiled operators do not load next to the
CPU torch; its model definitions need none of them, so the module that registers their meta
kernels is replaced by an empty one before the first import (nothing else of torchvision changes).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

import torch
from torch import nn

LIBRARIES = ("torchvision", "timm")
_SIDES = {"inception_v3": (299, 96)}  # (standard, small) input sides other than (224, 64)
_FIXED_SIZE = ("vit", "swin", "maxvit", "deit")  # made for one input size only


def is_foreign(name: str) -> bool:
    """Whether ``name`` is "library:model" for one of ``LIBRARIES``."""
    return name.partition(":")[0] in LIBRARIES and ":" in name


def allow_torchvision() -> None:
    """Let torchvision import on a CPU-only torch when it is first imported (see the module's docstring)."""
    if "torchvision" not in sys.modules:
        sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))


def import_library(library: str) -> Any:
    """torchvision or timm, importable on a CPU-only torch (see the module's docstring)."""
    allow_torchvision()
    try:
        return importlib.import_module(library)
    except ImportError as exc:
        hint = "pip install --no-deps torchvision==0.28.0" if library == "torchvision" else (
            "pip install --no-deps timm==1.0.31 safetensors pyyaml huggingface_hub (and torchvision)")
        raise ValueError(f"zoo: {library} models need {library} installed ({hint}): {exc}") from None


def check_foreign(name: str) -> None:
    """``ValueError`` unless the library of "library:model" is installed and has that model."""
    from ._registry import suggest

    library, _, model = name.partition(":")
    module = import_library(library)
    if library == "timm":
        found, known = module.is_model(model), module.list_models()  # is_model: "resnet50.a1_in1k" too
    else:
        known = module.models.list_models()
        found = model in known
    if not found:
        raise ValueError(f"zoo: {library} has no model {model!r}{suggest(model, known)}")


def build_foreign(name: str, num_classes: int, seed: int) -> nn.Module:
    """``library:model`` with random weights from ``seed``, in eval mode."""
    check_foreign(name)
    library, _, model = name.partition(":")
    module = import_library(library)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if library == "timm":
            built: nn.Module = module.create_model(model, pretrained=False, num_classes=num_classes)
        else:
            builder = module.models.get_model_builder(model)
            extra = {"aux_logits": False, "init_weights": True} if model in ("inception_v3", "googlenet") else {}
            built = builder(weights=None, num_classes=num_classes, **extra)
        _randomise_batch_norm(built, torch.Generator().manual_seed(seed))
        _unzero_weights(built)
    return built.eval()


def sides(name: str) -> tuple[int, int]:
    """The input side the model is made for, and the smallest cheap one every layer takes."""
    model = name.partition(":")[2]
    if model.startswith(_FIXED_SIZE):
        return (224, 224)
    return _SIDES.get(model, (224, 64))


def _randomise_batch_norm(model: nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.running_var is not None:
                assert module.running_mean is not None  # for mypy: torch sets both or neither
                module.running_mean.uniform_(-0.2, 0.2, generator=gen)
                module.running_var.uniform_(0.7, 1.5, generator=gen)


def _unzero_weights(model: nn.Module) -> None:
    with torch.no_grad():
        for module in model.modules():
            weight = getattr(module, "weight", None)
            if isinstance(module, (nn.Linear, nn.Conv2d)) and isinstance(weight, torch.Tensor) and not weight.any():
                nn.init.kaiming_uniform_(weight, a=5 ** 0.5)  # torch's own default for these layers
