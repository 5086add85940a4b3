"""Train a small CNN on scikit-learn's digits (1,797 8x8 images, bundled: no download) with the
algoswap executor, then the same network in plain PyTorch from the same initial weights and batches.

    python examples/train_digits.py                     # registry's choice per node (oneDNN where it serves)
    python examples/train_digits.py --backends numpy    # every node on the NumPy backend
    python examples/train_digits.py --no-torch          # skip the PyTorch comparison

The last line is ``test accuracy: 0.xxx`` (the executor's). On a busy machine with few cores, run it with
``OMP_NUM_THREADS=1``: PyTorch's and oneDNN's OpenMP threads spin while waiting and slow small steps 50x.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from algoswap import graph as g
from algoswap._progress import progress


def load(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits scaled to [0, 1] as (N, 1, 8, 8) float32, labels int64; a stratified 80/20 split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]
    labels = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(images, labels, test_size=0.2, random_state=seed, stratify=labels)
    return x_train, x_test, y_train, y_test


def initial_weights(seed: int) -> dict[str, np.ndarray]:
    """The network's initial weights: PyTorch's default initialisation under ``seed`` (without torch: NumPy's)."""
    shapes = {"conv1.weight": (16, 1, 3, 3), "conv1.bias": (16,), "conv2.weight": (32, 16, 3, 3), "conv2.bias": (32,),
              "fc.weight": (10, 128), "fc.bias": (10,)}
    try:
        return {k: v.detach().numpy().copy() for k, v in torch_network(seed).state_dict().items()}
    except ImportError:
        rng = np.random.default_rng(seed)
        fan_in = {"conv1": 9, "conv2": 144, "fc": 128}
        return {k: rng.uniform(-1, 1, s).astype(np.float32) / np.sqrt(fan_in[k.split(".")[0]]) for k, s in shapes.items()}


def torch_network(seed: int) -> Any:
    import torch
    from torch import nn

    class DigitsCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
            self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
            self.fc = nn.Linear(128, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
            x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
            return self.fc(torch.flatten(x, 1))

    torch.manual_seed(seed)
    return DigitsCNN()


def build(weights: dict[str, np.ndarray], x: g.Node) -> g.Node:
    """The same network as a graph: conv-relu-pool twice, then a linear layer (logits)."""
    p = {name: g.parameter(name, value) for name, value in weights.items()}
    h = g.maxpool2d(g.relu(g.conv2d(x, p["conv1.weight"], p["conv1.bias"], padding=1)), kernel_size=2)
    h = g.maxpool2d(g.relu(g.conv2d(h, p["conv2.weight"], p["conv2.bias"], padding=1)), kernel_size=2)
    return g.linear(g.flatten(h), p["fc.weight"], p["fc.bias"])


def train_executor(data: tuple[np.ndarray, ...], epochs: int, seed: int, backends: list[str] | None, batch: int = 32) -> tuple[list[float], float]:
    """Train with the executor; return the loss of every step and the test accuracy."""
    x_train, x_test, y_train, y_test = data
    train_loader = g.DataLoader(x_train, y_train, batch_size=batch, shuffle=True, seed=seed)
    test_loader = g.DataLoader(x_test, y_test, batch_size=len(x_test), shuffle=False)
    x, y = g.dataloader_op({"train": train_loader, "validate": test_loader})
    logits = build(initial_weights(seed), x)
    loss = g.softmax_cross_entropy(logits, y)
    train_op = g.Adam(lr=0.005).minimize(loss)
    executor = g.Executor({"train": [loss, train_op], "validate": [logits]}, backends=backends)
    steps = epochs * executor.batches("train")
    losses = [float(executor.run("train")[0]) for _ in progress(range(steps), "executor", total=steps)]
    (scores,) = executor.run("validate")
    return losses, float(np.mean(scores.argmax(1) == y_test))


def train_torch(data: tuple[np.ndarray, ...], epochs: int, seed: int, batch: int = 32) -> tuple[list[float], float]:
    """The same network, initial weights, optimizer and batches in plain PyTorch."""
    import torch

    x_train, x_test, y_train, y_test = data
    model = torch_network(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
    loader = g.DataLoader(x_train, y_train, batch_size=batch, shuffle=True, seed=seed)
    losses = []
    steps = epochs * len(loader)
    for _ in progress(range(steps), "pytorch ", total=steps):
        xb, yb = loader.next_batch()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(xb)), torch.from_numpy(yb))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        predicted = model(torch.from_numpy(x_test)).argmax(1).numpy()
    return losses, float(np.mean(predicted == y_test))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backends", default=None, help="comma-separated backends in order of preference (default: the registry's choice)")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    args = parser.parse_args(argv)
    data = load(args.seed)
    backends = args.backends.split(",") if args.backends else None
    if not args.no_torch:
        started = time.perf_counter()
        torch_losses, torch_accuracy = train_torch(data, args.epochs, args.seed)
        print(f"pytorch:  final loss {np.mean(torch_losses[-20:]):.4f}, test accuracy {torch_accuracy:.3f} "
              f"({time.perf_counter() - started:.1f} s)")
    started = time.perf_counter()
    losses, accuracy = train_executor(data, args.epochs, args.seed, backends)
    print(f"executor: final loss {np.mean(losses[-20:]):.4f} ({time.perf_counter() - started:.1f} s)")
    if not args.no_torch:
        gap = max(abs(a - b) for a, b in zip(losses[:10], torch_losses[:10]))
        print(f"first 10 steps: largest loss difference executor vs pytorch {gap:.2e}")
    sys.stdout.flush()
    print(f"test accuracy: {accuracy:.3f}")


if __name__ == "__main__":
    main()
