"""Per-call cost of a tiny conv layer (launch-bound): torch, a swapped layer through the bridge, the implementation alone."""
import time, torch, cupy as cp, algoswap, copy
conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
x = torch.randn(1, 64, 8, 8, device="cuda")
sw = algoswap.swap_conv2d(copy.deepcopy(conv), "cuda:guess")
impl = algoswap.registry().impls[("conv2d", "guess", "cuda")]
xc, wc, bc = cp.from_dlpack(x), cp.from_dlpack(conv.weight.detach()), cp.from_dlpack(conv.bias.detach())
kw = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1, padding_mode="zeros")
with torch.no_grad():
    for label, fn in [("torch conv", lambda: conv(x)), ("swapped conv (bridge)", lambda: sw(x)), ("impl call", lambda: impl.callable(xc, wc, bc, **kw))]:
        for _ in range(50): fn()
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(500): fn()
        torch.cuda.synchronize(); print(f"host+gpu per call, tiny layer: {label}: {(time.perf_counter() - t) / 500 * 1e6:.1f} us")
