"""Data-parallel training with the algoswap executor across processes (torch.distributed, gloo on the CPU):
the CNN of train_digits.py on scikit-learn's digits, each rank computing the gradients of its share of every
global batch, averaged over the ranks before each Adam step.

    torchrun --standalone --nproc-per-node 2 examples/train_distributed.py            # 2 ranks
    python examples/train_distributed.py                                               # 1 rank: the same training
    torchrun ... examples/train_distributed.py --checkpoint run.ckpt --max-steps 30   # stop; run again: it resumes
    python examples/train_distributed.py --plot losses.png r1.json r2.json r4.json    # the curves of --losses runs

The global batch (``--batch``) is the same whatever the number of ranks, so 1, 2 and 4 ranks train the same
model on the same batches: their loss curves differ by float32 rounding only. Rank 0 alone prints, shows its
progress and writes checkpoints; ``--losses FILE`` saves the curve. On a shared machine with few cores, set
``OMP_NUM_THREADS=1`` (and, for torchrun on one machine, ``GLOO_SOCKET_IFNAME=lo``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from algoswap import dist, graph as g
from train_digits import build, initial_weights, load


def train(args: argparse.Namespace) -> None:
    here = dist.init()
    x_train, x_test, y_train, y_test = load(args.seed)
    loader = dist.ShardedLoader(x_train, y_train, batch_size=args.batch, seed=args.seed)
    test = g.DataLoader(x_test, y_test, batch_size=len(x_test), shuffle=False)
    x, y = g.dataloader_op({"train": loader, "validate": test})
    logits = build(initial_weights(args.seed), x)
    loss = g.softmax_cross_entropy(logits, y)
    train_op = dist.DataParallel(g.Adam(lr=args.lr)).minimize(loss)
    global_loss = g.allreduce(loss, reduction="mean")  # the mean over the global batch, on every rank
    executor = g.Executor({"train": [global_loss, train_op], "validate": [logits]})
    total = args.epochs * len(loader)
    done, losses = 0, []
    if args.checkpoint and Path(args.checkpoint).exists():
        done, losses = dist.load_checkpoint(executor, args.checkpoint)
        dist.print(f"resumed from {args.checkpoint} at step {done} (attempt {here.attempt})")
    dist.print(f"{here.size} rank(s), global batch {args.batch} ({args.batch // here.size} per rank), {total} steps")
    started = time.perf_counter()
    last = min(total, args.max_steps) if args.max_steps else total
    for step in dist.progress(range(done, last), "training", total=last - done):
        losses.append(float(executor.run("train")[0]))
        if args.checkpoint and ((step + 1) % len(loader) == 0 or step + 1 == last):
            dist.save_checkpoint(executor, args.checkpoint, extra=(step + 1, losses))
    dist.print(f"steps {done}..{last}: final loss {np.mean(losses[-10:]):.4f} ({time.perf_counter() - started:.1f} s)")
    if here.is_main:
        (scores,) = executor.run("validate")
        print(f"test accuracy: {np.mean(scores.argmax(1) == y_test):.3f}")
        if args.losses:
            Path(args.losses).write_text(json.dumps({"ranks": here.size, "batch": args.batch, "losses": losses}))
    dist.shutdown()


def plot(output: str, runs: list[str]) -> None:
    """The loss curves of ``--losses`` files, one per run, and their largest difference from the first."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = [json.loads(Path(run).read_text()) for run in runs]
    figure, axes = plt.subplots(figsize=(7, 4))
    for curve, style in zip(curves, ("-", "--", ":", "-.")):
        axes.plot(curve["losses"], style, label=f"{curve['ranks']} rank(s), {curve['batch'] // curve['ranks']} rows each")
        gap = np.max(np.abs(np.subtract(curve["losses"], curves[0]["losses"])))
        print(f"{curve['ranks']} rank(s): final loss {curve['losses'][-1]:.4f}, largest difference from "
              f"{curves[0]['ranks']} rank(s) {gap:.2e}")
    axes.set(xlabel="step", ylabel="training loss (mean over the global batch)", yscale="log",
             title=f"Digits CNN, Adam, global batch {curves[0]['batch']}: data-parallel on 1, 2 and 4 ranks")
    axes.legend()
    figure.tight_layout()
    figure.savefig(output, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64, help="the global batch: every rank gets batch / ranks rows")
    parser.add_argument("--lr", type=float, default=0.005)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: train every epoch)")
    parser.add_argument("--checkpoint", help="save every epoch (rank 0 writes) and resume from it when it exists")
    parser.add_argument("--losses", help="rank 0 writes the loss curve to this JSON file")
    parser.add_argument("--plot", nargs="+", metavar=("PNG", "JSON"), help="plot the curves of --losses files instead of training")
    args = parser.parse_args(argv)
    if args.plot:
        plot(args.plot[0], args.plot[1:])
    else:
        train(args)


if __name__ == "__main__":
    main()
