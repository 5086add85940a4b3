"""The ``mps`` backend: torch's ops on the mps device (MPSGraph and torch's own Metal kernels underneath), on
MpsArrays. Its modules are named after the core's op families."""
