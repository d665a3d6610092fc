"""Partitioning in the tests: hand-made Libra streams, partition directories written as the
CLI writes them, layout checks, and the partition CLI run in this process.

Hand-made Libra cases build a CSR whose stream order is known: with ``order="given"`` the
entries are streamed row by row (destination), columns as stored, so a list of edges whose
destinations never decrease is streamed exactly in list order (see :func:`stream_csr`).
"""

import signal
import subprocess

import numpy as np

import partition
from partition.assign import assign_edges
from partition.cli import main as cli_main
from partition.layout import order_layout
from partition.stats import counts_from_layout, summarize
from partition.vertex_cut import vertex_cut
from partition.write import write_dataset

def held_second_item(generator: str) -> str:
    """Python lines that replace the generator function ``generator`` (``module.name``) by
    one that says "held" on stdout and waits before its second item."""
    return (f"parts = {generator}\n"
            "def held(*args, **kw):\n"
            "    for k, item in enumerate(parts(*args, **kw)):\n"
            "        if k == 1:\n"
            "            print('held', flush=True)\n"
            "            time.sleep(600)\n"
            "        yield item\n"
            f"{generator} = held\n")


# A program running ``distgnn-partition`` (its argv) that stops where the stream is held: in
# pass 3 ("assign"), after the first partition was written ("write"), or once the directory
# is in place ("written"), says "held" on stdout and waits there, so that a signal arrives
# at a known point of a real run.
HELD_STREAM = {
    "written": "write = stream.write_partitions\n"
               "def held(*args, **kw):\n"
               "    write(*args, **kw)\n"
               "    print('held', flush=True)\n"
               "    time.sleep(600)\n"
               "stream.write_partitions = held\n",
    "assign": "def held(*args, **kw):\n"
              "    print('held', flush=True)\n"
              "    time.sleep(600)\n"
              "stream.GreedyStream.assign = held\n",
    "write": held_second_item("stream.streamed_part_arrays")}


def held_stream_code(at: str) -> str:
    """The Python program of :data:`HELD_STREAM` for ``at``."""
    return ("import sys, time\nfrom partition import stream\nfrom partition.cli import main\n"
            + HELD_STREAM[at] + "sys.exit(main(sys.argv[1:]))\n")


def start_held(command: list[str], env: dict | None = None) -> subprocess.Popen:
    """``command`` (a :func:`held_stream_code` program) started with SIGINT as a foreground
    process has it (a shell running the suite in the background makes its children ignore
    it); returns once the program said "held"."""
    proc = subprocess.Popen([str(c) for c in command], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    while (line := proc.stdout.readline()) != "held\n":
        if not line:
            proc.wait()
            raise AssertionError(f"the held stream ended first: {proc.stderr.read()}")
    return proc


def write_edge_files(folder, n: int = 400, e: int = 3000, seed: int = 0):
    """A binary edge file ``edges.npy`` with ``x.npy`` and ``y.npy`` in ``folder``; returns
    the three paths."""
    from distgnn.data.binary_edges import EdgeFileWriter

    rng = np.random.default_rng(seed)
    writer = EdgeFileWriter(folder / "edges.npy", e)
    writer.write(rng.integers(0, n, e), rng.integers(0, n, e))
    writer.close()
    np.save(folder / "x.npy", rng.standard_normal((n, 5), dtype=np.float32))
    np.save(folder / "y.npy", rng.integers(0, 3, n))
    return folder / "edges.npy", folder / "x.npy", folder / "y.npy"


RMAT = "rmat:scale=12,edge_factor=8,features=4,classes=3,seed=1"
SMALL_RMAT = "rmat:scale=8,edge_factor=4,features=3,classes=2,seed=2"
METHODS = ("libra", "hdrf", "random", "dbh", "ne")

from tests.helpers.graphs import out_degrees


def stream_csr(edges, num_nodes):
    """``(indptr, indices)`` streamed by Libra (order "given") exactly in ``edges`` order."""
    src = np.array([s for s, _ in edges], np.int64)
    dst = np.array([d for _, d in edges], np.int64)
    assert np.all(np.diff(dst) >= 0), "destinations must not decrease"
    indptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=num_nodes), out=indptr[1:])
    return indptr, src.astype(np.int32)


def libra(edges, num_nodes, num_parts, seed):
    indptr, indices = stream_csr(edges, num_nodes)
    part = assign_edges(indptr, indices, num_parts, method="libra", seed=seed, order="given",
                        keep_pairs=False)
    assert part.dtype == np.int32 and part.shape == (len(edges),)
    return part, indptr, indices


def partitions_of(member_row, num_parts):
    return {p for p in range(num_parts) if (int(member_row[p >> 6]) >> (p & 63)) & 1}


def edge_keys(src, dst, n):
    return np.asarray(dst, np.int64) * n + np.asarray(src, np.int64)


def write_dir(ds, out, num_parts, method="libra", seed=0, roots="balanced", order="random",
              keep_pairs=None, force=False, order_vertices="given"):
    """Partition ``ds`` and write it to ``out`` the way the CLI does; returns the layout."""
    graph = ds.graph
    layout = vertex_cut(graph, num_parts, method, seed, order, roots, keep_pairs)
    ordering = order_layout(layout, graph.indptr, graph.indices, order_vertices)
    write_dataset(out, ds, layout, {"method": method, "seed": seed, **ordering}, force=force)
    return layout


def load_all(directory, mmap=True):
    meta = partition.read_meta(directory)
    return [partition.load(directory, p, mmap=mmap) for p in range(meta["num_parts"])]


def check_layout(graph, layout):
    """Edge partitions in range; vertex sets = endpoints (+ isolated, each once); roots."""
    P, n = layout.num_parts, graph.num_nodes
    src, dst = graph.edges()
    part = layout.part
    assert part.shape == (graph.num_edges,)
    assert part.min(initial=0) >= 0 and part.max(initial=0) < P
    np.testing.assert_array_equal(layout.edge_counts, np.bincount(part, minlength=P))
    holds = np.zeros((P, n), bool)
    holds[part, src] = True
    holds[part, dst] = True
    placed = np.zeros((P, n), bool)
    for p in range(P):
        ids = layout.vertices(p)
        if layout.vertex_order == "given":
            assert np.all(np.diff(ids) > 0)
        assert len(np.unique(ids)) == len(ids)
        placed[p, ids] = True
    isolated = (graph.in_degrees() + out_degrees(graph)) == 0
    np.testing.assert_array_equal(placed[:, ~isolated], holds[:, ~isolated])
    np.testing.assert_array_equal(placed[:, isolated].sum(axis=0), 1)
    # every vertex has exactly one root, on a partition holding it, at the right local id
    assert placed[layout.root, np.arange(n)].all()
    for p in range(P):
        ids = layout.vertices(p)
        mine = layout.root[ids] == p
        np.testing.assert_array_equal(layout.root_local[ids[mine]], np.flatnonzero(mine))
    np.testing.assert_array_equal(layout.clones(), placed.sum(axis=0))


def stats_of(layout):
    return summarize(counts_from_layout(layout), layout.num_nodes,
                     int(np.count_nonzero(layout.clones() > 1)))


def run_cli(argv):
    try:
        return cli_main([str(a) for a in argv])
    except SystemExit as e:  # argparse errors exit from inside main
        return e.code


def assert_one_line_error(rc, err, *fragments):
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("distgnn-partition"), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], err

