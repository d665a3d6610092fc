"""Writing benchmark results: JSON files replaced atomically (never half-written)."""
from __future__ import annotations

import json
import os


def write_json(path: str, result: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(path + ".tmp", path)
