"""Graphs generated from a spec, for speed and scale (``rmat:...``, ``sbm:...``).

- **R-MAT** (Chakrabarti et al.; Graph500's Kronecker parameters by default): a power-law
  graph of ``2^scale`` vertices and about ``edge_factor * 2^scale`` undirected edges.  Its
  features are standard normal and its labels uniform at random: it measures speed, not
  accuracy (:attr:`~distgnn.data.graph.NodeDataset.note` says so).
  :func:`write_rmat_files` writes such a graph (directed pairs, duplicates and self-loops
  kept) with its features, labels and split as files, chunk by chunk, for graphs larger
  than memory.
- **Degree-corrected SBM**: planted blocks as labels (optionally noisy), the block one-hot
  plus Gaussian noise, or sparse binary columns that favour a block, as features; power-law
  degrees; accuracy depends on the neighbourhood.

Every generator checks its parameters and the memory it will need before drawing, and
splits the vertices at random (60 / 20 / 20 %).
"""
from __future__ import annotations

import math
import os
import re
import shutil
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..storage import free_space_problem, fsync_path, remove_leftovers, temp_path
from .binary_edges import EdgeFileWriter
from .graph import NODE_BYTES, CSRGraph, GraphError, NodeDataset, require_memory

__all__ = ["GENERATORS", "random_split", "write_rmat_files"]

_SPLIT_FRACTIONS = (0.6, 0.2)  # train, val; the rest is test
_CHUNK = 1 << 22  # edges drawn per step: bounds the temporaries
_MAX_NODES = 1 << 31  # an edge is keyed as dst * N + src in one int64
# What a generator holds per drawn edge at its peak (endpoints, relabelled copies, the
# symmetric int64 keys and their sort).
_GENERATOR_BYTES_PER_EDGE = 80


def random_split(num_nodes: int, rng: np.random.Generator,
                  eligible: np.ndarray | None = None) -> list[np.ndarray]:
    """Three disjoint bool ``[N]`` masks: a random 60/20/20 split of the eligible nodes
    (bool ``[N]``; default all).  The masks are those of ``rng.permutation`` of the eligible
    ids cut at 60 % and 80 %, so an all-true ``eligible`` draws the split of None."""
    ids = np.arange(num_nodes) if eligible is None else np.flatnonzero(eligible)
    ids = rng.permutation(ids)
    cuts = (np.cumsum(_SPLIT_FRACTIONS) * len(ids)).astype(np.int64)
    masks = [np.zeros(num_nodes, bool) for _ in range(3)]
    for mask, part in zip(masks, np.split(ids, cuts)):
        mask[part] = True
    return masks


def random_split_note(count: int, what: str, seed: int) -> str:
    """The :attr:`~distgnn.data.graph.NodeDataset.split_note` of :func:`random_split`."""
    return f"split: random 60/20/20 of the {count:,} {what} (seed {seed})"


# ---- generators ---------------------------------------------------------------------------------

def rmat_edges(scale: int, edge_factor: int, a: float = 0.57, b: float = 0.19, c: float = 0.19,
               seed: int | np.random.Generator = 0) -> tuple[np.ndarray, np.ndarray]:
    """Graph500 R-MAT edges: int64 ``[edge_factor * 2**scale]`` src and dst in ``0..2**scale-1``.

    Each of the ``scale`` bit levels picks a quadrant with probabilities a (0,0), b (0,1),
    c (1,0), d = 1-a-b-c (1,1) for (src bit, dst bit).  Ids are then relabelled by a seeded
    permutation so that the hubs are spread over the id range rather than sitting at 0.
    Duplicates and self-loops are kept.
    """
    _check_rmat(scale, edge_factor, a, b, c)
    rng = np.random.default_rng(seed)
    num_edges = edge_factor << scale
    src = np.empty(num_edges, np.int64)
    dst = np.empty(num_edges, np.int64)
    for start in range(0, num_edges, _CHUNK):
        k = min(_CHUNK, num_edges - start)
        src[start:start + k], dst[start:start + k] = _rmat_chunk(k, scale, a, b, c, rng)
    perm = rng.permutation(1 << scale)
    return perm[src], perm[dst]


def _rmat_chunk(count: int, scale: int, a: float, b: float, c: float,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """int64 ``[count]`` src and dst of R-MAT edges in ``0..2**scale-1``, not relabelled.

    Bit level by bit level, most significant first, one float32 ``r`` per edge picks the
    quadrant: src bit ``r >= a+b``, dst bit ``a <= r < a+b or r >= a+b+c``.
    """
    s = np.zeros(count, np.int64)
    d = np.zeros(count, np.int64)
    ab, abc = np.float32(a + b), np.float32(a + b + c)
    for _ in range(scale):
        r = rng.random(count, dtype=np.float32)
        s <<= 1
        s |= r >= ab
        d <<= 1
        d |= ((r >= np.float32(a)) & (r < ab)) | (r >= abc)
    return s, d


def rmat(scale: int, edge_factor: int = 16, num_features: int = 128, num_classes: int = 16,
         seed: int = 0, a: float = 0.57, b: float = 0.19, c: float = 0.19) -> NodeDataset:
    """R-MAT graph on ``N = 2**scale`` nodes, symmetrised, deduplicated, without self-loops.

    ``edge_factor * N`` edges are drawn, at most the ``N (N - 1) / 2`` undirected edges
    ``N`` vertices hold, and ``num_classes`` is at most ``N``; repeated draws merge, and
    when under half the drawn edges remain, the note says how many.  Features are float32
    standard normal ``[N, num_features]``, labels uniform in ``0..num_classes-1`` (no
    signal: this is a benchmark graph), split seeded 60/20/20.
    """
    _check_rmat(scale, edge_factor, a, b, c)
    _check_sizes(num_features=num_features, num_classes=num_classes, source="rmat")
    _require(seed >= 0, "seed must be >= 0", "rmat")
    n = 1 << scale
    most = (n - 1) // 2
    _require(edge_factor <= most,
             (f"edge_factor must lie in 1..{most} for scale {scale}" if most
              else "scale must be >= 2") + f": {n} vertices hold at most {n * (n - 1) // 2:,} "
             f"undirected edges, fewer than the edge_factor * 2^scale = {edge_factor * n:,} "
             "drawn", "rmat")
    _require(num_classes <= n, f"num_classes must lie in 1..{n} for scale {scale}: each "
             "class needs a vertex", "rmat")
    require_memory(_GENERATOR_BYTES_PER_EDGE * (edge_factor << scale)
                   + n * (4 * num_features + NODE_BYTES), "rmat")
    rng = np.random.default_rng(seed)
    name = f"rmat-s{scale}-ef{edge_factor}"
    graph = _undirected_graph(*rmat_edges(scale, edge_factor, a, b, c, seed=rng), n, name)
    x = rng.standard_normal((n, num_features), dtype=np.float32)
    y = rng.integers(0, num_classes, n)
    random_labels = (f"R-MAT labels are uniform at random: accuracy near 1/{num_classes} is "
                     "chance; use R-MAT to measure speed, not accuracy")
    merged = _merged_note(graph, edge_factor << scale, "edge_factor * 2^scale")
    return NodeDataset(graph, x, y, *random_split(n, rng), num_classes=num_classes, name=name,
                       split_note=random_split_note(n, "vertices", seed),
                       note="; ".join(filter(None, (random_labels, merged))))


def write_rmat_files(out_dir: str | Path, scale: int, edge_factor: int = 16,
                     num_features: int = 128, num_classes: int = 16, seed: int = 0,
                     a: float = 0.57, b: float = 0.19, c: float = 0.19,
                     progress: Callable[[int], None] | None = None) -> dict:
    """Write an R-MAT graph on ``N = 2**scale`` vertices as files into a new folder.

    The folder is ``out_dir``; the graph is never held whole: memory ``O(N + chunk)``.

    - ``edges.npy``: an edge file (:mod:`distgnn.data.binary_edges`) of ``E = 2 * edge_factor * N``
      edges, int32 when ``N <= 2**31 - 1``, else int64.  ``edge_factor * N`` R-MAT edges
      ``(s, d)`` are drawn as :func:`rmat_edges` draws them, in chunks of ``_CHUNK``, ids
      relabelled by a seeded permutation; each chunk's ``k`` edges are written, then their
      ``k`` reverses ``(d, s)``, so the multiset of edges is symmetric.  Duplicates and
      self-loops are kept (:func:`rmat` removes them; a loader or partitioner may).
    - ``x.npy``: float32 ``[N, num_features]``, standard normal;
    - ``y.npy``: int64 ``[N]``, uniform in ``0..num_classes-1`` (no signal: a speed graph);
    - ``split.npz``: bool ``train_mask``, ``val_mask``, ``test_mask`` ``[N]``, the
      :func:`random_split` 60/20/20.

    One ``np.random.default_rng(seed)`` draws, in this order, the permutation, the edges,
    ``x``, ``y`` and the split.  The files are written into a hidden temporary folder
    beside ``out_dir`` that is renamed to ``out_dir`` at the end, so ``out_dir`` is
    complete or absent; on any failure (KeyboardInterrupt too) the temporary folder is
    removed.  An existing ``out_dir`` is refused, and so is a filesystem without room for
    the files.  ``progress(n)`` is called with the number of edges written after each chunk.

    Returns ``{"num_nodes", "num_edges", "num_features", "num_classes", "files"}``,
    ``files`` the paths (str) of ``"edges"``, ``"features"``, ``"labels"``, ``"split"``.
    """
    source = "rmat"
    _check_rmat(scale, edge_factor, a, b, c)
    _check_sizes(num_features=num_features, num_classes=num_classes, source=source)
    _require(seed >= 0, "seed must be >= 0", source)
    out_dir = Path(out_dir)
    _require(not (out_dir.exists() or out_dir.is_symlink()),
             "already exists; write_rmat_files makes a new folder (remove it or choose "
             "another path)", out_dir)
    parent = out_dir.absolute().parent
    _require(parent.is_dir(), f"directory {parent} does not exist", out_dir)
    n = 1 << scale
    drawn = edge_factor << scale
    dtype = np.dtype(np.int32 if n <= np.iinfo(np.int32).max else np.int64)
    # data, plus a generous allowance for the .npy headers and the .npz's zip records
    nbytes = 2 * drawn * 2 * dtype.itemsize + n * (4 * num_features + 8 + 3) + (1 << 16)
    problem = free_space_problem(parent, nbytes)
    if problem:
        raise GraphError(problem, out_dir)
    # Per vertex, at the peak: random_split's ids and their permutation (int64) and its
    # masks (the int64 relabelling is freed before); per drawn edge of a chunk, twice the
    # in-memory generator's temporaries, since each edge is written in both directions.
    require_memory(19 * n + 2 * _GENERATOR_BYTES_PER_EDGE * min(_CHUNK, drawn), source)
    remove_leftovers(out_dir)
    tmp = temp_path(out_dir)
    files = {"edges": "edges.npy", "features": "x.npy", "labels": "y.npy",
             "split": "split.npz"}
    tmp.mkdir()
    try:
        rng = np.random.default_rng(seed)
        perm = rng.permutation(n)
        writer = EdgeFileWriter(tmp / files["edges"], 2 * drawn, dtype)
        try:
            for start in range(0, drawn, _CHUNK):
                s, d = _rmat_chunk(min(_CHUNK, drawn - start), scale, a, b, c, rng)
                s, d = perm[s], perm[d]
                writer.write(np.concatenate([s, d]), np.concatenate([d, s]))
                if progress is not None:
                    progress(writer.written)
        except BaseException:
            writer.file.close()  # not close(): its count check would hide this error
            raise
        writer.close()
        del perm  # before random_split's [N] arrays
        rows = max(1, _CHUNK // num_features)  # about _CHUNK values per block
        _write_npy(tmp / files["features"], "<f4", (n, num_features),
                   (rng.standard_normal((min(rows, n - i), num_features), dtype=np.float32)
                    for i in range(0, n, rows)))
        _write_npy(tmp / files["labels"], "<i8", (n,),
                   (rng.integers(0, num_classes, min(_CHUNK, n - i))
                    for i in range(0, n, _CHUNK)))
        np.savez(tmp / files["split"],
                 **dict(zip(("train_mask", "val_mask", "test_mask"), random_split(n, rng))))
        for name in files.values():
            fsync_path(tmp / name)
        fsync_path(tmp)
        os.replace(tmp, out_dir)
        fsync_path(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"num_nodes": n, "num_edges": 2 * drawn, "num_features": num_features,
            "num_classes": num_classes,
            "files": {key: str(out_dir / name) for key, name in files.items()}}


def _write_npy(path: Path, dtype: str, shape: tuple[int, ...],
               blocks: Iterator[np.ndarray]) -> None:
    """A C-order ``.npy`` file of ``dtype`` and ``shape`` from ``blocks`` of whole rows,
    in order, which together make ``shape``."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": dtype, "fortran_order": False, "shape": shape})
        for block in blocks:
            block.astype(dtype, copy=False).tofile(f)


def sbm(num_nodes: int, num_blocks: int = 8, avg_degree: float = 20, p_in: float = 0.8,
        degree_exponent: float = 2.5, num_features: int = 64, noise: float = 1.0,
        feature_density: float = 0.0, label_noise: float = 0.0, seed: int = 0) -> NodeDataset:
    """Degree-corrected stochastic block model with the blocks as labels.

    Each node gets a uniform block and a weight ``theta`` from a power law with exponent
    ``degree_exponent`` (Pareto, minimum 1).  ``num_nodes * avg_degree / 2`` edges are drawn:
    the source by theta, the destination by theta within the source's block with probability
    ``p_in``, else among all nodes; so about ``p_in + (1 - p_in) / num_blocks`` of the edges
    join one block (a little less on small graphs, where repeated hub pairs merge).  The
    graph is then symmetrised, deduplicated and loop-free.  ``avg_degree`` is at most
    ``num_nodes - 1`` and ``num_blocks`` at most ``num_nodes``; when under half the drawn
    edges remain, the note says how many.

    Features are float32 ``[N, num_features]``: the one-hot block in the first ``num_blocks``
    columns plus N(0, noise**2) on every column, so features alone are an imperfect
    predictor and aggregating neighbours helps.  With ``feature_density`` ``d > 0`` they are
    sparse and binary instead, as bag-of-words or interest features: column ``j`` favours a
    block ``f_j`` (uniform) and is 1 with probability ``d (1 + a)`` on its vertices and
    ``d (1 - a / (B - 1))`` on the others' (``a = 1 / (1 + noise)``, ``B`` blocks), so about
    ``d`` of the entries are 1 and ``noise`` weakens what each says.  ``label_noise`` ``q``
    replaces each label by a uniform class with probability ``q`` (the graph and features
    follow the planted block): a ceiling of ``1 - q (B - 1) / B`` on accuracy, as noisy
    labels of real graphs set.  Split seeded 60/20/20.
    """
    source = "sbm"
    _check_sizes(num_nodes=num_nodes, num_blocks=num_blocks, num_features=num_features,
                 source=source)
    _require(num_nodes <= _MAX_NODES, f"num_nodes must be at most {_MAX_NODES}", source)
    _require(num_nodes >= 2, "num_nodes must be >= 2: an edge joins two vertices", source)
    _require(num_blocks <= num_nodes, f"num_blocks must lie in 1..{num_nodes} (num_nodes): "
             "each block is a class and needs a vertex", source)
    _require(num_features >= num_blocks, "num_features must be >= num_blocks", source)
    _require(0 < avg_degree <= num_nodes - 1, f"avg_degree must lie in (0, {num_nodes - 1}] for "
             f"{num_nodes} nodes: a vertex has at most num_nodes - 1 neighbours", source)
    _require(0 <= p_in <= 1, "p_in must lie in [0, 1]", source)
    _require(degree_exponent > 1, "degree_exponent must be > 1", source)
    _require(0 <= noise < math.inf, "noise must be >= 0 and finite", source)
    _require(0 <= feature_density <= 1, "feature_density must lie in [0, 1]", source)
    _require(0 <= label_noise <= 1, "label_noise must lie in [0, 1]", source)
    _require(seed >= 0, "seed must be >= 0", source)
    n = num_nodes
    drawn = n * avg_degree / 2  # a float, so that a huge avg_degree cannot overflow an int
    require_memory(_GENERATOR_BYTES_PER_EDGE * drawn
                   + n * (4 * num_features + NODE_BYTES) + 16 * num_blocks, source)
    num_edges = int(drawn)
    rng = np.random.default_rng(seed)
    block = rng.integers(0, num_blocks, n)
    theta = (1.0 - rng.random(n)) ** (-1.0 / (degree_exponent - 1.0))
    # Lay nodes out block by block so that "by theta within a block" is an inverse-CDF draw
    # over a contiguous slice of one cumulative sum.
    order = np.argsort(block, kind="stable")
    cdf = np.concatenate([[0.0], np.cumsum(theta[order])])
    first = np.searchsorted(block[order], np.arange(num_blocks))
    last = np.searchsorted(block[order], np.arange(num_blocks), side="right")
    src = np.empty(num_edges, np.int64)
    dst = np.empty(num_edges, np.int64)
    for start in range(0, num_edges, _CHUNK):
        k = min(_CHUNK, num_edges - start)
        s = _draw_by_weight(cdf, np.zeros(k, np.int64), np.full(k, n), rng)
        b = block[order[s]]
        inside = rng.random(k) < p_in
        d = _draw_by_weight(cdf, np.where(inside, first[b], 0), np.where(inside, last[b], n), rng)
        src[start:start + k], dst[start:start + k] = order[s], order[d]
    name = f"sbm-n{n}-b{num_blocks}"
    graph = _undirected_graph(src, dst, n, name)
    x = (_binary_features(block, num_blocks, num_features, feature_density, noise, rng)
         if feature_density else _gaussian_features(block, num_features, noise, rng))
    labels = block.copy()
    if label_noise:  # a stream of its own: the graph, features and split stay the spec's
        noise_rng = np.random.default_rng([seed, 1])
        relabel = noise_rng.random(n) < label_noise
        labels[relabel] = noise_rng.integers(0, num_blocks, int(relabel.sum()))
    return NodeDataset(graph, x, labels, *random_split(n, rng), num_classes=num_blocks,
                       name=name, split_note=random_split_note(n, "vertices", seed),
                       note=_merged_note(graph, num_edges, "num_nodes * avg_degree / 2"))


def _gaussian_features(block: np.ndarray, num_features: int, noise: float,
                       rng: np.random.Generator) -> np.ndarray:
    """float32 ``[N, num_features]``: the one-hot ``block`` plus N(0, noise**2) everywhere."""
    with np.errstate(over="ignore"):  # noise too large for float32: inf, which is refused
        x = noise * rng.standard_normal((len(block), num_features), dtype=np.float32)
    x[np.arange(len(block)), block] += 1.0
    return x


def _binary_features(block: np.ndarray, num_blocks: int, num_features: int, density: float,
                     noise: float, rng: np.random.Generator) -> np.ndarray:
    """float32 0/1 ``[N, num_features]`` of :func:`sbm`'s ``feature_density`` (its docstring).

    Drawn in row chunks: the uniform draws of all rows at once would take twice the output."""
    signal = 1.0 / (1.0 + noise)
    favoured = rng.integers(0, num_blocks, num_features)
    other = max(num_blocks - 1, 1)
    # [B, F]: the probability that a vertex of block b has column j
    p = np.where(np.arange(num_blocks)[:, None] == favoured[None, :], density * (1 + signal),
                 density * (1 - signal / other)).clip(0.0, 1.0).astype(np.float32)
    x = np.empty((len(block), num_features), np.float32)
    step = max(1, _CHUNK // num_features)
    for start in range(0, len(block), step):
        rows = slice(start, start + step)
        x[rows] = rng.random((len(block[rows]), num_features), dtype=np.float32) < p[block[rows]]
    return x


def _draw_by_weight(cdf: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                    rng: np.random.Generator) -> np.ndarray:
    """int64 positions ``p`` in ``lo <= p < hi`` drawn with probability ``cdf[p+1] - cdf[p]``.

    ``cdf`` is float64 ``[M + 1]`` starting at 0; ``lo``/``hi`` are int ``[k]`` with lo < hi.
    """
    u = cdf[lo] + rng.random(len(lo)) * (cdf[hi] - cdf[lo])
    # Rounding can land u on a slice boundary; clip back inside the slice.
    return np.clip(np.searchsorted(cdf, u, side="right") - 1, lo, hi - 1)


def _merged_note(graph: CSRGraph, drawn: int, formula: str) -> str:
    """The note of a generated ``graph`` of ``drawn`` undirected edge draws (``formula``:
    how the parameters give that number) when under half of them remain once repeated pairs
    and self-loops are merged; ``""`` otherwise."""
    kept = graph.num_edges // 2
    if 2 * kept >= drawn:
        return ""
    return (f"{kept:,} undirected edges (average degree {graph.num_edges / graph.num_nodes:.1f}"
            f"), under half the {formula} = {drawn:,} drawn: the draws repeat pairs of "
            "vertices, and repeats merge")


def _undirected_graph(src: np.ndarray, dst: np.ndarray, num_nodes: int,
                      source: str) -> CSRGraph:
    """Symmetric, duplicate-free, loop-free CSRGraph from int64 ``[E]`` endpoint arrays."""
    keep = src != dst
    return CSRGraph.from_edges_symmetric(src[keep], dst[keep], num_nodes, source)


def _check_rmat(scale: int, edge_factor: int, a: float, b: float, c: float) -> None:
    _require(1 <= scale <= 31, "scale must lie in 1..31", "rmat")
    _require(edge_factor >= 1, "edge_factor must be >= 1", "rmat")
    _require(min(a, b, c) >= 0 and a + b + c <= 1,
             "a, b, c must be >= 0 with a + b + c <= 1", "rmat")


def _check_sizes(source: str, **sizes: int) -> None:
    for key, value in sizes.items():
        _require(value >= 1, f"{key} must be >= 1", source)


def _require(ok: bool, problem: str, source: str) -> None:
    if not ok:
        raise GraphError(problem, source)


# generator name -> {spec key: (other key, its value, why)}: the key does nothing when the
# other key has that value, so a spec giving both is refused
_INERT = {"sbm": {"p_in": ("blocks", 1, "every edge joins the one block")}}

# generator name -> (function, {spec key: (keyword, type, default)})
GENERATORS = {
    "rmat": (rmat, {
        "scale": ("scale", int, 14), "edge_factor": ("edge_factor", int, 16),
        "features": ("num_features", int, 128), "classes": ("num_classes", int, 16),
        "a": ("a", float, 0.57), "b": ("b", float, 0.19), "c": ("c", float, 0.19),
        "seed": ("seed", int, 0)}),
    "sbm": (sbm, {
        "nodes": ("num_nodes", int, 10_000), "blocks": ("num_blocks", int, 8),
        "avg_degree": ("avg_degree", float, 20.0), "p_in": ("p_in", float, 0.8),
        "degree_exponent": ("degree_exponent", float, 2.5),
        "features": ("num_features", int, 64), "noise": ("noise", float, 1.0),
        "feature_density": ("feature_density", float, 0.0),
        "label_noise": ("label_noise", float, 0.0), "seed": ("seed", int, 0)}),
}


def generate(spec: str) -> NodeDataset:
    """Dataset from ``"kind:key=value,..."``.

    Unknown or repeated keys, non-numbers and a key that does nothing beside another's
    value (``_INERT``) are errors, and so is a value the generator refuses: every error
    names the spec and its keys, not the function's keywords (``blocks``, not
    ``num_blocks``)."""
    kind, _, args = spec.partition(":")
    function, keys = GENERATORS[kind]
    kwargs = {keyword: default for keyword, _, default in keys.values()}
    given = set()
    for item in filter(None, (s.strip() for s in args.split(","))):
        key, _, value = (s.strip() for s in item.partition("="))
        if key not in keys:
            raise GraphError(f"unknown key {key!r} for {kind} (known: {', '.join(keys)})", spec)
        if key in given:
            raise GraphError(f"key {key!r} is given twice: give each key once", spec)
        given.add(key)
        keyword, kind_of, _ = keys[key]
        try:
            kwargs[keyword] = kind_of(value)
        except ValueError:
            wanted = "an integer" if kind_of is int else "a number"
            shown = value if len(value) <= 40 else value[:40] + "..."
            raise GraphError(f"key {key!r} needs {wanted}, got {shown!r}", spec) from None
    for key, (other, value, why) in _INERT.get(kind, {}).items():
        if key in given and kwargs[keys[other][0]] == value:
            raise GraphError(f"key {key!r} does nothing with {other}={value} ({why}): drop it "
                             f"or give another {other}", spec)
    try:
        ds = function(**kwargs)
    except GraphError as e:
        if e.source != kind:
            raise
        raise GraphError(_in_spec_keys(e.problem, keys), spec) from None
    ds.note = _in_spec_keys(ds.note, keys)
    return ds


def _in_spec_keys(text: str, keys: dict) -> str:
    """``text`` of a generator function, its keywords replaced by the spec's keys (``keys``:
    a :data:`GENERATORS` table): ``num_blocks must be >= 1`` is ``blocks must be >= 1`` to
    whoever wrote ``sbm:blocks=0``."""
    for key, (keyword, _, _) in keys.items():
        text = re.sub(rf"\b{keyword}\b", key, text)
    return text
