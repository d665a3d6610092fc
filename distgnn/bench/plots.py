"""PNG charts of benchmark results (matplotlib, headless).

Each function takes the result dict a ``distgnn-bench`` subcommand writes as JSON and a
directory, and returns the path of the PNG it wrote.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import DistGNNError


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
    fig.tight_layout()
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    path = path / "epoch.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
