"""Writing benchmark results: JSON files replaced atomically (never half-written)."""
from __future__ import annotations

import json
import os


def write_json(path: str, result: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(path + ".tmp", path)


def finish(result: dict, args) -> None:
    """What every subcommand does with its result: ``--json FILE`` and ``--plot DIR``."""
    if getattr(args, "json", None):
        write_json(args.json, result)
    if getattr(args, "plot", None):
        from .plots import charts

        for path in charts(result, args.plot):
            print(f"wrote {path}")
