"""``python tests/without_cupy.py ARGS``: the ``algoswap ARGS`` command as on a machine without CuPy (``import cupy``
fails in this process, as in a virtual environment where algoswap-cuda is installed without its [cu12] extra)."""

import sys

for name in ("cupy", "cupyx", "cupy_backends"):
    sys.modules[name] = None  # type: ignore[assignment]  # an import of it raises ModuleNotFoundError

from algoswap._cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
