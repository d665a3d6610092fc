"""Outcome counts of the hostile-input fuzz suite (``tests/test_fuzz.py``), per loader.

``tests/conftest.py`` sets :data:`SETTINGS` and :data:`SEED` from the command line before the
suite is collected, prints :func:`table` at the end of the session and writes
:func:`write_json` for ``--fuzz-report FILE``.
"""
from __future__ import annotations

import collections
import json

from hypothesis import HealthCheck, settings

OUTCOMES = ("clean", "accepted", "failures")

# hypothesis settings of every fuzz test and the seed of a non-default run (None: the fixed
# derandomized sequence); replaced by configure()
SETTINGS = settings()
SEED: int | None = None

# loader -> outcome -> count; loader -> descriptions of the failures
COUNTS: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
FAILURES: dict[str, list[str]] = collections.defaultdict(list)


def configure(examples: int, seed: int | None) -> None:
    """Run ``examples`` cases per fuzz test; derandomized (the same cases every run, as CI
    needs) unless ``seed`` is given.  Cases write files and run loaders, so there is no
    per-example deadline (the suite's own per-case timeout catches hangs) and hypothesis
    is not asked to find them fast."""
    global SETTINGS, SEED
    SETTINGS = settings(max_examples=examples, deadline=None, derandomize=seed is None,
                        database=None, suppress_health_check=[HealthCheck.too_slow])
    SEED = seed


def record(loader: str, outcome: str, detail: str = "") -> None:
    """Count one case of ``loader`` (``outcome`` one of :data:`OUTCOMES`)."""
    COUNTS[loader][outcome] += 1
    if outcome == "failures":
        FAILURES[loader].append(detail)


def rows() -> list[dict]:
    """One dict per loader: ``loader``, ``tried`` and a count per outcome."""
    return [{"loader": loader, "tried": sum(counts[o] for o in OUTCOMES),
             **{o: counts[o] for o in OUTCOMES}} for loader, counts in COUNTS.items()]


def table() -> list[str]:
    """The counts as aligned text lines, a total last."""
    lines = [f"{'loader':<20} {'tried':>7} {'clean':>7} {'accepted':>9} {'failures':>9}"]
    total = collections.Counter()
    for row in rows():
        total.update({k: row[k] for k in ("tried",) + OUTCOMES})
        lines.append(f"{row['loader']:<20} {row['tried']:>7} {row['clean']:>7} "
                     f"{row['accepted']:>9} {row['failures']:>9}")
    lines.append(f"{'total':<20} {total['tried']:>7} {total['clean']:>7} "
                 f"{total['accepted']:>9} {total['failures']:>9}")
    return lines


def write_json(path: str) -> None:
    """``{"settings": ..., "loaders": rows(), "failures": {loader: [case, ...]}}``."""
    report = {"settings": {"examples_per_test": SETTINGS.max_examples, "seed": SEED},
              "loaders": rows(), "failures": dict(FAILURES)}
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
