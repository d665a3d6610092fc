"""The matrix products of one epoch of a 2-layer GCN or GraphSAGE, each timed alone.

    THP_MEM_ALLOC_ENABLE=1 python experiments/layer_products.py --vertices 262144 \\
        --features 128 --hidden 256 --classes 16 --threads 2

For ``N`` vertices, ``F`` features, hidden width ``H`` and ``C`` classes an epoch multiplies
``[N, F] x [F, H]`` (layer 1 forward), ``[F, N] x [N, H]`` (its weight gradient),
``[N, H] x [H, C]`` (layer 2 forward), ``[N, C] x [C, H]`` (the gradient of layer 2's input)
and ``[H, N] x [N, C]`` (its weight gradient), ``2 m k n`` flops each; beside them the
square ``[S, S] x [S, S]`` product that ``distgnn-bench phases`` takes as the machine's
rate, and layer 1's two products in bfloat16.  Each is the best of ``--reps`` calls after
one warm-up, on random operands, the output allocated by the call as in training.
"""
from __future__ import annotations

import argparse
import time

import torch


def best_seconds(f, reps: int) -> float:
    f()
    best = float("inf")
    for _ in range(reps):
        started = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - started)
    return best


def products(n: int, f: int, h: int, c: int, square: int):
    """(name, shape, operands' factory, flops) of each product."""
    return [
        ("square (the phases benchmark's limit)", f"[{square}, {square}] x [{square}, {square}]",
         lambda dt: (torch.randn(square, square, dtype=dt), torch.randn(square, square, dtype=dt)),
         2 * square ** 3),
        ("layer 1 forward", f"[{n}, {f}] x [{f}, {h}]",
         lambda dt: (torch.randn(n, f, dtype=dt), torch.randn(f, h, dtype=dt)), 2 * n * f * h),
        ("layer 1 weight gradient", f"[{f}, {n}] x [{n}, {h}]",
         lambda dt: (torch.randn(n, f, dtype=dt).t(), torch.randn(n, h, dtype=dt)), 2 * n * f * h),
        ("layer 2 forward", f"[{n}, {h}] x [{h}, {c}]",
         lambda dt: (torch.randn(n, h, dtype=dt), torch.randn(h, c, dtype=dt)), 2 * n * h * c),
        ("layer 2 input gradient", f"[{n}, {c}] x [{c}, {h}]",
         lambda dt: (torch.randn(n, c, dtype=dt), torch.randn(h, c, dtype=dt).t()), 2 * n * h * c),
        ("layer 2 weight gradient", f"[{h}, {n}] x [{n}, {c}]",
         lambda dt: (torch.randn(n, h, dtype=dt).t(), torch.randn(n, c, dtype=dt)), 2 * n * h * c),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vertices", type=int, default=262144, help="rows N of the activations")
    p.add_argument("--features", type=int, default=128, help="input features F")
    p.add_argument("--hidden", type=int, default=256, help="hidden width H")
    p.add_argument("--classes", type=int, default=16, help="classes C (layer 2's width)")
    p.add_argument("--square", type=int, default=4096, help="side of the square product")
    p.add_argument("--threads", type=int, default=2, help="torch's threads")
    p.add_argument("--reps", type=int, default=5, help="timed calls per product (the best)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print(f"{'product':<40} {'shape':<34} {'dtype':<9} {'ms':>8} {'GFLOP/s':>8}")
    for name, shape, make, flops in products(a.vertices, a.features, a.hidden, a.classes,
                                             a.square):
        dtypes = [torch.float32]
        if name.startswith(("square", "layer 1")):
            dtypes.append(torch.bfloat16)
        for dt in dtypes:
            x, w = make(dt)
            s = best_seconds(lambda: x @ w, a.reps)
            print(f"{name:<40} {shape:<34} {str(dt).removeprefix('torch.'):<9} "
                  f"{s * 1e3:>8.1f} {flops / s / 1e9:>8.1f}")


if __name__ == "__main__":
    main()
