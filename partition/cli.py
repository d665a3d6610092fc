"""``distgnn-partition``: partition a dataset to disk, ``inspect`` or ``verify`` a directory.

    distgnn-partition DATASET|--dataset DATASET --parts P --out DIR
                      [--method libra|hdrf|random|dbh]
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
from distgnn.data.partition_checks import verify
from distgnn.data.partition_writing import check_target
from distgnn.data.partitions import (
    EDGE_ORDERS,
    FORMAT_VERSION,
    METHODS,
    ROOTS,
    check_weights,
    load,
    read_meta,
    requested_shares,
    unchecked_fields_note,
)
from distgnn.errors import DistGNNError
from distgnn.nn.config import MAX_LAYERS
from distgnn.placement import PRECISIONS
from distgnn.program import (
    DefaultsHelpFormatter,
    OneLineParser,
    dataset_file_flags,
    interruptible,
    run_guarded,
)
from distgnn.run.memory import available_bytes
from distgnn.storage import (
    check_distinct_outputs,
    check_json_output,
    exclusive,
    format_bytes,
    write_json,
)
from partition.assign import check_seed, stream_order_name
from partition.layout import order_layout
from partition.stats import (
    MAX_CLONE_SET_PARTS,
    PartCounts,
    clone_sets,
    clone_sets_of,
    counts_from_layout,
    format_summary,
    summarize,
)
from partition.stream import Stopped, partition_edge_file, vertex_data
from partition.vertex_cut import PartitionError, vertex_cut
from partition.write import write_dataset

PROG = "distgnn-partition"
PROGRESS_MIN_EDGES = 1_000_000
MODES = ("auto", "memory", "stream")
HASHED = ("random", "dbh")  # the methods without a stream: each edge goes by a hash
# what the in-memory path holds per edge at its peak (the loaded edges, the CSR, its stream
# order and partition of every entry) and per vertex besides the features
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
    parser.add_argument("--hidden", type=count(), default=256,
                        help="hidden width for the predicted memory per rank (default 256)")
    parser.add_argument("--layers", type=count(MAX_LAYERS), default=2,
                        help="model layers for the predicted memory per rank (default 2)")
    parser.add_argument("--ranks-per-node", type=count(), default=1, metavar="K",
                        help="with K > 1, also count the busiest node link's rows per "
                             "alltoallv of cd-0's flat and node-aware exchanges "
                             "(--exchange-topology), ranks 0..K-1 on the first node and so "
                             "on (up to 62 partitions; default 1)" + (
                                 "; and cut in two levels: the edges across the P/K nodes "
                                 "first, then each node's across its K ranks, so that a "
                                 "vertex's clones gather on few nodes and the node-aware "
                                 "exchange sends fewer rows over the links (not when "
                                 "streaming)" if cuts else ""))
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
                        "... (K: --ranks-per-node) whose predicted memory per rank, times K, "
                        "fits --node-memory (each tried is cut in memory; the line printed "
                        "says why): required, no default")
    p.add_argument("--node-memory", type=float, metavar="GIB",
                   help="with --parts auto: the memory of a node the ranks may take, in GiB "
                        "(default: what this machine has available now)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="partition directory to create: required, no default")
    p.add_argument("--method", choices=METHODS, default="libra",
                   help="libra: greedy vertex-cut (default); hdrf: greedy scoring of "
                        "partial degrees and balance (Petroni et al.); random: edge hash; "
                        "dbh: hash of the lower-degree endpoint")
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
                        "(default) or uniformly random")
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
                        "(libra in degree order, local vertex order given, equal weights); "
                        "auto (default): stream an edge file when the in-memory path would "
                        "need more than half of the available memory")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out if it is a partition directory this tool "
                        "wrote (default: an existing --out is refused)")
    p.add_argument("--if-missing", action="store_true",
                   help="write --out only when it is not yet a partition directory of P "
                        "partitions, else say so and do nothing; jobs that run this at once "
                        "take turns (a lock file .DIR.lock beside it), so one partitions and "
                        "the others use its directory (what a batch job's first start runs)")
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
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="the training run's --precision for the predicted memory per rank "
                        "(bf16-mixed keeps its saved activations in bf16)")
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


def check_options(out, parts: int, seed: int, weights, force: bool, method: str = "libra",
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
    check_target(out, force)
    return None if weights is None else check_weights(weights, parts)


def partition_dataset(data, out, parts: int, *, method: str = "libra", seed: int = 0,
                      order: str | None = None, roots: str = "balanced",
                      keep_pairs: bool | None = None, weights=None,
                      order_vertices: str = "auto", force: bool = False,
                      progress: bool = False, width: int = 128, hidden: int = 256,
                      layers: int = 2, ranks_per_node: int = 1) -> Partitioned:
    """Vertex-cut of the NodeDataset ``data`` into ``parts`` partitions, written to ``out``.

    ``out`` is the partition directory; this is what ``distgnn-partition`` does after
    loading (the keywords are its flags).  ``progress`` shows bars on a terminal for large
    graphs; ``width``, ``hidden`` and ``layers`` size the predicted exchange volume and memory
    of ``stats``; ``ranks_per_node`` K > 1 cuts in two levels, across nodes of K consecutive
    ranks and then within each (:func:`~partition.vertex_cut.two_level_parts`), and adds the
    node links to ``stats``."""
    weights = check_options(out, parts, seed, weights, force, method, order, keep_pairs)
    shares = None if weights is None else requested_shares(weights)
    started = time.perf_counter()
    graph = data.graph
    show = progress and sys.stderr.isatty() and graph.num_edges >= PROGRESS_MIN_EDGES
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
                      ranks_per_node=ranks_per_node)
    settings = {"method": method, "seed": seed, "order": stream_order_name(method, order),
                "roots": roots, **ordering,
                **({"ranks_per_node": ranks_per_node} if ranks_per_node > 1 else {})}
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
        ("--method " + args.method, args.method != "libra"),
        ("--order " + str(args.order), args.order not in (None, "degree")),
        ("--weights", args.weights is not None), ("--keep-pairs", bool(args.keep_pairs)),
        ("--order-vertices " + args.order_vertices,
         args.order_vertices not in ("auto", "given")),
        ("--symmetrize", args.symmetrize), (f"--split {args.split}", args.split != 0),
        ("--parts auto", args.parts == "auto"),
        (f"--ranks-per-node {args.ranks_per_node}", args.ranks_per_node > 1)) if used]
    if unsupported:
        raise PartitionError(f"streaming ({why}) takes libra in degree order, equal weights, "
                             "the given vertex order, the edges as the file gives them and "
                             "a split from --split-file only; not "
                             + ", ".join(unsupported))
    return "stream", why


def stream_main(args, why: str) -> int:
    """``distgnn-partition`` out of core (:mod:`partition.stream`); a stop signal ends it
    with one line saying what was removed (status 128 + the signal)."""
    # what the stream does where the in-memory path would have chosen (said, not silent)
    print(f"streaming {args.dataset} from disk ({why}): libra in degree order, local vertex "
          "order given" + (" (what --order-vertices auto takes when streaming)"
                           if args.order_vertices == "auto" else "")
          + ", the two directions of an edge placed independently", flush=True)
    data = vertex_data(args.features, args.labels, args.split_file)
    total = 3 * edge_count(args.dataset)
    show = args.progress and sys.stderr.isatty()
    try:
        with tqdm(total=total, unit="edge", unit_scale=True, disable=not show,
                  desc=f"libra P={args.parts} (3 passes)", file=sys.stderr) as bar:
            meta = partition_edge_file(args.dataset, data, args.out, args.parts,
                                       seed=args.seed, roots=args.roots, force=args.force,
                                       log=lambda line: print(line, flush=True),
                                       progress=bar.update)
    except Stopped as stop:
        print(f"{PROG}: {stop}", file=sys.stderr)
        return 128 + stop.signum
    counts, split, sets = counts_of_directory(args.out)
    stats = summarize(counts, meta["num_nodes"], split, width=args.width,
                      num_features=meta["num_features"], num_classes=meta["num_classes"],
                      hidden=args.hidden, layers=args.layers, sets=sets,
                      ranks_per_node=args.ranks_per_node)
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


def partition_main(args) -> int:
    if not args.if_missing:
        return write_partitions(args)
    if args.force:
        raise PartitionError("--if-missing keeps an existing --out and --force replaces it: "
                             "give one of the two")
    with exclusive(args.out):
        if (Path(args.out) / "meta.json").is_file():
            parts = read_meta(args.out)["num_parts"]
            if parts != args.parts and args.parts != "auto":
                raise PartitionError(f"--out {args.out} holds {parts} partitions, not the "
                                     f"{args.parts} of --parts")
            print(f"{args.out} holds {parts} partitions already: nothing to do")
            return 0
        return write_partitions(args)


def fitting_parts(data, args) -> tuple[int, str]:
    """``(P, line)``: the fewest partitions that fit a node, and why (``--parts auto``).

    P is the first of K, 2K, 4K, ... (K = ``--ranks-per-node``) whose predicted training
    memory per rank (``distgnn-partition inspect``'s, for ``--hidden`` and ``--layers``),
    times K, fits a node (``--node-memory``, or what is available here)."""
    have = (args.node_memory * 2**30 if args.node_memory is not None
            else available_bytes("cpu"))
    per_node, tried = args.ranks_per_node, []
    parts = per_node
    while parts <= max(data.graph.num_edges, 1):
        try:
            layout = vertex_cut(data.graph, parts, args.method, args.seed, args.order,
                                args.roots, args.keep_pairs, ranks_per_node=per_node)
        except PartitionError:  # more partitions than the graph fills: none fits
            break
        stats = summarize(counts_from_layout(layout), data.graph.num_nodes,
                          int(np.count_nonzero(layout.clones() > 1)), width=args.width,
                          num_features=data.num_features, num_classes=data.num_classes,
                          hidden=args.hidden, layers=args.layers)
        need = stats["predicted_memory_bytes"]["max"] * per_node
        if need <= have:
            return parts, (
                f"--parts auto: {parts} partitions ({parts // per_node} node"
                f"{'s' if parts > per_node else ''} of {per_node} rank"
                f"{'s' if per_node > 1 else ''}): {format_bytes(need)} predicted per node "
                f"(hidden {args.hidden}, {args.layers} layers) within {format_bytes(have)}"
                + (f"; fewer did not fit ({', '.join(tried)})" if tried else ""))
        tried.append(f"{parts}: {format_bytes(need)}")
        parts *= 2
    raise PartitionError(f"--parts auto: no partition count fits {format_bytes(have)} per "
                         f"node ({', '.join(tried)}); give --parts P, or more --node-memory")


def write_partitions(args) -> int:
    """``distgnn-partition``'s work once its flags are parsed: check, load, cut, write."""
    args.dataset, given_as = dataset_of(args)
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
    check_options(args.out, 1 if args.parts == "auto" else args.parts, args.seed,
                  args.weights, args.force, args.method, args.order, args.keep_pairs)
    check_json_output(args.json)
    mode, why = choose_mode(args)
    if mode == "stream":
        return stream_main(args, why)
    print(f"partitioning in memory ({why})", flush=True)
    started = time.perf_counter()
    data = load_dataset(args.dataset, features=args.features, labels=args.labels,
                        split=args.split, symmetrize=args.symmetrize,
                        split_file=args.split_file)
    print(f"{data.summary()}", flush=True)
    if args.parts == "auto":
        args.parts, line = fitting_parts(data, args)
        print(line, flush=True)
    loaded = time.perf_counter()
    done = partition_dataset(data, args.out, args.parts, method=args.method, seed=args.seed,
                             order=args.order, roots=args.roots, keep_pairs=args.keep_pairs,
                             weights=args.weights, order_vertices=args.order_vertices,
                             force=args.force, progress=args.progress, width=args.width,
                             hidden=args.hidden, layers=args.layers,
                             ranks_per_node=args.ranks_per_node)
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
                      ranks_per_node=args.ranks_per_node,
                      saved_bytes=2 if args.precision == "bf16-mixed" else None)
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
