"""The outcome counts of the hostile-input fuzz suite per loader, as the end-of-session table
and the ``--fuzz-report`` JSON show them.  Standard library only: the controller of a parallel
run merges its workers' counts (:func:`export`, :func:`merge`) without the fuzz harness's
imports (:mod:`tests.helpers.fuzz` records into these)."""
import collections
import json

OUTCOMES = ("clean", "accepted", "failures")

# the settings of the session (set by tests.helpers.fuzz.configure), for the report
EXAMPLES: int | None = None
SEED: int | None = None

# loader -> outcome -> count; loader -> descriptions of the failures
COUNTS: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
FAILURES: dict[str, list[str]] = collections.defaultdict(list)


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


def export() -> dict:
    """The counts and failures as plain data (a parallel worker's, for the controller)."""
    return {"counts": {k: dict(v) for k, v in COUNTS.items()},
            "failures": {k: list(v) for k, v in FAILURES.items()}}


def merge(exported: dict | None) -> None:
    """Add a worker's :func:`export` to this process's counts."""
    for loader, counts in (exported or {}).get("counts", {}).items():
        COUNTS[loader].update(counts)
    for loader, failures in (exported or {}).get("failures", {}).items():
        FAILURES[loader].extend(failures)


def write_json(path: str) -> None:
    """``{"settings": ..., "loaders": rows(), "failures": {loader: [case, ...]}}``."""
    report = {"settings": {"examples_per_test": EXAMPLES, "seed": SEED},
              "loaders": rows(), "failures": dict(FAILURES)}
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
