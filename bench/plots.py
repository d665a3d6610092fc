"""PNG charts of benchmark results (matplotlib, headless).

Each function takes the result dict a ``distgnn-bench`` subcommand writes as JSON and a
directory, and returns the path of the PNG it wrote.
"""
from __future__ import annotations

import io
from pathlib import Path

from distgnn.errors import DistGNNError
from distgnn.storage import check_replaceable, file_head, write_atomic

PNG_TAG = b"distgnn-bench"  # in each chart's Software text chunk


def is_chart(path: Path) -> bool:
    """A PNG that :mod:`bench.plots` drew (it carries ``PNG_TAG`` in a text chunk)."""
    head = file_head(path, 8192)
    return head.startswith(b"\x89PNG") and PNG_TAG in head


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise DistGNNError("--plot needs matplotlib (pip install '.[bench]')") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def epoch_chart(result: dict, directory: str | Path) -> Path:
    """Median epoch time per implementation, one group of bars per (dataset, model), with
    the speed-up against PyG written on each bar."""
    plt = _pyplot()
    rows = result["results"]
    impls = list(dict.fromkeys(i for r in rows for i in r["impls"]))
    fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(rows)), 4))
    width = 0.8 / len(impls)
    for k, impl in enumerate(impls):
        xs = [i + k * width for i, r in enumerate(rows) if impl in r["impls"]]
        ys = [r["impls"][impl]["epoch_s_median"] for r in rows if impl in r["impls"]]
        bars = ax.bar(xs, ys, width, label=impl)
        for bar, r in zip(bars, [r for r in rows if impl in r["impls"]]):
            speed = r["impls"][impl].get("speedup_vs_pyg")
            if speed is not None:
                ax.annotate(f"{speed:.1f}x", (bar.get_x() + bar.get_width() / 2,
                                              bar.get_height()),
                            ha="center", va="bottom", fontsize=8)
    ax.set_xticks([i + width * (len(impls) - 1) / 2 for i in range(len(rows))])
    ax.set_xticklabels([f"{r['dataset']}\n{r['model']} h{r['hidden']}" for r in rows])
    ax.set_ylabel("epoch time (s, median)")
    threads = rows[0]["threads"] if rows else "?"
    ax.set_title(f"Full-batch training epoch, {threads} threads (labels: speed-up vs PyG)")
    ax.legend()
    return _save(fig, directory, "epoch.png")


def _save(fig, directory: str | Path, name: str) -> Path:
    """``fig`` as ``directory/name``, tagged as ours; an existing PNG is replaced only when
    it carries the tag (a chart of an earlier run)."""
    plt = _pyplot()
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    path = path / name
    check_replaceable(path, is_chart, "a chart drawn by distgnn-bench")
    fig.tight_layout()
    png = io.BytesIO()  # drawn in memory, then written once, atomically
    try:
        fig.savefig(png, dpi=120, format="png", metadata={"Software": PNG_TAG.decode()})
    finally:
        plt.close(fig)
    write_atomic(path, png.getvalue())
    return path


def scaling_charts(result: dict, directory: str | Path) -> list[Path]:
    """Predicted speed-up per algorithm against P (DistGNN Fig. 5 shape), and the forward
    pass's local vs remote aggregation time per P (Fig. 6 shape); measured points of the
    validation, when present, as markers."""
    plt = _pyplot()
    rows = result["rows"]
    parts = [r["parts"] for r in rows]
    names = {"0c": "0c", "cd-0": "cd-0", "cd-r": f"cd-{result['delay']}"}
    fig, ax = plt.subplots(figsize=(6, 4))
    for algo, label in names.items():
        line, = ax.plot(parts, [r[algo]["speedup"] for r in rows], marker="o", label=label)
        measured = [v for v in result.get("validation", []) if v["algo"] in (algo, "cd-0")
                    and (v["algo"] == algo or v["parts"] == 1)]
        if measured and rows:
            base = next((v["measured_s"] for v in measured if v["parts"] == 1), None)
            if base:
                ax.plot([v["parts"] for v in measured], [base / v["measured_s"] for v in measured],
                        "x", color=line.get_color(), markersize=9)
    ax.plot(parts, parts, ":", color="grey", label="linear")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("ranks P")
    ax.set_ylabel("speed-up over P = 1")
    ax.set_title(f"{result['dataset']}: predicted epoch speed-up (x: measured)")
    ax.legend()
    paths = [_save(fig, directory, "scaling.png")]
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = range(len(rows))
    local = [r["forward_local_s"] * 1e3 for r in rows]
    remote = [r["forward_remote_s"] * 1e3 for r in rows]
    ax.bar(xs, local, label="local aggregation")
    ax.bar(xs, remote, bottom=local, label="remote aggregation (cd-0)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([str(p) for p in parts])
    ax.set_xlabel("ranks P")
    ax.set_ylabel("forward aggregation (ms, slowest rank)")
    ax.set_title(f"{result['dataset']}: forward-pass aggregation time")
    ax.legend()
    paths.append(_save(fig, directory, "forward_aggregation.png"))
    return paths


def _lines(series: dict[str, list[tuple[float, float]]], title: str, xlabel: str,
           ylabel: str, directory, name: str, logx: bool = True) -> Path:
    """One line per series of ``(x, y)`` points."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, points in series.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    return _save(fig, directory, name)


def spmm_chart(result: dict, directory) -> Path:
    """Forward speed-up of the Numba kernels over torch.sparse.mm (same vertex order) per
    feature width, one line per order and precision."""
    series: dict[str, list] = {}
    for r in result["results"]:
        for key in sorted(k for k in r if k.startswith("speedup_fwd_")):
            series.setdefault(f"{r['order']} {key.rpartition('_')[2]}", []).append(
                (r["width"], r[key]))
    return _lines(series, f"SpMM forward on {result.get('dataset', 'the graph')}",
                  "feature width d", "speed-up over torch.sparse.mm", directory, "spmm.png")


def partition_chart(result: dict, directory) -> Path:
    """Replication factor per method against P (one line per dataset and method)."""
    series: dict[str, list] = {}
    for r in result["results"]:
        series.setdefault(f"{r['dataset']} {r['method']}", []).append(
            (r["parts"], r["replication_factor"]))
    return _lines(series, "Vertex-cut replication factor", "partitions P",
                  "replication factor", directory, "partition.png")


def comm_chart(result: dict, directory) -> Path:
    """alltoallv bandwidth per rank against the message size, per communicator."""
    series = {f"{r['communicator']} alltoallv": [(s["bytes"], s["alltoallv_gb_s"])
                                                 for s in r["sizes"]]
              for r in result["results"]}
    return _lines(series, f"Communicators, {result['ranks']} ranks", "bytes per peer",
                  "GB/s sent per rank", directory, "comm.png")


def phases_chart(result: dict, directory) -> Path:
    """Each phase of the epoch as a fraction of the machine's limit that applies to it,
    with its share of the epoch written on its bar."""
    plt = _pyplot()
    rows = [r for r in result["results"] if r["fraction"] != ""]
    fig, ax = plt.subplots(figsize=(6, 4))
    bars = ax.bar([r["phase"] for r in rows], [r["fraction"] for r in rows])
    for bar, r in zip(bars, rows):
        ax.annotate(f"{r['share']:.0%} of epoch", (bar.get_x() + bar.get_width() / 2,
                                                   bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    machine = result.get("machine", {})
    ax.set_ylabel("fraction of the limit")
    ax.set_title(f"{result['model']} h{result['hidden']} epoch phases: triad "
                 f"{machine.get('triad_gb_s', '?')} GB/s, matmul "
                 f"{machine.get('matmul_gflops', '?')} GFLOP/s", fontsize=9)
    return _save(fig, directory, "phases.png")


def charts(result: dict, directory) -> list[Path]:
    """Every chart of one benchmark result."""
    kind = result.get("benchmark")
    if kind == "predict":
        return scaling_charts(result, directory)
    draw = {"epoch": epoch_chart, "spmm": spmm_chart, "partition": partition_chart,
            "comm": comm_chart, "phases": phases_chart}.get(kind)
    return [draw(result, directory)] if draw else []
