"""Hostile cases of the partition format and ``distgnn-partition``: forged partitions that
look consistent (9), tracebacks on bad input (15), figures that cannot be (17), outputs on
one path or on an input (18), empty values and flags that do nothing (19), and the stream
stopped by signals or killed (22)."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np

from tests.helpers.hostile import (
    Case,
    Outcome,
    Runner,
    both,
    data,
    edit_array,
    forged,
    partition,
    tool,
    user_file,
    write_npz,
)


def set_meta(directory: Path, reseal: bool = False, **fields) -> None:
    """Change fields of ``meta.json``; with ``reseal``, also its ``fields_sha256`` (what a
    careful forger does; a directory without one gets none)."""
    meta = json.loads((directory / "meta.json").read_text())
    meta.update(fields)
    if reseal and "fields_sha256" in meta:
        from distgnn.data.partitions import fields_sha256

        meta["fields_sha256"] = fields_sha256(meta)
    (directory / "meta.json").write_text(json.dumps(meta))


def reseal_fields(directory: Path) -> None:
    """Recompute ``fields_sha256`` of ``meta.json`` after an edit of its fields."""
    set_meta(directory, reseal=True)


def leaf(directory: Path) -> int:
    """A local id, on partition 1, of a leaf (a split vertex whose root is elsewhere)."""
    return int(np.flatnonzero(np.load(directory / "part-00001" / "root_rank.npy") != 1)[0])


def root(directory: Path) -> int:
    """A local id, on partition 1, of a root."""
    return int(np.flatnonzero(np.load(directory / "part-00001" / "root_rank.npy") == 1)[0])


def at(index: int, value):
    """An array change: ``a[index] = value`` on a copy."""
    def change(a):
        a = a.copy()
        a[index] = value
        return a
    return change


def train_mask_at_leaf(directory):
    edit_array(directory, "part-00001/train_mask.npy", at(leaf(directory), True))


def leaf_features_changed(directory):
    v = leaf(directory)
    edit_array(directory, "part-00001/x.npy", at(v, np.load(directory / "part-00001/x.npy")[v]
                                                  + 0.5))


def root_points_elsewhere(directory):
    r = root(directory)
    edit_array(directory, "part-00001/root_local.npy", at(r, r + 1))


def more_classes(directory):
    set_meta(directory, num_classes=json.loads((directory / "meta.json").read_text())
             ["num_classes"] + 1)


def verify_case(name: str, forge, says: str, *extra, dataset: bool = False):
    """``distgnn-partition verify`` (with ``--dataset`` the input) of a forged 2-partition
    directory (``extra``: partitioner flags); it must exit 1 naming the problem."""
    def setup(tmp, run):
        write_npz(tmp / "d.npz", n=200)
        partition(run, tmp / "d.npz", 2, tmp / "p", *extra)
        forge(tmp / "p")

    argv = ("verify", "{tmp}/p") + (("--dataset", "{tmp}/d.npz") if dataset else ())
    return Case(9, name, tool("partition", *argv), setup, status=1, says=says)


CASES: list[Case] = []
add = CASES.append

# 9. forged partitions that look consistent: training checks each partition as it loads it
add(forged("a train mask set at a leaf", train_mask_at_leaf, "train_mask"))
add(forged("a leaf's features differ from its root's", leaf_features_changed,
           "other features"))
add(forged("a root that points at another vertex", root_points_elsewhere, "root_local"))
add(forged("num_classes raised by one in meta.json", more_classes, "fields_sha256"))
add(verify_case("verify: num_classes raised by one", more_classes, "fields_sha256"))
add(verify_case("verify --dataset: num_classes raised by one, resealed",
                lambda d: (more_classes(d), reseal_fields(d)), "num_classes", dataset=True))
add(verify_case("verify: an unknown vertex_order", lambda d: set_meta(
    d, reseal=True, vertex_order="spiral"), "vertex_order"))
add(verify_case("verify: 'given' on a reordered directory", lambda d: set_meta(
    d, reseal=True, vertex_order="given", vertex_order_requested="given"), "not increasing",
    "--order-vertices", "degree"))
add(verify_case("verify: a negative weight", lambda d: set_meta(
    d, reseal=True, weights=[-1.0, 1.0]), "weights", "--weights", "1,1"))
add(verify_case("verify: a weight of zero", lambda d: set_meta(
    d, reseal=True, weights=[0.0, 1.0]), "weights", "--weights", "1,1"))
add(verify_case("verify: split_vertices forged", lambda d: set_meta(
    d, reseal=True, split_vertices=0), "split vertices"))

# 15. no traceback, no crash: one line naming the flag
TINY = data("tiny.npz", n=6)  # 6 vertices: libra's greedy cut fills at most 6 partitions
add(Case(15, "--seed 2^64", tool("partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p",
                                 "--seed", 2**64), data(), says="--seed"))
add(Case(15, "--seed -1", tool("partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p",
                               "--seed", -1), data(), says="--seed"))


def api_seed(tmp, run: Runner) -> Outcome:
    return run.python(
        "import sys\n"
        "from distgnn.data.datasets import load\n"
        "from partition import PartitionError, vertex_cut\n"
        f"g = load({str(tmp / 'd.npz')!r}).graph\n"
        "try:\n"
        "    vertex_cut(g, 2, seed=2**64)\n"
        "except PartitionError as e:\n"
        "    print(e, file=sys.stderr)\n"
        "    sys.exit(2)\n")


add(Case(15, "vertex_cut(seed=2^64) from Python", api_seed, data(), says="--seed"))
add(Case(15, "more partitions than the graph fills",
         tool("partition", "{tmp}/tiny.npz", "--parts", 8, "--out", "{tmp}/p", "--method",
              "libra"), TINY, says="no vertices"))
add(Case(15, "more partitions than the graph fills, rcm order",
         tool("partition", "{tmp}/tiny.npz", "--parts", 8, "--out", "{tmp}/p",
              "--method", "libra", "--order-vertices", "rcm"), TINY, says="no vertices"))
add(Case(15, "a weight that leaves a partition empty",
         tool("partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p", "--method",
              "random", "--weights", "1,1e-9"), data(), says="--weights"))


# 17. figures printed that cannot be
def fair_shares(tmp, outcome):
    assert "inf" not in outcome.stdout and "Warning" not in outcome.stderr, outcome.stderr
    rows = [line.split() for line in outcome.stdout.splitlines() if line[:7].strip().isdigit()]
    assert len(rows) == 2 and all(row[-6] == "50.00" for row in rows), outcome.stdout
    meta = json.loads((tmp / "p" / "meta.json").read_text())
    assert meta["requested_shares"] == [0.5, 0.5], meta["requested_shares"]


def memory_not_zero(tmp, outcome):
    assert "predicted memory max 0 MiB" not in outcome.stdout, outcome.stdout


def split_counted(tmp, outcome):
    assert "split vertices 0.0 %" not in outcome.stdout, outcome.stdout


PARTITIONED = both(data(), lambda tmp, run: partition(run, tmp / "d.npz", 2, tmp / "p"))
add(Case(17, "--weights 1e308,1e308", tool("partition", "{tmp}/d.npz", "--parts", 2, "--out",
                                           "{tmp}/p", "--weights", "1e308,1e308"), data(),
         status=0, check=fair_shares))
add(Case(17, "a small graph's predicted memory", tool("partition", "{tmp}/d.npz", "--parts", 2,
                                                     "--out", "{tmp}/p"), data(), status=0,
         check=memory_not_zero))
add(Case(17, "--weights 1,1e-300", tool("partition", "{tmp}/d.npz", "--parts", 2, "--out",
                                        "{tmp}/p", "--weights", "1,1e-300"), data(),
         says="--weights"))
for flag, value in (("--width", -5), ("--width", 0), ("--hidden", 0), ("--layers", 0)):
    add(Case(17, f"inspect {flag} {value}", tool("partition", "inspect", "{tmp}/p", flag,
                                                 value), PARTITIONED, says=flag))
add(Case(17, "partition --hidden -1", tool("partition", "{tmp}/d.npz", "--parts", 2, "--out",
                                           "{tmp}/p", "--hidden", -1), data(), says="--hidden"))
add(Case(17, "inspect: split_vertices forged in meta.json",
         tool("partition", "inspect", "{tmp}/p"),
         both(PARTITIONED, lambda tmp, run: set_meta(tmp / "p", reseal=True, split_vertices=0)),
         status=0, check=split_counted))


# 18. two outputs on one path, an output that is an input, or a collision found after the work
def no_partitions(tmp, outcome):
    assert not (tmp / "p").exists(), "the partitions were written"


def edge_files(tmp, run):
    from tests.helpers.partitions import write_edge_files

    write_edge_files(tmp)


STREAM = ("partition", "{tmp}/edges.npy", "--features", "{tmp}/x.npy", "--labels",
          "{tmp}/y.npy", "--parts", 2, "--mode", "stream", "--no-progress")
add(Case(18, "--json equal to --out", tool("partition", "{tmp}/d.npz", "--parts", 2, "--out",
                                           "{tmp}/p", "--json", "{tmp}/p"), data(),
         says="--out and --json name the same path", check=no_partitions))
add(Case(18, "--json inside the --out it replaces", tool(
    "partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p", "--force", "--json",
    "{tmp}/p/s.json"), PARTITIONED, says="--json", keep=("p",)))
add(Case(18, "--out is the input, spelled with ./ and ../", tool(
    "partition", "{tmp}/./d.npz", "--parts", 2, "--out", "{tmp}/sub/../d.npz", "--force"),
    both(data(), lambda tmp, run: (tmp / "sub").mkdir()), says="which the run reads",
    keep=("d.npz",)))
add(Case(18, "--json a symbolic link to the input", tool(
    "partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p", "--json", "{tmp}/s.json"),
    both(data(), lambda tmp, run: (tmp / "s.json").symlink_to(tmp / "d.npz")),
    says="is DATASET", keep=("d.npz",), check=no_partitions))
add(Case(18, "--out inside the input directory", tool(
    "partition", "{tmp}/ogb", "--parts", 2, "--out", "{tmp}/ogb/p"),
    user_file("ogb/raw/edge.csv.gz", "0,1\n"), says="is inside DATASET", keep=("ogb",)))
add(Case(18, "inspect --json onto the directory's meta.json", tool(
    "partition", "inspect", "{tmp}/p", "--json", "{tmp}/p/meta.json"), PARTITIONED,
    says="is inside DIR", keep=("p",)))
add(Case(18, "stream: --out equal to --features", tool(
    *STREAM, "--out", "{tmp}/x.npy", "--force"), edge_files, says="--features",
    keep=("x.npy",)))
add(Case(18, "--json equal to the --dataset it reads", tool(
    "partition", "--dataset", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p", "--json",
    "{tmp}/d.npz"), data(), says="is --dataset", keep=("d.npz",), check=no_partitions))


# 19. an empty value, or a flag that does nothing, accepted
def said_what_auto_took(tmp, outcome):
    first = outcome.stdout.splitlines()[0]
    assert "(what --order-vertices auto takes when streaming)" in first, first
    assert "the two directions of an edge placed independently" in first, first


add(Case(19, "stream: --split 1", tool(*STREAM, "--out", "{tmp}/p", "--split", 1), edge_files,
         says="not --split 1", check=no_partitions))
add(Case(19, "stream: --order-vertices auto says what it took",
         tool(*STREAM, "--out", "{tmp}/p"), edge_files, status=0, check=said_what_auto_took))
add(Case(19, "--order with --method random", tool(
    "partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p", "--method", "random",
    "--order", "degree"), data(), says="--order degree would change nothing",
    check=no_partitions))
add(Case(19, "--no-keep-pairs with --method dbh", tool(
    "partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p", "--method", "dbh",
    "--no-keep-pairs"), data(), says="--no-keep-pairs would change nothing",
    check=no_partitions))
add(Case(19, "an empty DATASET", tool("partition", "", "--parts", 2, "--out", "{tmp}/p"),
         says="DATASET: the value is empty", check=no_partitions))
add(Case(19, "an empty --out", tool("partition", "{tmp}/d.npz", "--parts", 2, "--out", ""),
         data(), says="--out: the value is empty"))
add(Case(19, "an empty --json", tool("partition", "{tmp}/d.npz", "--parts", 2, "--out",
                                     "{tmp}/p", "--json", ""), data(),
         says="--json: the value is empty", check=no_partitions))
add(Case(19, "inspect of an empty DIR", tool("partition", "inspect", ""),
         says="DIR: the value is empty"))
add(Case(19, "verify of an empty DIR", tool("partition", "verify", ""),
         says="DIR: the value is empty"))
add(Case(19, "DATASET and --dataset both", tool(
    "partition", "{tmp}/d.npz", "--dataset", "{tmp}/e.npz", "--parts", 2, "--out", "{tmp}/p"),
    both(data(), data("e.npz", seed=1)), says="give the dataset once", check=no_partitions))


# 22. launching, signals and leftovers
def stream_argv(tmp, *extra) -> list[str]:
    return [str(a).replace("{tmp}", str(tmp)) for a in (*STREAM[1:], "--out", "{tmp}/p",
                                                        *extra)]


def signalled(at: str, sig: int, *extra):
    """A real stream held at ``at`` (see tests/helpers/partitions.py) gets a real ``sig``."""
    def go(tmp, run):
        from tests.helpers.partitions import held_stream_code, start_held

        proc = start_held(run.code_command(held_stream_code(at), stream_argv(tmp, *extra)),
                          run.env())
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
        return Outcome(proc.returncode, out, err)
    return go


def nothing_beside(tmp, outcome):
    left = [f.name for f in tmp.iterdir() if f.name.startswith(".")]
    assert not left, f"left beside the output: {left}"


def killed_then_rerun(tmp, run):
    from tests.helpers.partitions import held_stream_code, start_held

    proc = start_held(run.code_command(held_stream_code("assign"), stream_argv(tmp)), run.env())
    proc.kill()
    proc.communicate(timeout=120)
    assert any(f.name.startswith(".p.stream-") for f in tmp.iterdir()), "no work folder left"
    return run("partition", stream_argv(tmp))


def rerun_cleaned(tmp, outcome):
    nothing_beside(tmp, outcome)
    assert "left by an earlier run that was killed" in outcome.stdout, outcome.stdout


def work_folder_like(marker: bool):
    """A hidden folder named as a work folder for ``p``, with a spill file; with ``marker``
    one naming this (live) process as its writer."""
    def setup(tmp, run):
        import socket

        from partition.stream import WORK_MARKER, WORK_WRITER

        folder = tmp / ".p.stream-0123456789abcdef"
        (folder / "parts").mkdir(parents=True)
        (folder / "parts" / "00000.bin").write_bytes(b"\0" * 64)
        if marker:
            (folder / WORK_MARKER).write_text(json.dumps({
                "writer": WORK_WRITER, "pid": os.getpid(), "host": socket.gethostname(),
                "token": "0123456789abcdef"}))
    return setup


add(Case(22, "stream: SIGTERM mid-stream", signalled("assign", signal.SIGTERM), edge_files,
         status=128 + signal.SIGTERM, says="nothing was written to",
         check=lambda tmp, o: (nothing_beside(tmp, o), no_partitions(tmp, o))))
add(Case(22, "stream: Ctrl-C while writing the partitions",
         signalled("write", signal.SIGINT), edge_files, status=128 + signal.SIGINT,
         says="and any partly written copy of",
         check=lambda tmp, o: (nothing_beside(tmp, o), no_partitions(tmp, o))))
add(Case(22, "stream: SIGTERM while replacing --out keeps the old partitions",
         signalled("write", signal.SIGTERM, "--force"),
         both(edge_files, lambda tmp, run: run("partition", stream_argv(tmp))),
         status=128 + signal.SIGTERM, says="nothing was written to", keep=("p",),
         check=nothing_beside))
add(Case(22, "stream: SIGKILL, then a rerun removes the work folder", killed_then_rerun,
         edge_files, status=0, check=rerun_cleaned))
add(Case(22, "stream: a hand-made folder like a work folder is left alone",
         tool(*STREAM, "--out", "{tmp}/p"), both(edge_files, work_folder_like(False)),
         status=0, keep=(".p.stream-0123456789abcdef",)))
add(Case(22, "stream: a live run's work folder is left alone",
         tool(*STREAM, "--out", "{tmp}/p"), both(edge_files, work_folder_like(True)),
         status=0, keep=(".p.stream-0123456789abcdef",)))


# 24. leftovers and orphans after a signal or a failed start


def terminated_while_writing(out: str, *extra):
    """An in-memory cut into ``{tmp}/OUT`` that gets SIGTERM while it writes the
    partitions."""
    def go(tmp, run):
        from tests.helpers.partitions import held_second_item, start_held

        # held while it writes the second partition of an in-memory cut (its temporary
        # directory and lock file exist)
        held = ("import sys, time\nfrom partition import write\nfrom partition.cli import main\n"
                + held_second_item("write.partition_arrays") + "sys.exit(main(sys.argv[1:]))\n")
        argv = [tmp / "d.npz", "--parts", 2, "--out", tmp / out, "--no-progress", *extra]
        proc = start_held(run.code_command(held, argv), run.env())
        proc.send_signal(signal.SIGTERM)
        said, err = proc.communicate(timeout=120)
        return Outcome(proc.returncode, said, err)
    return go


def only_the_inputs(tmp, outcome):
    left = sorted(str(f.relative_to(tmp)) for f in tmp.rglob("*")
                  if f.name not in ("d.npz", "e.npz"))
    assert not left, f"left behind: {left}"


def no_lock_left(tmp, outcome):
    left = [f.name for f in tmp.iterdir() if f.name.endswith(".lock")]
    assert not left, f"lock file left: {left}"


add(Case(24, "--if-missing: SIGTERM while writing", terminated_while_writing(
    "sub/p", "--if-missing"),
         data(), status=128 + signal.SIGTERM, says="nothing was written to",
         check=only_the_inputs))
add(Case(24, "SIGTERM while writing in memory", terminated_while_writing("p"), data(),
         status=128 + signal.SIGTERM, says="removed any partly written copy",
         check=only_the_inputs))
add(Case(24, "--if-missing: a missing input leaves no folder and no lock",
         tool("partition", "{tmp}/absent.npz", "--parts", 2, "--out", "{tmp}/a/b/p",
              "--if-missing"), data(), says="absent.npz", check=only_the_inputs))
add(Case(24, "--if-missing: the lock file goes with the run",
         tool("partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p", "--if-missing",
              "--no-progress"), data(), status=0, check=no_lock_left))


# 25. silently wrong: a flag dropped or a result computed without a word
def seeded(seed):
    return lambda tmp, run: partition(run, tmp / "d.npz", 2, tmp / "p", "--seed", seed)


def part_removed(tmp, run):
    import shutil

    partition(run, tmp / "d.npz", 2, tmp / "p")
    shutil.rmtree(tmp / "p" / "part-00001")


def balanced(tmp, outcome):
    meta = json.loads((tmp / "p" / "meta.json").read_text())
    assert meta["edge_balance"] < 1.25, f"edge balance {meta['edge_balance']:.3f}"


def dangling_lock(tmp, run):
    (tmp / ".p.lock").symlink_to(tmp / "elsewhere" / "file")


def nothing_where_it_points(tmp, outcome):
    assert not (tmp / "elsewhere").exists(), "the lock followed the link"
    no_partitions(tmp, outcome)


IF_MISSING = ("partition", "{tmp}/d.npz", "--parts", 2, "--out", "{tmp}/p", "--if-missing",
              "--no-progress")
add(Case(25, "--if-missing takes another dataset's partitions as done", tool(*IF_MISSING),
         both(data(), data("e.npz", seed=1), lambda tmp, run: partition(
             run, tmp / "e.npz", 2, tmp / "p")), says="was cut from", keep=("p",)))
add(Case(25, "--if-missing takes partitions without part-00001 as done", tool(*IF_MISSING),
         both(data(), part_removed), says="incomplete or damaged", keep=("p",)))
add(Case(25, "--if-missing takes another --seed's partitions as done", tool(*IF_MISSING),
         both(data(), seeded(7)), says="--seed 7, not --seed 0", keep=("p",)))
add(Case(25, "--ranks-per-node 2 --method dbh unbalanced", tool(
    "partition", "rmat:scale=10,edge_factor=8", "--parts", 4, "--ranks-per-node", 2,
    "--method", "dbh", "--out", "{tmp}/p", "--no-progress"), status=0, check=balanced))
add(Case(25, "a lock file that is a dangling symbolic link", tool(*IF_MISSING),
         both(data(), dangling_lock), says="is a symbolic link", check=nothing_where_it_points))
add(Case(25, "a directory in the lock file's place", tool(*IF_MISSING),
         both(data(), lambda tmp, run: (tmp / ".p.lock").mkdir()), says="is a directory",
         keep=(".p.lock",), check=no_partitions))


def predicts_for_the_training_default(tmp, outcome):
    assert "MiB/rank for hidden 16, 2 layers, fp32" in outcome.stdout, outcome.stdout
    assert "MiB is fixed (runtime and model" in outcome.stdout, outcome.stdout


add(Case(25, "inspect predicts the memory of another model than distgnn-train's",
         tool("partition", "inspect", "{tmp}/p"), PARTITIONED, status=0,
         check=predicts_for_the_training_default))


# 26. a traceback or an unclear line where one line would do
add(Case(26, "--ranks-per-node 2 --method random refused with a wrong hint", tool(
    "partition", "{tmp}/d.npz", "--parts", 4, "--ranks-per-node", 2, "--method", "random",
    "--out", "{tmp}/p", "--no-progress"), data(n=200), status=0, check=balanced))
add(Case(26, "a partition directory given as DATASET", tool(
    "partition", "{tmp}/p", "--parts", 2, "--out", "{tmp}/q"), PARTITIONED,
    says="is a partition directory", keep=("p",)))
for name, cut_with, asked, says in [
        ("--if-missing --no-keep-pairs on a --keep-pairs directory", ("--keep-pairs",),
         ("--no-keep-pairs",), "was partitioned with --keep-pairs, not --no-keep-pairs as asked"),
        ("--if-missing on a --no-keep-pairs directory", ("--no-keep-pairs",), (),
         "was partitioned with --no-keep-pairs, not the default (no --keep-pairs or "
         "--no-keep-pairs) as asked"),
        ("--if-missing --weights on a directory of equal shares", (), ("--weights", "1,3"),
         "was partitioned with equal shares (no --weights), not --weights 1,3 as asked")]:
    add(Case(26, name, tool(*IF_MISSING, *asked),
             both(data(), lambda tmp, run, cut_with=cut_with: partition(
                 run, tmp / "d.npz", 2, tmp / "p", *cut_with)), says=says, keep=("p",)))
add(Case(26, "--parts auto on a node its ranks' fixed part fills", tool(
    "partition", "rmat:scale=12,edge_factor=16", "--parts", "auto", "--node-memory", 0.6,
    "--ranks-per-node", 2, "--out", "{tmp}/p", "--no-progress"),
    says="the fixed part of a rank alone", check=no_partitions))


def behind_a_holder(tmp, run):
    """``--if-missing`` started while another process holds the lock for 5 s."""
    import subprocess

    holder = subprocess.Popen(run.code_command(
        "import time\nfrom distgnn.storage import exclusive\n"
        f"with exclusive({str(tmp / 'p')!r}):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(5)\n"), env=run.env(), text=True, stdout=subprocess.PIPE)
    assert holder.stdout.readline() == "held\n"
    try:
        outcome = run("partition", [a.replace("{tmp}", str(tmp)) for a in map(str, IF_MISSING[1:])])
    finally:
        holder.wait(timeout=60)
    outcome.holder = holder.pid
    return outcome


def said_who_holds_it(tmp, outcome):
    said = outcome.error_lines()
    assert len(said) == 1 and "waiting for the lock" in said[0], said
    assert f"process {outcome.holder} on" in said[0], said


add(Case(26, "a waiter behind a long holder says nothing", behind_a_holder, data(),
         status=0, check=said_who_holds_it, slow=True))
