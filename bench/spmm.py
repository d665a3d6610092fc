"""``distgnn-bench spmm``: the Numba kernels against torch.sparse.mm and scipy, same run.

For each vertex order of ``--orders`` (:mod:`distgnn.data.ordering`) the graph is relabelled
once, and the order's cost (ordering and relabelling seconds) reported once.  Then for
each feature width ``d`` it times, interleaved and repeated (median): forward ``y = A x``
and backward ``g_x = A^T g`` of the Numba kernels (autotuned plan) gathering each of
``--precisions`` (fp32, or bf16 rows accumulated in fp32; the bf16 conversion of ``x`` is
timed on its own), of ``torch.sparse.mm`` on CSR tensors (same thread count), and of
scipy's CSR product (one thread), all on the same relabelled graph; speed-ups are over
torch.sparse.mm in the same order.  Effective bandwidth counts the bytes that must move
with no reuse: the indices, one gathered ``d``-element row per edge (4 bytes an element in
fp32, 2 in bf16) and the written float32 output, divided by the time, and is compared with
the STREAM triad measured in the same run.  ``--sweep`` adds every hub-block size tried
against the autotuned one (fp32).

``--device cuda`` compares, on the GPU, this project's torch backend (``torch.sparse`` CSR
forward and transpose) with PyTorch Geometric's two routes to the same sum: message
passing over ``edge_index`` (gather ``x[src]``, scatter-add into ``dst``; its backward is
the same with the roles swapped), and ``torch_geometric.utils.spmm`` on a CSR ``adj_t``.
Results are checked against each other before timing; bandwidth is compared with a
device-to-device copy measured in the same run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

from bench.machine import machine_info
from bench.output import finish, output_arguments
from distgnn.data.datasets import load
from distgnn.data.ordering import ORDERS, relabel, vertex_order
from distgnn.kernels import plan_spmm, spmm
from distgnn.kernels.autotune import autotune_plan, time_plan
from distgnn.kernels.spmm import as_aligned, empty_aligned
from distgnn.nn.backends import TorchSparseBackend, bf16_bits
from distgnn.placement import AGGREGATION_PRECISIONS, synchronize
from distgnn.program import comma_list

SWEEP_EXTRA = (1024, 2048, 4096, 8192, 16384, 65536)


HELP = "aggregation kernels vs torch.sparse.mm and scipy"
DESCRIPTION = ("Forward and backward SpMM of the Numba kernels, torch.sparse.mm and scipy on one "
               "graph, interleaved, with the STREAM triad of this machine.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="rmat:scale=20,edge_factor=16,features=1",
                   help="any --dataset of distgnn-train (only the graph is used)")
    p.add_argument("--widths", default=[16, 64, 128, 256], type=comma_list(int),
                   help="comma-separated feature widths d")
    p.add_argument("--orders", default=list(ORDERS), type=comma_list(str, ORDERS),
                   help="comma-separated vertex orders to relabel the graph in, each timed "
                        "on its own (given: as stored)")
    p.add_argument("--precisions", default=list(AGGREGATION_PRECISIONS),
                   type=comma_list(str, AGGREGATION_PRECISIONS),
                   help="comma-separated precisions the Numba kernels gather in")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions (median reported)")
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="threads for Numba and torch (scipy runs on one)")
    p.add_argument("--sweep", action="store_true",
                   help="also time every hub-block size against the autotuned one")
    p.add_argument("--scipy", action=argparse.BooleanOptionalAction, default=True,
                   help="time scipy's CSR product too")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: the Numba kernels vs torch.sparse and scipy; cuda: the torch "
                        "backend on the GPU vs PyTorch Geometric's message passing and spmm")
    output_arguments(p, "spmm.png")

def moved_bytes(graph, width: int, itemsize: int = 4) -> int:
    """Bytes an SpMM over ``graph`` at ``width`` must move: its indices, one gathered row
    of ``itemsize``-byte elements per edge, the float32 output."""
    return (graph.indices.nbytes + graph.num_edges * width * itemsize
            + graph.num_nodes * width * 4)


def effective_gb_s(graph, width: int, seconds: float, itemsize: int = 4) -> float:
    """:func:`moved_bytes` per second, in GB/s."""
    return moved_bytes(graph, width, itemsize) / seconds / 1e9


def median_times(runs: dict, repeats: int) -> dict[str, float]:
    """Run every callable once to warm up, then ``repeats`` interleaved rounds; medians."""
    for f in runs.values():
        f()
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, f in runs.items():
            start = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def jit_start_times() -> dict[str, float]:
    """Seconds for a fresh process's first kernel call with an empty, then a warm, JIT cache."""
    code = ("import time; t = time.perf_counter(); import numpy as np; "
            "from distgnn.kernels import spmm; "
            "spmm(np.array([0, 1]), np.array([0], np.int32), np.ones((1, 4), np.float32)); "
            "print(time.perf_counter() - t)")
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        run = [sys.executable, "-c", code]
        cold = float(subprocess.run(run, env=env, capture_output=True, text=True,
                                    check=True).stdout)
        warm = float(subprocess.run(run, env=env, capture_output=True, text=True,
                                    check=True).stdout)
    return {"first_call_compile_s": round(cold, 2), "cached_start_s": round(warm, 2)}


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    import numba

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    data = load(args.dataset)
    print(f"{data.name}: {data.graph.num_nodes:,} vertices, {data.graph.num_edges:,} edges; "
          f"{args.threads} threads; THP_MEM_ALLOC_ENABLE="
          f"{os.environ.get('THP_MEM_ALLOC_ENABLE', '')}", flush=True)
    info = machine_info(args.threads)
    info.update(jit_start_times())
    print(f"triad {info['triad_gb_s']} GB/s; JIT first call {info['first_call_compile_s']} s, "
          f"cached {info['cached_start_s']} s", flush=True)
    rows, sweep, orders = [], [], []
    for order in args.orders:
        graph, cost = relabelled(data.graph, order)
        orders.append(cost)
        print(f"order {order}: ordering {cost['ordering_s']:.2f} s, relabel "
              f"{cost['relabel_s']:.2f} s", flush=True)
        for width in args.widths:
            rows.append(time_width(graph, order, width, args, info["triad_gb_s"]))
            print_row(rows[-1], first=len(rows) == 1)
            if args.sweep:
                x = as_aligned(np.random.default_rng(width).standard_normal(
                    (graph.num_nodes, width), dtype=np.float32))
                sweep.append(sweep_hub_blocks(graph, x, empty_aligned(x.shape, x.dtype),
                                              rows[-1]["hub_block"], width, args.reps))
    return {"benchmark": "spmm", "dataset": data.name, "num_nodes": data.graph.num_nodes,
            "num_edges": data.graph.num_edges, "machine": info, "orders": orders,
            "results": rows, "sweep": sweep}


def relabelled(graph, order: str):
    """``graph`` in ``order``, and what the order cost: ``{order, ordering_s, relabel_s}``
    (``given`` is the graph itself, at no cost)."""
    if order == "given":
        return graph, {"order": order, "ordering_s": 0.0, "relabel_s": 0.0}
    start = time.perf_counter()
    perm = vertex_order(graph, order)
    ordered = time.perf_counter()
    graph = relabel(graph, perm)
    return graph, {"order": order, "ordering_s": ordered - start,
                   "relabel_s": time.perf_counter() - ordered}


def time_width(graph, order: str, width: int, args, triad_gb_s: float) -> dict:
    """One row of the table: every implementation at ``width`` on ``graph``, interleaved."""
    t = graph.transpose()
    torch_csr = TorchSparseBackend().tensors(graph, torch.device("cpu"))
    x = as_aligned(np.random.default_rng(width).standard_normal((graph.num_nodes, width),
                                                                dtype=np.float32))
    xt = torch.from_numpy(x)
    out = empty_aligned(x.shape, np.float32)
    gathered = {"fp32": x, "bf16": bf16_bits(xt)}
    runs, row = {}, {"order": order, "width": width}
    for p in args.precisions:
        xp = gathered[p]
        plan, trial = autotune_plan(graph.indptr, graph.indices, None, graph.num_nodes, width,
                                    dtype=xp.dtype)
        tplan, _ = autotune_plan(t.indptr, t.indices, None, t.num_nodes, width,
                                 dtype=xp.dtype)
        row[f"hub_block_{p}"], row[f"autotune_trial_s_{p}"] = plan.hub_block, trial
        runs[f"numba_fwd_{p}"] = (lambda xp=xp, plan=plan:
                                  spmm(graph.indptr, graph.indices, xp, out=out, plan=plan))
        runs[f"numba_bwd_{p}"] = (lambda xp=xp, plan=tplan:
                                  spmm(t.indptr, t.indices, xp, out=out, plan=plan))
    if "bf16" in args.precisions:
        runs["bf16_convert"] = lambda: bf16_bits(xt)
    runs["torch_fwd"] = lambda: torch.sparse.mm(torch_csr["A"], xt)
    runs["torch_bwd"] = lambda: torch.sparse.mm(torch_csr["AT"], xt)
    if args.scipy:
        s = graph.to_scipy()
        runs["scipy_fwd"] = lambda: s @ x
    med = median_times(runs, args.reps)
    row.update(med)
    row["hub_block"] = row.get("hub_block_fp32", row.get("hub_block_bf16"))
    for p in args.precisions:
        for way in ("fwd", "bwd"):
            row[f"speedup_{way}_{p}"] = round(med[f"torch_{way}"] / med[f"numba_{way}_{p}"], 2)
        row[f"eff_gb_s_fwd_{p}"] = round(effective_gb_s(
            graph, width, med[f"numba_fwd_{p}"], gathered[p].itemsize), 2)
        row[f"eff_over_triad_{p}"] = round(row[f"eff_gb_s_fwd_{p}"] / triad_gb_s, 2)
    return row


def sweep_hub_blocks(graph, x, out, chosen: int, width: int, reps: int) -> dict:
    from distgnn.kernels.autotune import candidate_hub_blocks

    sizes = sorted({b for b in SWEEP_EXTRA if b < graph.num_nodes} | {chosen}
                   | set(candidate_hub_blocks(width, graph.num_nodes)))
    times = {}
    for hub in sizes:
        plan = plan_spmm(graph.indptr, graph.indices, None, hub, graph.num_nodes)
        time_plan(plan, graph.indptr, graph.indices, x, out)
        times[hub] = statistics.median(
            time_plan(plan, graph.indptr, graph.indices, x, out) for _ in range(reps))
    best = min(times, key=times.get)
    result = {"width": width, "times": {str(k): v for k, v in times.items()},
              "best": best, "chosen": chosen,
              "chosen_over_best": round(times[chosen] / times[best], 3)}
    print(f"  sweep d={width}: " + "  ".join(
        f"{k}{'*' if k == chosen else ''}:{v:.3f}s" for k, v in times.items())
          + f"  -> autotuned within {100 * (result['chosen_over_best'] - 1):.1f} % of best",
          flush=True)
    return result


def device_copy_gb_s(device: torch.device, num_floats: int = 1 << 28) -> float:
    """Bytes read plus written per second by a device-to-device copy (best of 5)."""
    a = torch.empty(num_floats, device=device)
    b = torch.empty_like(a)
    times = median_times({"copy": lambda: (b.copy_(a), synchronize(device))}, 5)
    return 2 * a.numel() * 4 / times["copy"] / 1e9


def run_device(args) -> dict:
    """The torch backend against PyG's aggregations on ``args.device`` (see the docstring)."""
    from torch_geometric.utils import scatter
    from torch_geometric.utils import spmm as pyg_spmm

    device = torch.device(args.device)
    data = load(args.dataset)
    graph = data.graph
    ours = TorchSparseBackend()
    t = ours.tensors(graph, device)
    src, dst, n = t["src"], t["dst"], graph.num_nodes
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    info = {"device": name, "copy_gb_s": round(device_copy_gb_s(device), 1),
            "versions": {"torch": torch.__version__}}
    print(f"{data.name}: {n:,} vertices, {graph.num_edges:,} edges on {name}; "
          f"device copy {info['copy_gb_s']} GB/s", flush=True)
    rows = []
    for width in args.widths:
        x = torch.randn(n, width, device=device)
        runs = {"ours_fwd": lambda: ours.spmm(graph, x, "sum")[0],
                "pyg_mp_fwd": lambda: scatter(x[src], dst, 0, n, "sum"),
                "pyg_spmm_fwd": lambda: pyg_spmm(t["A"], x, "sum"),
                "ours_bwd": lambda: ours.spmm_backward(graph, x, "sum", None),
                "pyg_mp_bwd": lambda: scatter(x[dst], src, 0, n, "sum")}
        ref = runs["pyg_mp_fwd"]()
        err = max(float((runs[k]().double() - ref.double()).norm() / ref.double().norm())
                  for k in ("ours_fwd", "pyg_spmm_fwd"))
        err_bwd = float((runs["ours_bwd"]().double() - runs["pyg_mp_bwd"]().double()).norm()
                        / runs["pyg_mp_bwd"]().double().norm())
        med = median_times({k: (lambda f=f: (f(), synchronize(device))) for k, f in runs.items()},
                           args.reps)
        row = {"width": width, **med, "rel_err_fwd": err, "rel_err_bwd": err_bwd,
               "ours_vs_pyg_mp_fwd": round(med["pyg_mp_fwd"] / med["ours_fwd"], 2),
               "ours_vs_pyg_mp_bwd": round(med["pyg_mp_bwd"] / med["ours_bwd"], 2),
               "ours_vs_pyg_spmm_fwd": round(med["pyg_spmm_fwd"] / med["ours_fwd"], 2),
               "eff_gb_s_fwd": round(effective_gb_s(graph, width, med["ours_fwd"]), 1)}
        row["eff_over_copy"] = round(row["eff_gb_s_fwd"] / info["copy_gb_s"], 2)
        rows.append(row)
        print_row(row, width == args.widths[0], DEVICE_COLUMNS)
    return {"benchmark": "spmm-device", "dataset": data.name, "num_nodes": n,
            "num_edges": graph.num_edges, "machine": info, "results": rows}


CPU_COLUMNS = [("order", "order"), ("width", "d"), ("hub_block", "hub B"),
               ("numba_fwd_fp32", "fp32 fwd s"), ("numba_fwd_bf16", "bf16 fwd s"),
               ("torch_fwd", "torch fwd s"), ("scipy_fwd", "scipy fwd s"),
               ("speedup_fwd_fp32", "fp32 fwd x"), ("speedup_fwd_bf16", "bf16 fwd x"),
               ("numba_bwd_fp32", "fp32 bwd s"), ("numba_bwd_bf16", "bf16 bwd s"),
               ("torch_bwd", "torch bwd s"), ("speedup_bwd_fp32", "fp32 bwd x"),
               ("speedup_bwd_bf16", "bf16 bwd x"), ("bf16_convert", "to bf16 s"),
               ("eff_over_triad_fp32", "fp32/triad"), ("eff_over_triad_bf16", "bf16/triad")]
DEVICE_COLUMNS = [("width", "d"), ("ours_fwd", "ours fwd s"), ("pyg_mp_fwd", "PyG mp fwd"),
                  ("pyg_spmm_fwd", "PyG spmm"), ("ours_vs_pyg_mp_fwd", "vs mp x"),
                  ("ours_vs_pyg_spmm_fwd", "vs spmm x"), ("ours_bwd", "ours bwd s"),
                  ("pyg_mp_bwd", "PyG mp bwd"), ("ours_vs_pyg_mp_bwd", "bwd x"),
                  ("eff_gb_s_fwd", "eff GB/s"), ("eff_over_copy", "/copy"),
                  ("rel_err_fwd", "rel err")]


def print_row(row: dict, first: bool, cols=CPU_COLUMNS) -> None:
    if first:
        print("  ".join(f"{title:>11}" for _, title in cols))
    cells = (f"{row[key]:.4g}" if isinstance(row.get(key), float) else str(row.get(key, "-"))
             for key, _ in cols)
    print("  ".join(f"{c:>11}" for c in cells), flush=True)


def main(args) -> int:
    finish(run(args) if args.device == "cpu" else run_device(args), args)
    return 0
