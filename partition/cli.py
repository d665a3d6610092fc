"""``distgnn-partition``: partition a dataset to disk, ``inspect`` or ``verify`` a directory.

    distgnn-partition DATASET|--dataset DATASET --parts P --out DIR
                      [--method ne|libra|hdrf|random|dbh] [--memory GIB]
                      [--seed S] [--order degree|random|given] [--roots random|balanced]
                      [--force | --if-missing]
                      [--weights W0,W1,...] [--order-vertices auto|given|degree|rcm]
                      [--symmetrize] [--split-file FILE]
    distgnn-partition inspect DIR [--width D] [--hidden H] [--layers L] [--precision P]
        [--json FILE]
    distgnn-partition verify DIR [--dataset SPEC]

:func:`partition_dataset` is what it does once the dataset is loaded, for any
:class:`~distgnn.data.graph.NodeDataset` (``partition.pyg.to_partitions`` calls it too).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from distgnn.data.binary_edges import edge_count
from distgnn.data.datasets import load as load_dataset
from distgnn.data.datasets import locate
from distgnn.data.generators import GENERATORS
from distgnn.data.graph import GraphError
from distgnn.data.ordering import AUTO_WIDTH, CHOICES
from distgnn.data.partition_checks import check_files, verify
from distgnn.data.partition_writing import check_target
from distgnn.data.partitions import (
    EDGE_ORDERS,
    FORMAT_VERSION,
    METHODS,
    ROOTS,
    check_weights,
    is_partition_directory,
    is_partition_source,
    load,
    read_meta,
    requested_shares,
    unchecked_fields_note,
)
from distgnn.errors import DistGNNError
from distgnn.nn.config import MAX_LAYERS, ModelConfig
from distgnn.placement import PRECISIONS
from distgnn.program import (
    DefaultsHelpFormatter,
    OneLineParser,
    dataset_file_flags,
    interruptible,
    run_guarded,
)
from distgnn.run.memory import available_bytes, memory_rates, saved_activation_bytes
from distgnn.storage import (
    check_distinct_outputs,
    check_json_output,
    exclusive,
    format_bytes,
    write_json,
)
from partition.assign import HASHED, check_seed, stream_order_name
from partition.layout import Layout, order_layout
from partition.stats import (
    MAX_CLONE_SET_PARTS,
    PartCounts,
    clone_sets,
    clone_sets_of,
    counts_from_layout,
    estimated_memory,
    format_summary,
    limited_plans,
    model_words,
    summarize,
)
from partition.stream import Stopped, Writing, partition_edge_file, stop_on_signals, vertex_data
from partition.vertex_cut import PartitionError, vertex_cut
from partition.write import write_dataset

PROG = "distgnn-partition"
RUN = ModelConfig()  # distgnn-train's model, whose memory the statistics predict by default
PROGRESS_MIN_EDGES = 1_000_000
MODES = ("auto", "memory", "stream")
# what the in-memory path holds per edge at its peak (the loaded edges, the CSR, the
# partition of every entry and ne's adjacency or Libra's stream order) and per vertex
# besides the features (ne, the default, rose 3.9 GiB above the loaded graph on R-MAT
# 2^22 x 16, 1.22x Libra's; this estimate of that graph is about 8 GiB)
MEMORY_BYTES_PER_EDGE = 64
MEMORY_BYTES_PER_VERTEX = 120


def count(high: int | None = None):
    """An argparse type: an integer from 1 (to ``high``); anything else is one line."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < 1 or (high is not None and value > high):
            raise argparse.ArgumentTypeError("must be an integer from 1" + (
                f" to {high}" if high else "") + f", got {text!r}")
        return value
    return parse


def _stat_flags(parser: argparse.ArgumentParser, cuts: bool = False) -> None:
    """The flags of the statistics (``cuts``: of the partitioning command, where
    ``--ranks-per-node`` also shapes the cut)."""
    parser.add_argument("--width", type=count(), default=128,
                        help="feature width for the cd-0 exchange volume (default 128)")
    parser.add_argument("--hidden", type=count(), default=RUN.hidden,
                        help="the training run's --hidden for the predicted memory per rank "
                             f"(default {RUN.hidden}, distgnn-train's)")
    parser.add_argument("--layers", type=count(MAX_LAYERS), default=RUN.layers,
                        help="the training run's --layers for the predicted memory per rank "
                             f"(default {RUN.layers}, distgnn-train's)")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32",
                        help="the training run's --precision for the predicted memory per rank "
                             "(bf16-mixed keeps its saved activations in bf16; default fp32)")
    parser.add_argument("--ranks-per-node", type=count(), default=1, metavar="K",
                        help="with K > 1, also count the busiest node link's rows per "
                             "alltoallv of cd-0's flat and node-aware exchanges "
                             "(--exchange-topology), ranks 0..K-1 on the first node and so "
                             "on (up to 62 partitions; default 1)" + (
                                 "; and cut in two levels: the edges across the P/K nodes "
                                 "first, then each node's across its K ranks, so that a "
                                 "vertex's clones gather on few nodes and the node-aware "
                                 "exchange sends fewer rows over the links, its roots "
                                 "spread to even out the links (not when streaming)"
                                 if cuts else ""))
    parser.add_argument("--json", metavar="FILE",
                        help="also write the statistics as JSON (default: printed only)")


def parts_count(text: str) -> int | str:
    """``--parts``: a count (checked with the other options) or ``auto``."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of partitions or auto, got "
                                         f"{text!r}") from None


def weight_list(text: str) -> list[float]:
    """``--weights 1,1,2,4`` -> ``[1.0, 1.0, 2.0, 4.0]`` (count and sign are checked later)."""
    try:
        return [float(w) for w in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of "
                                         "numbers") from None


def partition_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        usage="distgnn-partition DATASET|--dataset DATASET --parts P --out DIR [options]\n"
              "       distgnn-partition inspect DIR [--width D] [--hidden H] [--layers L] "
              "[--json FILE]\n"
              "       distgnn-partition verify DIR [--dataset DATASET]",
        description="Vertex-cut partitioning of a graph into a partition directory "
                    f"(format version {FORMAT_VERSION}). Subcommands: 'inspect DIR' prints "
                    "the statistics of a directory, 'verify DIR' checks it.",
        formatter_class=DefaultsHelpFormatter)
    p.add_argument("dataset", nargs="?", metavar="DATASET",
                   help="bundled name (cora), .npz path, edge list, OGB directory or "
                        "generator spec such as rmat:scale=20,edge_factor=16 (or give it as "
                        "--dataset, as the other tools take it)")
    p.add_argument("--dataset", dest="dataset_flag", metavar="DATASET",
                   help="the same as the positional DATASET: give one of the two")
    # required: "no default" said, or the help formatter would append "(default: none)"
    p.add_argument("--parts", type=parts_count, required=True,
                   help="number of partitions P (ranks), or auto: the fewest of K, 2K, 4K, "
                        "... (K: --ranks-per-node) whose memory per rank, times K, fits "
                        "--node-memory, as the memory model estimates it before cutting (for "
                        "--hidden, --layers, --precision) and checks on the one cut made (the "
                        "line printed says why): required, no default")
    p.add_argument("--node-memory", type=float, metavar="GIB",
                   help="with --parts auto: the memory of a node the ranks may take, in GiB "
                        "(default: what this machine has available now)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="partition directory to create: required, no default")
    p.add_argument("--method", choices=METHODS,
                   help="ne: neighbourhood expansion (Zhang et al.), each partition grown "
                        "from seed vertices along the edges whose ends it holds (replicates "
                        "least, about 2.5x libra's time; in memory it holds the whole graph; "
                        "streamed, the edges between vertices of low degree that --memory "
                        "holds, the rest streamed by libra); libra: greedy vertex-cut in one "
                        "pass; hdrf: greedy scoring of partial degrees and balance (Petroni "
                        "et al.); random: edge hash; dbh: hash of the lower-degree endpoint "
                        "(default: ne in memory, libra when streaming)")
    p.add_argument("--memory", type=float, metavar="GIB",
                   help="with --method ne, streamed (--mode stream, or auto choosing it): "
                        "the memory in GiB its expansion may hold; the edges between vertices "
                        "of degree up to the largest bound that fits are expanded, the others "
                        "streamed by libra against that cut (default: half of the memory "
                        "available when the stream starts)")
    p.add_argument("--seed", type=int, default=0,
                   help="seeds order, ties, roots: 0 to 2^63-1 (default 0)")
    p.add_argument("--order", choices=EDGE_ORDERS,
                   help="stream order of libra and hdrf: degree (rows in increasing degree, "
                        "so low-degree vertices are placed whole before the hubs arrive; "
                        "libra's default), random (a seeded permutation; hdrf's default) or "
                        "given (as stored, row by row, a pair at its first entry)")
    p.add_argument("--weights", type=weight_list, metavar="W0,W1,...",
                   help="relative capacity of each rank, one positive number per partition: "
                        "partition p is asked for the share W_p / sum(W) of the edges, e.g. "
                        "1,1,2,4 gives the last rank half the edges and the first two an "
                        "eighth each (for ranks of unequal speed, such as a GPU rank). "
                        "Libra balances edges / weight; random and dbh hash into buckets of "
                        "those sizes (default: equal)")
    p.add_argument("--roots", choices=ROOTS, default="balanced",
                   help="root clone of each split vertex: balanced across partitions "
                        "(default; with --ranks-per-node K, across the node links first) "
                        "or uniformly random")
    p.add_argument("--order-vertices", choices=CHOICES, default="auto",
                   help="local vertex order of each partition, for cache reuse in aggregation: "
                        "degree (most-read feature rows first), rcm (reverse Cuthill-McKee: "
                        "neighbours get nearby ids), given (increasing global id), or auto "
                        "(default): given when a partition's features fit in the last-level "
                        f"cache, else the fastest of the three in a {AUTO_WIDTH}-wide SpMM "
                        "trial on the largest partition. Recorded in meta.json; training "
                        "results are in global ids whatever the order")
    p.add_argument("--keep-pairs", action=argparse.BooleanOptionalAction, default=None,
                   help="both directions of an undirected edge in one partition, or (no-) "
                        "the two directions placed independently (default: on for "
                        "symmetric graphs)")
    p.add_argument("--mode", choices=MODES, default="auto",
                   help="memory: load the whole graph, then partition (fastest); stream: "
                        "out of core, for a binary edge file (.npy [E, 2] int32/int64) with "
                        "--features and --labels .npy files, holding per-vertex state only "
                        "(libra in degree order, or ne's hybrid within --memory; local vertex "
                        "order given, equal weights); "
                        "auto (default): stream an edge file when the in-memory path would "
                        "need more than half of the available memory")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out if it is a partition directory this tool "
                        "wrote (default: an existing --out is refused)")
    p.add_argument("--if-missing", action="store_true",
                   help="write --out only when it does not exist; when it does, check that it "
                        "is a complete partition directory (every file's checksum) cut from "
                        "this dataset with these options, say so and do nothing, else refuse; "
                        "jobs that run this at once take turns (a lock file .DIR.lock beside "
                        "it, removed after), so one partitions and the others use its "
                        "directory (what a batch job's first start runs)")
    p.add_argument("--split", type=int, default=0,
                   help="which of the fixed splits of an .npz holding several to use "
                        "(default 0: the first, or the only one; a streamed edge file has "
                        "none: give --split-file)")
    dataset_file_flags(p)
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                   help="progress bars when stderr is a terminal (on large graphs)")
    _stat_flags(p, cuts=True)
    return p


def inspect_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=f"{PROG} inspect",
                      description="Statistics of a partition directory.",
                      formatter_class=DefaultsHelpFormatter)
    p.add_argument("directory", metavar="DIR", help="partition directory")
    _stat_flags(p)
    p.add_argument("--memory-limit", type=float, metavar="GIB",
                   help="the training run's --memory-limit: also say whether its ranks "
                        "train in memory or stream through disk, and then each rank's RAM, "
                        "disk and the bytes an epoch reads and writes (GraphSAGE-gcn)")
    return p


def verify_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=f"{PROG} verify",
                      description="Check a partition directory: format version, checksums, "
                                  "and consistency (edges, vertices, roots, split tables). "
                                  "Exits 1 on any problem.",
                      formatter_class=DefaultsHelpFormatter)
    p.add_argument("directory", metavar="DIR", help="partition directory")
    p.add_argument("--dataset", help="also check that the partitions hold exactly this "
                                     "dataset's edges, and meta.json its sizes and number of "
                                     "classes (any DATASET the partitioner accepts; default: "
                                     "the directory is checked on its own)")
    return p


def _emit(stats: dict, args) -> None:
    print(format_summary(stats))
    if args.json:
        write_json(args.json, stats, PROG)


@dataclasses.dataclass
class Partitioned:
    """What :func:`partition_dataset` did: the statistics of the cut (``stats``, see
    :func:`~partition.stats.summarize`), the local vertex order (``ordering``, what
    :func:`~partition.layout.order_layout` returned) and the seconds of each phase."""

    stats: dict
    ordering: dict
    seconds: dict


def method_of(args, streamed: bool) -> str:
    """The method ``args`` asks for: ``--method``, else the default, ``"ne"`` in memory
    (it replicates least, see docs/results/partitioners.md) and ``"libra"`` when streamed
    (one pass in the memory of the per-vertex state; ne's hybrid needs a budget)."""
    return args.method or ("libra" if streamed else "ne")


def check_options(out, parts: int, seed: int, weights, force: bool, method: str = "ne",
                  order: str | None = None, keep_pairs: bool | None = None):
    """Check the options of a cut that need no graph; returns the checked ``weights``.

    These checks run before a long load; the ``weights`` returned are None for equal ones.
    An option the ``method`` has no use for is refused: random and dbh hash each edge, so
    they have no stream ``order``, and they place both directions of an edge alike
    (``keep_pairs`` cannot change that)."""
    if parts < 1:  # vertex_cut checks P > E
        raise PartitionError(f"--parts must be at least 1, got {parts}")
    check_seed(seed)
    if method in HASHED:
        unused = [flag for flag, given in (
            (f"--order {order}", order is not None),
            (f"--{'' if keep_pairs else 'no-'}keep-pairs", keep_pairs is not None)) if given]
        if unused:
            raise PartitionError(
                f"{' and '.join(unused)} would change nothing with --method {method}: it "
                "hashes each edge (no stream order) and places both directions of an edge "
                "alike; leave it out, or use --method libra or hdrf")
    if method == "ne" and order is not None:
        raise PartitionError(f"--order {order} would change nothing with --method ne: it "
                             "grows each partition along the graph's edges (no stream "
                             "order); leave it out, or use --method libra or hdrf")
    check_target(out, force)
    return None if weights is None else check_weights(weights, parts)


def partition_dataset(data, out, parts: int, *, method: str = "ne", seed: int = 0,
                      order: str | None = None, roots: str = "balanced",
                      keep_pairs: bool | None = None, weights=None,
                      order_vertices: str = "auto", force: bool = False,
                      progress: bool = False, width: int = 128, hidden: int = RUN.hidden,
                      layers: int = RUN.layers, precision: str = "fp32",
                      ranks_per_node: int = 1, source: dict | None = None,
                      layout: Layout | None = None) -> Partitioned:
    """Vertex-cut of the NodeDataset ``data`` into ``parts`` partitions, written to ``out``.

    ``out`` is the partition directory; this is what ``distgnn-partition`` does after
    loading (the keywords are its flags).  ``progress`` shows bars on a terminal for large
    graphs; ``width``, ``hidden``, ``layers`` and ``precision`` size the predicted exchange
    volume and memory of ``stats``; ``ranks_per_node`` K > 1 cuts in two levels, across
    nodes of K consecutive ranks and then within each
    (:func:`~partition.vertex_cut.two_level_parts`), and adds the node links to ``stats``.
    ``source`` (:func:`source_identity`) is recorded in ``meta.json``; ``layout``: the cut
    of these arguments when it is made already (``--parts auto``'s)."""
    weights = check_options(out, parts, seed, weights, force, method, order, keep_pairs)
    shares = None if weights is None else requested_shares(weights)
    started = time.perf_counter()
    graph = data.graph
    show = progress and sys.stderr.isatty() and graph.num_edges >= PROGRESS_MIN_EDGES
    if layout is None:
        with tqdm(total=graph.num_edges, unit="edge", unit_scale=True, disable=not show,
                  desc=f"{method} P={parts}", file=sys.stderr) as bar:
            layout = vertex_cut(graph, parts, method, seed, order, roots, keep_pairs,
                                progress=bar.update, weights=weights,
                                ranks_per_node=ranks_per_node)
    assigned = time.perf_counter()
    with tqdm(total=parts, unit="part", disable=not show, desc="ordering",
              file=sys.stderr) as bar:
        ordering = order_layout(layout, graph.indptr, graph.indices, order_vertices,
                                progress=bar.update)
    ordered = time.perf_counter()
    stats = summarize(counts_from_layout(layout), graph.num_nodes,
                      int(np.count_nonzero(layout.clones() > 1)), width=width,
                      num_features=data.num_features, num_classes=data.num_classes,
                      hidden=hidden, layers=layers, shares=shares, sets=clone_sets(layout),
                      ranks_per_node=ranks_per_node, precision=precision)
    settings = {"method": method, "seed": seed, "order": stream_order_name(method, order),
                "roots": roots, **ordering,
                **({"ranks_per_node": ranks_per_node} if ranks_per_node > 1 else {}),
                **({"keep_pairs": keep_pairs} if keep_pairs is not None else {}),
                **({"source": source} if source is not None else {})}
    if weights is not None:
        settings.update(weights=weights.tolist(), requested_shares=shares.tolist())
    with tqdm(total=parts, unit="part", disable=not show, desc="writing",
              file=sys.stderr) as bar:
        write_dataset(out, data, layout, settings, force, progress=bar.update)
    done = time.perf_counter()
    return Partitioned(stats, ordering, {"partitioning": assigned - started,
                                         "ordering": ordered - assigned,
                                         "writing": done - ordered})


def choose_mode(args) -> tuple[str, str]:
    """``(mode, why)``: ``"stream"`` or ``"memory"`` for ``args.mode`` and the dataset."""
    edge_file = str(args.dataset).endswith(".npy")
    if args.mode == "memory" or (args.mode == "auto" and not edge_file):
        return "memory", "asked" if args.mode == "memory" else "not a binary edge file"
    if not edge_file:
        raise PartitionError("--mode stream needs a binary edge file (.npy [E, 2]) as DATASET")
    rows = np.load(args.features, mmap_mode="r") if args.features else None
    need = (MEMORY_BYTES_PER_EDGE * edge_count(args.dataset) + (MEMORY_BYTES_PER_VERTEX + (
        0 if rows is None else 2 * rows[:1].nbytes)) * (0 if rows is None else len(rows)))
    have = available_bytes("cpu")
    why = (f"the in-memory path needs about {format_bytes(need)}, "
           f"{format_bytes(have)} available")
    if args.mode == "auto" and need <= have / 2:
        return "memory", why
    unsupported = [flag for flag, used in (
        (f"--method {args.method}", args.method not in (None, "libra", "ne")),
        ("--order " + str(args.order), args.order not in (None, "degree")),
        ("--weights", args.weights is not None), ("--keep-pairs", bool(args.keep_pairs)),
        ("--order-vertices " + args.order_vertices,
         args.order_vertices not in ("auto", "given")),
        ("--symmetrize", args.symmetrize), (f"--split {args.split}", args.split != 0),
        ("--parts auto", args.parts == "auto"),
        (f"--ranks-per-node {args.ranks_per_node}", args.ranks_per_node > 1)) if used]
    if unsupported:
        raise PartitionError(f"streaming ({why}) takes libra in degree order or ne, equal "
                             "weights, "
                             "the given vertex order, the edges as the file gives them and "
                             "a split from --split-file only; not "
                             + ", ".join(unsupported))
    return "stream", why


def stream_main(args, why: str) -> int:
    """``distgnn-partition`` out of core (:mod:`partition.stream`); a stop signal raises
    :class:`~partition.stream.Stopped`, which says what was removed."""
    expansion = None
    if args.method == "ne":
        expansion = (int(args.memory * 2**30) if args.memory is not None
                     else available_bytes("cpu") // 2)
    # what the stream does where the in-memory path would have chosen (said, not silent)
    cut = ("libra in degree order" if expansion is None else
           f"ne on the edges between vertices of low degree within {format_bytes(expansion)}, "
           "libra in degree order for the others")
    print(f"streaming {args.dataset} from disk ({why}): {cut}, local vertex "
          "order given" + (" (what --order-vertices auto takes when streaming)"
                           if args.order_vertices == "auto" else "")
          + ", the two directions of an edge placed independently", flush=True)
    data = vertex_data(args.features, args.labels, args.split_file)
    total = 3 * edge_count(args.dataset)
    show = args.progress and sys.stderr.isatty()
    with tqdm(total=total, unit="edge", unit_scale=True, disable=not show,
              desc=f"{args.method} P={args.parts} (3 passes)", file=sys.stderr) as bar:
        meta = partition_edge_file(args.dataset, data, args.out, args.parts,
                                   seed=args.seed, roots=args.roots, force=args.force,
                                   log=lambda line: print(line, flush=True),
                                   progress=bar.update, source=source_identity(args),
                                   expansion_bytes=expansion)
    counts, split, sets = counts_of_directory(args.out)
    stats = summarize(counts, meta["num_nodes"], split, width=args.width,
                      num_features=meta["num_features"], num_classes=meta["num_classes"],
                      hidden=args.hidden, layers=args.layers, sets=sets,
                      ranks_per_node=args.ranks_per_node, precision=args.precision)
    _emit(stats, args)
    seconds = meta["seconds"]
    print(f"wrote {args.out} in {sum(seconds.values()):.1f} s (partitioning "
          f"{seconds['partitioning']:.1f} s, writing {seconds['writing']:.1f} s)")
    return 0


def dataset_of(args) -> tuple[str, str]:
    """The dataset spec given once, as the positional DATASET or as --dataset, and which of
    the two named it."""
    if args.dataset is not None and args.dataset_flag is not None:
        raise PartitionError(f"DATASET {args.dataset} and --dataset {args.dataset_flag}: give "
                             "the dataset once, as DATASET or as --dataset")
    if args.dataset is None and args.dataset_flag is None:
        raise PartitionError("no dataset: give DATASET (or --dataset DATASET)")
    if args.dataset is not None:
        return args.dataset, "DATASET"
    return args.dataset_flag, "--dataset"


def input_path(spec: str) -> Path | None:
    """The file or directory the dataset ``spec`` is read from, found as
    :func:`distgnn.data.datasets.load` finds it (a bare name is a bundled dataset first);
    ``None`` for a generator or a path that does not exist (loading says so)."""
    if spec.partition(":")[0] in GENERATORS:
        return None
    try:
        with locate(spec) as path:
            return path
    except GraphError:
        return None


def check_statistics_output(json_path: str | None, out: str) -> None:
    """Refuse a ``--json`` inside ``--out``: a partition directory holds its own files only
    (a file of anyone else's in it would make ``--force`` refuse to replace it)."""
    if json_path and Path(os.path.realpath(out)) in Path(os.path.realpath(json_path)).parents:
        raise PartitionError(f"--json {json_path} is inside --out {out}, which holds the "
                             "partition files only: write the statistics elsewhere")


def check_not_partitions(spec: str, given_as: str) -> None:
    """Refuse a partition directory given as the dataset: it is this tool's output, read by
    ``inspect``, ``verify`` and training, not a dataset to cut (it would be taken for an OGB
    directory, and its error would name files an OGB directory holds)."""
    path = input_path(spec)
    if path is not None and is_partition_source(path):
        raise PartitionError(
            f"{given_as} {spec} is a partition directory (what distgnn-partition writes), not "
            f"a dataset: see it with '{PROG} inspect {spec}', check it with '{PROG} verify "
            f"{spec}', train on it with 'distgnn-train --partitions {spec}', or give the "
            "dataset it was cut from to cut it again")


def _path_identity(path: Path) -> dict:
    """Where a file or directory read as an input is, and what tells a later change of it:
    its bytes and latest modification (over the files under a directory)."""
    files = [path] if not path.is_dir() else [f for f in path.rglob("*") if f.is_file()]
    stats = [f.stat() for f in files]
    return {"path": os.path.realpath(path), "bytes": sum(st.st_size for st in stats),
            "mtime_ns": max((st.st_mtime_ns for st in stats), default=0)}


def source_identity(args) -> dict:
    """What ``meta.json`` records of the data a directory was cut from (``source``).

    The dataset (a generator spec as given; a file or directory by :func:`_path_identity`),
    the side files that change its features, labels or split, and the flags that change
    what is loaded, so that ``--if-missing`` can tell a directory cut from these data, as
    they are now, from any other without loading them."""
    spec = args.dataset
    path = input_path(spec)
    files = {"--features": args.features, "--labels": args.labels,
             "--split-file": args.split_file}
    return {"dataset": {"spec": spec} if path is None else _path_identity(path),
            **{flag: _path_identity(Path(name)) for flag, name in files.items()
               if name is not None},
            "split": args.split, "symmetrize": bool(args.symmetrize)}


def _requested_settings(args, meta: dict) -> dict:
    """The fields of ``meta.json`` that these flags would record, by flag, as ``(field,
    value)``; ``None``: a field recorded only when not the default (``meta``: the
    directory's, for what a choice made at run time, not asked for, took)."""
    streamed = bool(meta.get("streamed"))
    vertex_order = ("given" if streamed and args.order_vertices == "auto"
                    else args.order_vertices)
    method = method_of(args, streamed)
    return {"--parts": ("num_parts", meta["num_parts"] if args.parts == "auto" else args.parts),
            "--method": ("method", method), "--seed": ("seed", args.seed),
            "--order": ("order", "degree" if streamed
                        else stream_order_name(method, args.order)),
            "--roots": ("roots", args.roots),
            "--ranks-per-node": ("ranks_per_node",
                                 args.ranks_per_node if args.ranks_per_node > 1 else None),
            "--weights": ("weights", None if args.weights is None
                          else check_weights(args.weights, len(args.weights)).tolist()),
            "--order-vertices": ("vertex_order_requested", vertex_order),
            "--keep-pairs": ("keep_pairs", args.keep_pairs)}


def existing_partitions(args) -> str:
    """What ``--if-missing`` says of an existing ``--out``, or why it refuses it.

    The line that it holds the partitions asked for, else :class:`PartitionError` saying
    what it holds and what to do.
    Taken as done only when ``--out`` is a partition directory whose ``meta.json`` is
    intact, whose every file has the size and SHA-256 it records (none missing), and that
    was cut from the same data (:func:`source_identity`) with the same flags."""
    out = Path(args.out)
    again = "give --force to partition it again, or another --out"
    if not is_partition_directory(out):
        raise PartitionError(f"--if-missing: --out {out} exists and is not a partition "
                             "directory written by distgnn-partition; move it away or give "
                             "another --out")
    try:
        meta = read_meta(out)
    except DistGNNError as e:
        raise PartitionError(f"--if-missing: --out {out} is a damaged partition directory "
                             f"({e}); {again}") from None
    problems = check_files(out, meta)
    if problems:
        more = f" and {len(problems) - 1} more problems" if len(problems) > 1 else ""
        raise PartitionError(f"--if-missing: --out {out} is an incomplete or damaged "
                             f"partition set ({problems[0]}{more}); {again}")
    source = source_identity(args)
    if meta.get("source") != source:
        was = meta.get("source")
        what = ("records no source (written by an earlier distgnn-partition)" if was is None
                else f"was cut from {_source_words(was)}")
        raise PartitionError(f"--if-missing: --out {out} {what}, not from "
                             f"{_source_words(source)} as asked; {again}")
    differ = [(flag, meta.get(field), wanted)
              for flag, (field, wanted) in _requested_settings(args, meta).items()
              if meta.get(field) != wanted
              # another method has another default order: the method says it
              and not (flag == "--order" and args.order is None
                       and meta.get("method") != method_of(args, bool(meta.get("streamed"))))]
    if differ:
        raise PartitionError(
            f"--if-missing: --out {out} was partitioned with "
            + ", ".join(_as_given(flag, there) for flag, there, _ in differ)
            + ", not " + ", ".join(_as_given(flag, wanted) for flag, _, wanted in differ)
            + f" as asked; {again}")
    return (f"{out} holds the {meta['num_parts']} partitions asked for already, cut from these "
            "data with these options (every file's checksum checked): nothing to do")


def _as_given(flag: str, value) -> str:
    """A recorded setting of ``flag`` as a user gives it on the command line (``--seed 3``,
    ``--no-keep-pairs``, ``--weights 1,1,2``); ``None``, not recorded, is the default,
    said with the flag that would change it."""
    if value is None:
        return {"--ranks-per-node": "--ranks-per-node 1",
                "--weights": "equal shares (no --weights)",
                "--keep-pairs": "the default (no --keep-pairs or --no-keep-pairs)"}.get(
                    flag, f"the default (no {flag})")
    if isinstance(value, bool):
        return flag if value else "--no-" + flag.removeprefix("--")
    if isinstance(value, list):
        return f"{flag} " + ",".join(f"{v:g}" for v in value)
    return f"{flag} {value}"


def _source_words(source: dict) -> str:
    """A recorded :func:`source_identity` in words: the dataset and what else differs from
    the plain load."""
    dataset = source.get("dataset", {})
    words = dataset.get("spec") or (f"{dataset.get('path')} ({dataset.get('bytes', 0):,} "
                                    f"bytes, modified {_when(dataset.get('mtime_ns', 0))})")
    extra = [f"{flag} {source[flag]['path']}" for flag in ("--features", "--labels",
                                                             "--split-file") if flag in source]
    extra += [f"--split {source['split']}"] if source.get("split") else []
    extra += ["--symmetrize"] if source.get("symmetrize") else []
    return words + (f" with {', '.join(extra)}" if extra else "")


def _when(ns: int) -> str:
    return datetime.datetime.fromtimestamp(ns / 1e9).isoformat(sep=" ", timespec="seconds")


def partition_main(args) -> int:
    """``distgnn-partition DATASET``: a stop signal (SIGTERM, Ctrl-C) ends it, whatever it
    was doing, with one line saying what was removed (nothing is left of the run: no
    temporary directory, no lock file, no folder it made) and status 128 + the signal."""
    args.dataset, given_as = dataset_of(args)
    try:
        with stop_on_signals(args.out, "partitioning") as writing:
            if not args.if_missing:
                return write_partitions(args, given_as, writing)
            if args.force:
                raise PartitionError("--if-missing keeps an existing --out and --force "
                                     "replaces it: give one of the two")
            check_not_partitions(args.dataset, given_as)
            with exclusive(args.out, lambda line: print(f"{PROG}: {line}", file=sys.stderr,
                                                        flush=True)):
                if os.path.lexists(args.out):
                    print(existing_partitions(args))
                    return 0
                return write_partitions(args, given_as, writing)
    except Stopped as stop:
        print(f"{PROG}: {stop}", file=sys.stderr)
        return 128 + stop.signum


def fitting_parts(data, args) -> tuple[int, Layout, str]:
    """``(P, cut, line)`` of ``--parts auto``: the fewest partitions that fit a node.

    The cut is theirs, the line says why.
    P is the first of K, 2K, 4K, ... (K = ``--ranks-per-node``) whose memory per rank for
    the run's ``--hidden``, ``--layers`` and ``--precision``, times K, fits a node
    (``--node-memory``, or what is available here).  The memory model decides before
    anything is cut (:func:`~partition.stats.estimated_memory`): a node that the fixed part
    of K ranks fills already is refused at once, and P is the first count whose estimate
    fits.  P is then cut once, and the cut's own prediction (the one ``inspect`` prints)
    checked; a cut over the estimate is followed by the next count (said in the line)."""
    have = (args.node_memory * 2**30 if args.node_memory is not None
            else available_bytes("cpu"))
    per_node = args.ranks_per_node
    graph = data.graph
    model = dict(num_features=data.num_features, num_classes=data.num_classes,
                 hidden=args.hidden, layers=args.layers, precision=args.precision)
    words = model_words(model)
    # distgnn-train's default model (GCN: fused epilogues)
    rates = memory_rates(data.num_features, data.num_classes, args.hidden, args.layers,
                         saved_bytes=saved_activation_bytes(args.precision),
                         feature_bytes=saved_activation_bytes(args.precision), fused=True)
    if rates["fixed"] * per_node > have:
        raise PartitionError(
            f"--parts auto: the fixed part of a rank alone, {format_bytes(rates['fixed'])} "
            f"(the runtime {format_bytes(rates['runtime'])} and the model; {words}), times "
            f"{per_node} rank{'s' if per_node > 1 else ''} per node is over the "
            f"{format_bytes(have)} of a node, whatever the partition count; give more "
            "--node-memory" + (" or fewer --ranks-per-node" if per_node > 1 else ""))
    estimate = estimated_memory(graph.indptr, graph.indices, rates)
    counts = [per_node << i for i in range(max(graph.num_edges, 1).bit_length())
              if per_node << i <= max(graph.num_edges, 1)]
    over = [p for p in counts if estimate(p)[0] * per_node > have]
    fitting = [p for p in counts if p not in over]
    if not fitting:
        raise PartitionError(
            f"--parts auto: no partition count fits {format_bytes(have)} per node "
            f"({words}): at {counts[-1]}, the most the {graph.num_edges:,} edges fill, a "
            f"rank is estimated at {format_bytes(estimate(counts[-1])[0])}; give more "
            "--node-memory")
    tried = []
    for parts in fitting:
        guess, replication = estimate(parts)
        layout = vertex_cut(graph, parts, args.method, args.seed, args.order, args.roots,
                            args.keep_pairs, ranks_per_node=per_node)
        stats = summarize(counts_from_layout(layout), graph.num_nodes,
                          int(np.count_nonzero(layout.clones() > 1)), width=args.width,
                          **model)
        need = stats["predicted_memory_bytes"]["max"] * per_node
        if need <= have:
            return parts, layout, (
                f"--parts auto: {parts} partitions ({parts // per_node} node"
                f"{'s' if parts > per_node else ''} of {per_node} rank"
                f"{'s' if per_node > 1 else ''}) for {words}: the cut's ranks need "
                f"{format_bytes(need)} per node (a rank at most "
                f"{format_bytes(need / per_node)}, {format_bytes(rates['fixed'])} of it "
                f"fixed) within {format_bytes(have)}; estimated before cutting "
                f"{format_bytes(guess * per_node)} (replication {replication:.2f}, the cut's "
                f"{stats['replication_factor']:.2f})"
                + (f"; fewer estimated over it ({', '.join(f'{p}: {format_bytes(estimate(p)[0] * per_node)}' for p in over if p < parts)})"
                   if over and over[0] < parts else "")
                + (f"; cut and over it: {', '.join(tried)}" if tried else ""))
        tried.append(f"{parts}: {format_bytes(need)}")
    raise PartitionError(f"--parts auto: no partition count fits {format_bytes(have)} per "
                         f"node ({words}; cut and over it: {', '.join(tried)}); give "
                         "--parts P, or more --node-memory")


def write_partitions(args, given_as: str, writing: Writing) -> int:
    """``distgnn-partition``'s work once its flags are parsed: check, load, cut, write
    (``writing``: marked when the directory is being written, for a stop signal's line)."""
    check_not_partitions(args.dataset, given_as)
    check_distinct_outputs({"--out": args.out, "--json": args.json},
                           {given_as: input_path(args.dataset), "--features": args.features,
                            "--labels": args.labels, "--split-file": args.split_file})
    check_statistics_output(args.json, args.out)
    if args.parts == "auto" and args.weights is not None:
        raise PartitionError("--weights gives one capacity per partition: give --parts P "
                             "with it, not auto")
    if args.node_memory is not None and not (args.parts == "auto" and args.node_memory > 0):
        raise PartitionError("--node-memory sizes --parts auto: give it a number of GiB > 0 "
                             "with --parts auto")
    mode, why = choose_mode(args)
    if args.method is None and args.order is not None and mode == "memory":
        raise PartitionError(f"--order {args.order} orders the stream of --method libra or "
                             "hdrf; the method in memory by default, ne, has none: give "
                             "--method libra (or hdrf) with it")
    args.method = method_of(args, mode == "stream")
    check_options(args.out, 1 if args.parts == "auto" else args.parts, args.seed,
                  args.weights, args.force, args.method, args.order, args.keep_pairs)
    check_json_output(args.json)
    if args.memory is not None and not (mode == "stream" and args.method == "ne"
                                        and args.memory > 0):
        raise PartitionError(f"--memory bounds the expansion of --method ne when streaming "
                             f"(here {args.method}, {mode}): give it a number of GiB > 0 with "
                             "--method ne and --mode stream")
    if mode == "stream":  # which says itself what a stop signal left
        return stream_main(args, why)
    print(f"partitioning in memory ({why})", flush=True)
    started = time.perf_counter()
    data = load_dataset(args.dataset, features=args.features, labels=args.labels,
                        split=args.split, symmetrize=args.symmetrize,
                        split_file=args.split_file)
    print(f"{data.summary()}", flush=True)
    layout = None
    if args.parts == "auto":
        args.parts, layout, line = fitting_parts(data, args)
        print(line, flush=True)
    loaded = time.perf_counter()
    writing.started = True
    done = partition_dataset(data, args.out, args.parts, method=args.method, seed=args.seed,
                             order=args.order, roots=args.roots, keep_pairs=args.keep_pairs,
                             weights=args.weights, order_vertices=args.order_vertices,
                             force=args.force, progress=args.progress, width=args.width,
                             hidden=args.hidden, layers=args.layers, precision=args.precision,
                             ranks_per_node=args.ranks_per_node,
                             source=source_identity(args), layout=layout)
    _emit(done.stats, args)
    seconds, ordering = done.seconds, done.ordering
    trial = ordering.get("vertex_order_trial")
    print(f"vertex order {ordering['vertex_order']}"
          + (" (auto; SpMM trial: " + ", ".join(f"{k} {v:.3f} s" for k, v in trial.items())
             + ")" if trial else "") + f": {seconds['ordering']:.1f} s")
    print(f"wrote {args.out} in {loaded - started + sum(seconds.values()):.1f} s "
          f"(partitioning {loaded - started + seconds['partitioning']:.1f} s including "
          f"loading, ordering {seconds['ordering']:.1f} s, writing {seconds['writing']:.1f} s)")
    return 0


def counts_of_directory(directory) -> tuple[list[PartCounts], int, list | None]:
    """The sizes of each partition of ``directory``, its split vertices and its clone sets
    (:func:`partition.stats.clone_sets`), read from its files."""
    meta = read_meta(directory)
    counts, split, held = [], 0, []
    root = np.zeros(meta["num_nodes"], np.int64)
    for rank in range(meta["num_parts"]):
        part = load(directory, rank)
        is_root = np.asarray(part.root_rank) == rank
        roots = int(np.count_nonzero(is_root))
        counts.append(PartCounts(part.num_nodes, part.graph.num_edges, roots,
                                 part.num_nodes - roots, int(len(part.leaf_root_local)),
                                 part.graph.indices.itemsize))
        split += part.split_roots
        ids = np.asarray(part.global_ids)
        root[ids[is_root]] = rank
        held.append(ids)
    sets = clone_sets_of(root, held) if meta["num_parts"] <= MAX_CLONE_SET_PARTS else None
    return counts, split, sets


def inspect_main(args) -> int:
    check_distinct_outputs({"--json": args.json}, {"DIR": args.directory})
    check_json_output(args.json)
    meta = read_meta(args.directory)
    # recomputed as at partitioning time, so both print bit-identical statistics
    weights = meta.get("weights")
    shares = None if weights is None else requested_shares(weights)
    counts, split, sets = counts_of_directory(args.directory)
    stats = summarize(counts, meta["num_nodes"], split,
                      width=args.width, num_features=meta.get("num_features", 0),
                      num_classes=meta.get("num_classes", 0), hidden=args.hidden,
                      layers=args.layers, shares=shares, sets=sets,
                      ranks_per_node=args.ranks_per_node, precision=args.precision)
    if args.memory_limit is not None:
        stats["memory_limit"] = limited_plans(stats, args.memory_limit)
    print(f"{args.directory}: {meta.get('method')} partitions of {meta.get('dataset')} "
          f"(seed {meta.get('seed')}, vertex order {meta.get('vertex_order', 'given')}, "
          f"format version {meta['format_version']})")
    note = unchecked_fields_note(meta)
    if note:
        print(f"  note: {note}")
    if shares is not None:
        print("  weights " + ",".join(f"{w:g}" for w in weights) + ": requested "
              "edge shares " + " ".join(f"{100 * s:.2f} %" for s in shares))
    _emit(stats, args)
    return 0


def verify_main(args) -> int:
    """Exit 1 on any problem of the directory (0: valid; 2: a bad --dataset)."""
    edges = sizes = None
    if args.dataset:
        data = load_dataset(args.dataset)
        edges = data.graph.edges()
        sizes = {"num_nodes": data.num_nodes, "num_edges": data.graph.num_edges,
                 "num_features": data.num_features, "num_classes": data.num_classes}
    try:
        problems = verify(args.directory, edges, sizes)
    except DistGNNError as e:  # unreadable before any check could list it
        problems = [str(e)]
    for problem in problems:
        print(f"{PROG} verify: {problem}", file=sys.stderr)
    if problems:
        return 1
    meta = read_meta(args.directory)
    note = unchecked_fields_note(meta)
    print(f"{args.directory}: OK ({meta['num_parts']} partitions, {meta['num_nodes']:,} "
          f"vertices, {meta['num_edges']:,} edges, {len(meta['files'])} files checked)"
          + (f"; note: {note}" if note else ""))
    return 0


COMMANDS = {"inspect": (inspect_parser, inspect_main), "verify": (verify_parser, verify_main)}


@interruptible(PROG)
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    make_parser, command = COMMANDS.get(argv[0] if argv else "", (partition_parser,
                                                                  partition_main))
    if argv and argv[0] in COMMANDS:
        argv = argv[1:]
    parser = make_parser()
    args = parser.parse_args(argv)
    return run_guarded(parser.prog, lambda: command(args))
