"""List the cuDNN engines that serve a few convolution layers, with the evidence that names them.

For each layer and each direction (fprop, dgrad, wgrad), every backend engine id of the operation
graph is tried alone (``create_execution_plan(engine_id)``): whether it builds, its plan name, its
workspace, its numerical notes (FFT, WINOGRAD, TENSOR_CORE, ...), its relative error against torch
in float64 and its median time. This is how the engine ids behind the legacy algorithm names
(README, "CUDA backend") were read off; run it on a GPU machine with the cuDNN frontend:

    python benchmarks/cuda_engines.py [--out engines.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import cupy as cp
import cudnn
import torch
import torch.nn.functional as F

LAYERS = {
    "3x3 s1 64->64 56x56": ((32, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    "1x1 s1 256->64 56x56": ((32, 256, 56, 56), (64, 256, 1, 1), 1, 0),
    "3x3 s2 128->128 56x56": ((32, 128, 56, 56), (128, 128, 3, 3), 2, 1),
    "5x5 s1 32->32 28x28": ((8, 32, 28, 28), (32, 32, 5, 5), 1, 2),
}
NOTES = ("FFT", "WINOGRAD", "WINOGRAD_TILE_4x4", "WINOGRAD_TILE_6x6", "WINOGRAD_TILE_13x13", "TENSOR_CORE",
         "DOWN_CONVERT_INPUTS", "NONDETERMINISTIC", "REDUCED_PRECISION_REDUCTION")
F32 = cudnn.data_type.FLOAT


def strides(shape: tuple[int, ...]) -> list[int]:
    out, step = [], 1
    for size in reversed(shape):
        out.insert(0, step)
        step *= size
    return out


def make_graph(handle, kind, x_shape, w_shape, y_shape, stride, pad, notes=()):
    g = cudnn.pygraph(io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32, handle=handle)
    geometry = dict(pre_padding=[pad, pad], post_padding=[pad, pad], stride=[stride, stride], dilation=[1, 1], compute_data_type=F32)
    if kind == "fprop":
        a = g.tensor(name="X", dim=list(x_shape), stride=strides(x_shape), data_type=F32)
        b = g.tensor(name="W", dim=list(w_shape), stride=strides(w_shape), data_type=F32)
        out, shape = g.conv_fprop(image=a, weight=b, **geometry), y_shape
    elif kind == "dgrad":
        a = g.tensor(name="DY", dim=list(y_shape), stride=strides(y_shape), data_type=F32)
        b = g.tensor(name="W", dim=list(w_shape), stride=strides(w_shape), data_type=F32)
        out, shape = g.conv_dgrad(loss=a, filter=b, **geometry), x_shape
    else:
        a = g.tensor(name="X", dim=list(x_shape), stride=strides(x_shape), data_type=F32)
        b = g.tensor(name="DY", dim=list(y_shape), stride=strides(y_shape), data_type=F32)
        out, shape = g.conv_wgrad(image=a, loss=b, **geometry), w_shape
    out.set_output(True).set_dim(list(shape)).set_stride(strides(shape)).set_data_type(F32)
    for note in notes:
        g.select_numeric_notes([getattr(cudnn.numerical_note, note)])
    g.validate()
    g.build_operation_graph()
    return g, a, b, out, shape


def try_engine(handle, kind, shapes, stride, pad, engine, tensors, reference, notes=()):
    g, a, b, out, shape = make_graph(handle, kind, *shapes, stride, pad, notes)
    g.create_execution_plan(engine, {})
    index = g.get_execution_plan_count() - 1
    g.build_plan_at_index(index)
    if notes:
        return {}
    name = g.get_plan_name_at_index(index)
    ws = g.get_workspace_size_plan_at_index(index)
    workspace = cp.empty(max(ws, 1), dtype=cp.uint8)
    y = cp.full(shape, cp.nan, dtype=cp.float32)
    pack = {a: tensors[0].data.ptr, b: tensors[1].data.ptr, out: y.data.ptr}
    g.execute_plan_at_index(pack, workspace.data.ptr, index, handle)
    cp.cuda.runtime.deviceSynchronize()
    err = float(cp.linalg.norm(y.astype(cp.float64) - reference) / cp.linalg.norm(reference))
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(5):
        start.record()
        g.execute_plan_at_index(pack, workspace.data.ptr, index, handle)
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    t0 = time.perf_counter()
    for _ in range(20):
        g.execute_plan_at_index(pack, workspace.data.ptr, index, handle)
    host_us = (time.perf_counter() - t0) / 20 * 1e6
    cp.cuda.runtime.deviceSynchronize()
    return {"name": name, "workspace": ws, "rel_error": err, "ms": sorted(times)[2], "host_us_per_call": host_us,
            "engine_and_knobs": str(g.get_engine_and_knobs_at_index(index))}


def heuristic_list(handle, kind, shapes, stride, pad):
    g, *_ = make_graph(handle, kind, *shapes, stride, pad)
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    out = []
    for i in range(g.get_execution_plan_count()):
        try:
            out.append(g.get_plan_name_at_index(i))
        except Exception as exc:  # noqa: BLE001
            out.append(f"? {type(exc).__name__}: {exc}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="")
    parser.add_argument("--max-engine", type=int, default=80)
    args = parser.parse_args()
    handle = cudnn.create_handle()
    print("cudnn backend", cudnn.backend_version(), "frontend", cudnn.__version__, "cupy", cp.__version__, "torch", torch.__version__)
    print("numerical_note members:", [m for m in dir(cudnn.numerical_note) if not m.startswith("_")])
    print("behavior_note members:", [m for m in dir(cudnn.behavior_note) if not m.startswith("_")])
    print("heur_mode members:", [m for m in dir(cudnn.heur_mode) if not m.startswith("_")])
    report = {}
    rng = cp.random.default_rng(0)
    for label, (x_shape, w_shape, stride, pad) in LAYERS.items():
        y_shape = tuple(F.conv2d(torch.empty(x_shape, device="meta"), torch.empty(w_shape, device="meta"), stride=stride, padding=pad).shape)
        x = rng.standard_normal(x_shape, dtype=cp.float32)
        w = rng.standard_normal(w_shape, dtype=cp.float32)
        dy = rng.standard_normal(y_shape, dtype=cp.float32)
        tx, tw, tdy = (torch.from_dlpack(a).double() for a in (x, w, dy))
        refs = {
            "fprop": ((x, w), F.conv2d(tx, tw, stride=stride, padding=pad)),
            "dgrad": ((dy, w), torch.nn.grad.conv2d_input(x_shape, tw, tdy, stride=stride, padding=pad)),
            "wgrad": ((x, dy), torch.nn.grad.conv2d_weight(tx, w_shape, tdy, stride=stride, padding=pad)),
        }
        for kind, (tensors, ref) in refs.items():
            reference = cp.from_dlpack(ref.contiguous())
            shapes = (x_shape, w_shape, y_shape)
            entry = {"heuristics": heuristic_list(handle, kind, shapes, stride, pad), "engines": {}}
            for engine in range(args.max_engine):
                try:
                    result = try_engine(handle, kind, shapes, stride, pad, engine, tensors, reference)
                except Exception as exc:  # noqa: BLE001 - a refusal is data here
                    continue
                notes = []
                for note in NOTES:
                    try:
                        try_engine(handle, kind, shapes, stride, pad, engine, tensors, reference, (note,))
                        notes.append(note)
                    except Exception:  # noqa: BLE001
                        pass
                result["notes"] = notes
                entry["engines"][engine] = result
            report[f"{label} {kind}"] = entry
            print(f"\n== {label} {kind}: heuristics {entry['heuristics'][:8]}")
            for engine, r in entry["engines"].items():
                print(f"  eng{engine:<3} {r['name']:<28} ws {r['workspace']:>11}  err {r['rel_error']:.1e}  "
                      f"{r['ms']:8.3f} ms  host {r['host_us_per_call']:6.1f} us  notes {','.join(r['notes'])}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
