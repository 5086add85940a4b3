"""The ``metal`` backend: our own Metal Shading Language kernels (algoswap_metal/kernels/*.metal), compiled at run
time by torch.mps.compile_shader and run on mps tensors. Its modules are named after the core's op families."""
