"""``distgnn-bench report RESULTS... --out report.md``: one Markdown page from JSON results.

Each ``--json`` file of a ``distgnn-bench`` subcommand becomes a section: its machine, a
table of its rows, and (for ``epoch`` and ``predict``) its charts, drawn next to the page.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from distgnn.errors import DistGNNError
from distgnn.storage import (
    check_output_file,
    check_replaceable,
    file_head,
    write_atomic,
)

HELP = "one Markdown page with charts from JSON results"
DESCRIPTION = ("Gather the --json files of distgnn-bench subcommands into one Markdown page, "
               "with the charts drawn beside it.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", nargs="+", metavar="RESULT", help="JSON files to include")
    p.add_argument("--out", default="report.md", help="the Markdown file to write")

def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def markdown_table(rows: list[dict]) -> list[str]:
    """Rows of scalars (nested dicts flattened one level as ``outer.inner``) as a table."""
    flat = []
    for row in rows:
        out = {}
        for key, value in row.items():
            if isinstance(value, dict):
                out.update({f"{key}.{k}": v for k, v in value.items()
                            if isinstance(v, (int, float, str, bool))})
            elif isinstance(value, (int, float, str, bool)):
                out[key] = value
        flat.append(out)
    columns = list(dict.fromkeys(k for row in flat for k in row))
    if not columns:
        return []
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for row in flat]
    return lines


def _epoch_rows(result: dict) -> list[dict]:
    rows = []
    for r in result["results"]:
        check = r.get("same_model_check", {})
        for impl, m in r["impls"].items():
            rows.append({"dataset": r["dataset"], "model": r["model"], "hidden": r["hidden"],
                         "impl": impl, "epoch s": m["epoch_s_median"],
                         "range s": f"{m['epoch_s_min']:.3g}-{m['epoch_s_max']:.3g}",
                         "vs PyG": m.get("speedup_vs_pyg", ""),
                         "peak RSS MiB": round(m["peak_rss_mib"]),
                         "same model": ("" if not check else
                                        f"{check['max_rel_loss_diff']:.1e}"
                                        + ("" if check["ok"] else " FAILED"))})
    return rows


def _predict_rows(result: dict) -> list[dict]:
    return [{"P": r["parts"], **{f"{a} s": r[a]["epoch"] for a in ("0c", "cd-0", "cd-r")},
             **{f"{a} x": r[a]["speedup"] for a in ("0c", "cd-0", "cd-r")},
             "fwd local ms": r["forward_local_s"] * 1e3,
             "fwd remote ms": r["forward_remote_s"] * 1e3,
             **({"memory MiB/rank": r["predicted_memory_bytes"] / 2**20}
                if "predicted_memory_bytes" in r else {})} for r in result["rows"]]


def section(path: Path, result: dict, chart_dir: Path, link_base: Path) -> list[str]:
    from bench.plots import charts

    kind = result.get("benchmark", "?")
    lines = [f"## {kind}: `{path.name}`", ""]
    machine = result.get("machine")
    if machine:
        lines += [f"{machine['cpu']}, {machine['cores']} cores, {machine['threads']} threads, "
                  f"triad {machine['triad_gb_s']} GB/s, THP_MEM_ALLOC_ENABLE="
                  f"{machine.get('thp_mem_alloc_enable', '')}; "
                  + ", ".join(f"{k} {v}" for k, v in machine["versions"].items()), ""]
    if kind == "epoch":
        lines += markdown_table(_epoch_rows(result))
    elif kind == "predict":
        size = result.get("size")
        if size:
            lines += [(f"Projected to {size['nodes']:,} vertices and {size['edges']:,} "
                       f"edges from `{result['dataset']}` (its rates and replication)."), ""]
        lines += markdown_table(_predict_rows(result))
        if result.get("validation"):
            lines += ["", "Validation against runs on this machine:", ""]
            lines += markdown_table(result["validation"])
    elif kind == "comm":
        lines += markdown_table([{"communicator": r["communicator"], **s}
                                 for r in result["results"] for s in r["sizes"]])
    else:
        lines += markdown_table(result.get("results", []))
    lines.append("")
    lines += [f"![{p.stem}]({os.path.relpath(p, link_base)})"
              for p in charts(result, chart_dir / path.stem)]
    return lines + [""]


TITLE = "# distgnn benchmark report"


def is_report(path: Path) -> bool:
    """A report this subcommand wrote (it opens with ``TITLE``)."""
    return file_head(path, len(TITLE)).decode(errors="replace") == TITLE


def main(args) -> int:
    out = check_output_file(args.out, "--out")
    check_replaceable(out, is_report, "a report written by distgnn-bench report")
    charts = out.parent / (out.stem + "-charts")
    lines = [TITLE, ""]
    for name in args.results:
        path = Path(name)
        try:
            result = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise DistGNNError(f"{path}: not a readable benchmark result ({e})") from None
        lines += section(path, result, charts, out.parent)
    write_atomic(out, "\n".join(lines))
    print(f"wrote {out} ({len(args.results)} results, charts in {charts})")
    return 0
