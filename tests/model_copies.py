"""Checks that a swap_backend Model saves and copies (issue 33): it pickles with its weights once, unpickles
in a fresh process and deep-copies; every copy gives the original's outputs bit for bit on the same
implementations, and shares no weight or executor with it (changing one changes nothing of the other)."""

from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

import algoswap
from algoswap.graph import topological
from helpers import HANG_SECONDS

# Loads folder/model.pkl in a fresh process, calls it on folder/x.npy: folder/out.npy and the implementations.
# A model holding torchvision's functions (the torch twins of Swin's ops) imports torchvision when it loads: here
# (a CPU torch beside a CUDA torchvision wheel) that works only as the zoo lets it.
LOAD = """
import json, pickle, sys
from pathlib import Path
import numpy as np, torch
from algoswap._zoo_foreign import allow_torchvision
allow_torchvision()
folder = Path(sys.argv[1])
model = pickle.loads((folder / "model.pkl").read_bytes())
out = model(torch.from_numpy(np.load(folder / "x.npy")))
np.save(folder / "out.npy", out.numpy())
print(json.dumps([row.implementation for row in model.explain()]))
"""


def implementations(model: algoswap.Model) -> list[str]:
    return [row.implementation for row in model.explain()]


def weight_bytes(model: algoswap.Model) -> int:
    """The bytes of the model's weights: its constants, and the tensors of the modules its torch nodes call."""
    modules = [n.source.target for n in model.nodes if n.kind == "torch" and isinstance(getattr(n.source, "target", None), torch.nn.Module)]
    tensors = [t for m in modules for t in (*m.parameters(), *m.buffers())]
    return sum(a.nbytes for a in model.constants.values()) + sum(t.numel() * t.element_size() for t in tensors)


def loaded_elsewhere(data: bytes, x: torch.Tensor, folder: Path) -> tuple[torch.Tensor, list[str]]:
    """The output of the pickled model unpickled and called in a fresh Python process, and its implementations."""
    (folder / "model.pkl").write_bytes(data)
    np.save(folder / "x.npy", x.numpy())
    done = subprocess.run([sys.executable, "-c", LOAD, str(folder)], capture_output=True, text=True, timeout=HANG_SECONDS,
                          env=os.environ)
    assert done.returncode == 0, done.stderr
    return torch.from_numpy(np.load(folder / "out.npy")), json.loads(done.stdout.splitlines()[-1])


def assert_saves_and_copies(model: algoswap.Model, x: torch.Tensor, folder: Path) -> None:
    """Pickled (weights once), unpickled in a fresh process and deep-copied, the model gives its outputs bit for
    bit on the same implementations; the copies are independent of it. Changes ``model``'s weights at the end."""
    out = model(x)
    data = pickle.dumps(model)
    assert len(data) <= 1.05 * weight_bytes(model) + 2**20, f"{len(data)} bytes pickled for {weight_bytes(model)} of weights"
    elsewhere, ran = loaded_elsewhere(data, x, folder)
    assert torch.equal(elsewhere, out) and ran == implementations(model)
    copied = copy.deepcopy(model)
    assert torch.equal(copied(x), out) and implementations(copied) == implementations(model)
    assert_independent(model, x, out)


def assert_independent(model: algoswap.Model, x: torch.Tensor, out: torch.Tensor) -> None:
    """A deep copy shares no weight array or executor with ``model`` (whose output for ``x`` is ``out``):
    zeroing the copy's weights leaves ``model``'s output, zeroing ``model``'s leaves a copy's."""
    copied = copy.deepcopy(model)
    assert copied.executor is not model.executor
    weights = model.constants
    assert not [name for name, array in copied.constants.items() if np.shares_memory(array, weights[name])]
    _zero_weights(copied)
    assert not torch.equal(copied(x), out)
    assert torch.equal(model(x), out)
    spare = copy.deepcopy(model)
    _zero_weights(model)
    assert torch.equal(spare(x), out)


def _zero_weights(model: algoswap.Model) -> None:
    """Every floating weight of the model set to zeros (before its first call: a fresh copy)."""
    for node in topological(model.nodes):
        if node.kind == "constant" and "float" in node.dtype:
            node.value = algoswap.freeze(np.zeros_like(node.value))
