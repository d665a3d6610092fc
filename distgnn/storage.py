"""What every writer of durable state (partitions, checkpoints) checks and calls."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from .graph import format_bytes


def free_space_problem(target: str | Path, nbytes: float) -> str | None:
    """Why ``nbytes`` cannot be written at ``target`` (or under it, if it does not exist
    yet), or ``None`` when its filesystem has the room."""
    path = Path(target).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    free = shutil.disk_usage(path).free
    if nbytes > free:
        return (f"needs {format_bytes(nbytes)} but the filesystem has only "
                f"{format_bytes(free)} free")
    return None


def fsync_dir(path: str | Path) -> None:
    """Make the entries of directory ``path`` (new names, renames) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
