"""A small zoo of standard architectures in plain ``torch.nn`` (torchvision is not required).

The models follow torchvision's layer layout (same module names and parameter counts) but take any
``num_classes``. They are built from a fixed seed, with non-trivial batch-norm statistics, so that a
layer swapped for another implementation (or a batch-norm folding bug) shows up in the outputs.

They use only ``nn.Conv2d``, ``nn.Linear``, ``nn.MaxPool2d``, ``nn.AvgPool2d``, ``nn.AdaptiveAvgPool2d``,
``nn.ReLU``, ``nn.Flatten``, ``nn.BatchNorm2d`` and ``nn.Dropout``, plus residual additions,
``torch.cat``, ``torch.flatten``, ``Tensor.view`` and ``F.relu``; every model is traceable by
``torch.fx.symbolic_trace``. This module imports torch and is not imported by ``import algoswap``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ._zoo_foreign import build_foreign, is_foreign, sides

__all__ = ["DEFAULT_MODEL", "MODELS", "build", "input_shape", "sample_input"]

MODELS: tuple[str, ...] = ("convnet", "alexnet", "vgg16", "resnet18", "resnet50", "mobilenet", "squeezenet")
DEFAULT_MODEL = "resnet18"

_SIZE = {"convnet": (32, 32)}  # (standard, small) side; the ImageNet models use (224, 64)


def conv_bn_relu(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    """Conv2d (no bias, 'same'-style padding) followed by BatchNorm2d and a ReLU of its own."""
    conv = nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False)
    return nn.Sequential(conv, nn.BatchNorm2d(cout), nn.ReLU())


class ConvNet(nn.Module):
    """A plain CIFAR-sized ConvNet (3x32x32): three conv layers, functional ReLUs, two linear layers."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.pool2 = nn.MaxPool2d(2)
        self.conv3 = nn.Conv2d(64, 128, 3, padding=1)
        self.pool3 = nn.AvgPool2d(2)
        self.fc1 = nn.Linear(128 * 4 * 4, 256)
        self.fc2 = nn.Linear(256, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool1(F.relu(self.conv1(x)))
        x = self.pool2(F.relu(self.conv2(x)))
        x = self.pool3(F.relu(self.conv3(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        out: torch.Tensor = self.fc2(x)
        return out


class AlexNet(nn.Module):
    """AlexNet as in torchvision (flattens with ``x.view(x.size(0), -1)``)."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
            nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
            nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2),
        )  # fmt: skip
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(),
            nn.Dropout(), nn.Linear(4096, 4096), nn.ReLU(),
            nn.Linear(4096, num_classes),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        x = x.view(x.size(0), -1)
        out: torch.Tensor = self.classifier(x)
        return out


class VGG16(nn.Module):
    """VGG-16 without batch norm (configuration D), as torchvision's ``vgg16``."""

    CFG: tuple[int | str, ...] = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in self.CFG:
            if isinstance(v, int):
                layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU()]
                cin = v
            else:
                layers.append(nn.MaxPool2d(2, 2))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout(),
            nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(),
            nn.Linear(4096, num_classes),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(self.avgpool(self.features(x)), 1)
        out: torch.Tensor = self.classifier(x)
        return out


class BasicBlock(nn.Module):
    """ResNet basic block; like torchvision, one ``self.relu`` module is called twice."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out = out + identity
        result: torch.Tensor = self.relu(out)
        return result


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck (stride on the 3x3 conv), with an in-place residual ``+=``."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU()
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        result: torch.Tensor = self.relu(out)
        return result


class ResNet(nn.Module):
    """ResNet with torchvision's layout (``conv1``, ``bn1``, ``layer1``..``layer4``, ``fc``)."""

    def __init__(self, block: type[BasicBlock | Bottleneck], layers: list[int], num_classes: int = 1000) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, 64, layers[0], 1)
        self.layer2 = self._make_layer(block, 128, layers[1], 2)
        self.layer3 = self._make_layer(block, 256, layers[2], 2)
        self.layer4 = self._make_layer(block, 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def _make_layer(self, block: type[BasicBlock | Bottleneck], planes: int, n: int, stride: int) -> nn.Sequential:
        downsample = None
        width = planes * block.expansion
        if stride != 1 or self.inplanes != width:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, width, 1, stride, bias=False), nn.BatchNorm2d(width))
        blocks: list[nn.Module] = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = width
        blocks += [block(width, planes) for _ in range(1, n)]
        return nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        out: torch.Tensor = self.fc(x)
        return out


class MobileNetV1(nn.Module):
    """MobileNet v1: depthwise 3x3 (groups = channels) + pointwise 1x1 pairs, each with BN and ReLU."""

    # (output channels, stride) of the 13 depthwise-separable blocks
    CFG = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
           *((512, 1),) * 5, (1024, 2), (1024, 1))  # fmt: skip

    def __init__(self, num_classes: int = 1000, width: float = 1.0) -> None:
        super().__init__()
        cin = max(8, int(32 * width))
        layers: list[nn.Module] = [conv_bn_relu(3, cin, 3, 2)]
        for channels, stride in self.CFG:
            cout = max(8, int(channels * width))
            layers.append(nn.Sequential(conv_bn_relu(cin, cin, 3, stride, groups=cin), conv_bn_relu(cin, cout, 1)))
            cin = cout
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(cin, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.classifier(self.avgpool(self.features(x)))
        return out


class Fire(nn.Module):
    """SqueezeNet fire module: 1x1 squeeze, then 1x1 and 3x3 expands joined by ``torch.cat``."""

    def __init__(self, cin: int, squeeze: int, expand1x1: int, expand3x3: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.squeeze_activation = nn.ReLU()
        self.expand1x1 = nn.Conv2d(squeeze, expand1x1, 1)
        self.expand1x1_activation = nn.ReLU()
        self.expand3x3 = nn.Conv2d(squeeze, expand3x3, 3, padding=1)
        self.expand3x3_activation = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze_activation(self.squeeze(x))
        a = self.expand1x1_activation(self.expand1x1(x))
        b = self.expand3x3_activation(self.expand3x3(x))
        return torch.cat([a, b], 1)


class SqueezeNet(nn.Module):
    """SqueezeNet 1.1 as in torchvision: fire modules and a 1x1-conv classifier."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(256, 48, 192, 192), Fire(384, 48, 192, 192), Fire(384, 64, 256, 256), Fire(512, 64, 256, 256),
        )  # fmt: skip
        self.classifier = nn.Sequential(
            nn.Dropout(), nn.Conv2d(512, num_classes, 1), nn.ReLU(), nn.AdaptiveAvgPool2d((1, 1))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


_BUILDERS: dict[str, Callable[[int], nn.Module]] = {
    "convnet": ConvNet,
    "alexnet": AlexNet,
    "vgg16": VGG16,
    "resnet18": lambda n: ResNet(BasicBlock, [2, 2, 2, 2], n),
    "resnet50": lambda n: ResNet(Bottleneck, [3, 4, 6, 3], n),
    "mobilenet": MobileNetV1,
    "squeezenet": SqueezeNet,
}


def _check(name: str) -> None:
    if name not in _BUILDERS and not is_foreign(name):
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(MODELS)}, "
                         f"or torchvision's and timm's as 'torchvision:NAME' and 'timm:NAME'")


def _init_(model: nn.Module, gen: torch.Generator) -> None:
    """Fill every parameter and buffer: kaiming-uniform weights, small biases, random sensible BN state.

    The batch norm closing each residual branch gets a small scale (as trained ResNets have; cf.
    torchvision's ``zero_init_residual``), so that activations do not grow block after block.
    """
    blocks = [m for m in model.modules() if isinstance(m, (BasicBlock, Bottleneck))]
    closing = {id(m.bn2 if isinstance(m, BasicBlock) else m.bn3) for m in blocks}

    def uniform(t: torch.Tensor, lo: float, hi: float) -> None:
        t.uniform_(lo, hi, generator=gen)

    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            fan_in = module.weight[0].numel()
            bound = math.sqrt(6.0 / fan_in)  # kaiming-uniform: variance 2 / fan_in
            uniform(module.weight, -bound, bound)
            if module.bias is not None:
                uniform(module.bias, -0.1, 0.1)
        elif isinstance(module, nn.BatchNorm2d):
            assert module.weight is not None and module.bias is not None
            assert module.running_mean is not None and module.running_var is not None
            assert module.num_batches_tracked is not None
            uniform(module.weight, *((0.1, 0.4) if id(module) in closing else (0.5, 1.5)))
            uniform(module.bias, -0.2, 0.2)
            uniform(module.running_mean, -0.5, 0.5)
            uniform(module.running_var, 0.5, 2.0)
            module.num_batches_tracked.zero_()
        elif any(True for _ in module.parameters(recurse=False)) or any(True for _ in module.buffers(recurse=False)):
            raise TypeError(f"zoo: no initialiser for {type(module).__name__}")


def build(name: str, *, num_classes: int = 10, seed: int = 0, dtype: torch.dtype = torch.float32) -> nn.Module:
    """Build model ``name`` (one of ``MODELS``, or "torchvision:NAME" / "timm:NAME" with the library
    installed) in eval mode, initialised deterministically from ``seed``.

    Weights are drawn from a private ``torch.Generator`` (the global RNG is untouched), in float32,
    then cast to ``dtype``. Batch-norm running statistics and affine parameters are random, not the
    trivial (0, 1), so that batch-norm folding bugs change the outputs.
    """
    _check(name)
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    if is_foreign(name):
        return build_foreign(name, num_classes, seed).to(dtype)
    with torch.device("meta"):  # no default init and no global RNG draws: every tensor is set below
        model = _BUILDERS[name](num_classes)
    model = model.to_empty(device="cpu")
    with torch.no_grad():
        _init_(model, torch.Generator().manual_seed(seed))
    return model.to(dtype).eval()


def input_shape(name: str, batch: int = 1, *, small: bool = False) -> tuple[int, int, int, int]:
    """The NCHW input shape of model ``name``: 224x224 for the ImageNet models, 32x32 for ``convnet``.

    ``small=True`` gives a reduced resolution (64x64 for the ImageNet models) at which every layer is
    still valid, for cheap tests.
    """
    _check(name)
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    standard, reduced = sides(name) if is_foreign(name) else _SIZE.get(name, (224, 64))
    side = reduced if small else standard
    return (batch, 3, side, side)


def sample_input(
    name: str, batch: int = 1, *, small: bool = False, seed: int = 0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """A standard-normal input of ``input_shape(name, batch, small=small)``, drawn from ``seed`` in float32."""
    shape = input_shape(name, batch, small=small)
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
