"""Writing benchmark results: JSON files and charts, checked at start-up, replaced only when
they are results of this tool, written atomically (:mod:`distgnn.storage`)."""
from __future__ import annotations

import argparse

from distgnn.storage import check_json_output, check_output_dir, write_json


def output_arguments(parser: argparse.ArgumentParser, charts: str) -> None:
    """``--json`` and ``--plot``, which every benchmark takes."""
    parser.add_argument("--json", metavar="FILE",
                        help="write the results and machine information here")
    parser.add_argument("--plot", metavar="DIR", help=f"write {charts} here (needs matplotlib)")

def check_outputs(args) -> None:
    """What every subcommand checks before its work: ``--json`` and ``--plot``."""
    check_json_output(getattr(args, "json", None))
    if getattr(args, "plot", None):
        check_output_dir(args.plot, "--plot")


def finish(result: dict, args) -> None:
    """What every subcommand does with its result: ``--json FILE`` and ``--plot DIR``."""
    if getattr(args, "json", None):
        write_json(args.json, result, "distgnn-bench")
    if getattr(args, "plot", None):
        from bench.plots import charts

        for path in charts(result, args.plot):
            print(f"wrote {path}")
