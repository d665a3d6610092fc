"""Hostile input for the graph builders, the .npz, edge-list and OGB loaders and the
generator specs (the harness and the table: ``tests/helpers/fuzz.py``)."""
import gzip
import io
import re
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from hypothesis import strategies as st

from distgnn.data.datasets import load
from distgnn.data.graph import CSRGraph, NodeDataset
from tests.helpers.datasets import make_ogb, tiny_arrays
from tests.helpers.fuzz import (
    GIANT_SHAPES,
    HOSTILE_BYTES,
    HOSTILE_COUNTS,
    HOSTILE_TOKENS,
    SOURCE,
    check_dataset,
    check_graph,
    damaged_bytes,
    edge_pairs,
    fuzz,
    giant_npy,
    hostile_array,
    marker_payload,
    npy_bytes,
    npz_members,
    run_case,
)

# ---- 1. graph builders --------------------------------------------------------------------------


@st.composite
def edge_arrays(draw, max_nodes=12, max_edges=30):
    """``(n, src, dst)``: a valid random edge list on ``n`` vertices (int64 ``[E]``)."""
    n = draw(st.integers(0, max_nodes))
    e = draw(st.integers(0, max_edges)) if n else 0
    ids = st.lists(st.integers(0, max(n - 1, 0)), min_size=e, max_size=e)
    return n, np.array(draw(ids), np.int64), np.array(draw(ids), np.int64)


def check_csr_input(indptr, indices, count):
    """An accepted CSRGraph holds exactly the given arrays (values compared as Python ints)."""
    def check(g):
        check_graph(g)
        assert g.indptr.tolist() == np.asarray(indptr).tolist()
        assert g.indices.tolist() == np.asarray(indices).tolist()
        assert count is None or g.num_nodes == count
    return check


def check_edges_input(src, dst, count, symmetric, weight=None):
    """An accepted graph holds exactly the given edges (both ways, once, if ``symmetric``)."""
    def check(g):
        check_graph(g)
        pairs = list(zip(src.tolist(), dst.tolist()))
        if symmetric:
            pairs = sorted(set(pairs) | {(d, s) for s, d in pairs})
        n = count if count is not None else max((max(p) for p in pairs), default=-1) + 1
        assert g.num_nodes == n
        if weight is None or symmetric:
            assert edge_pairs(g) == sorted(pairs)
        else:
            want = sorted((s, d, float(w)) for (s, d), w in
                          zip(pairs, np.asarray(weight).astype(np.float32).tolist()))
            gs, gd = g.edges()
            assert sorted(zip(gs.tolist(), gd.tolist(), g.edge_weight.tolist())) == want
    return check


def check_scipy_input(rows, cols):
    """An accepted graph holds an edge ``col -> row`` for each stored entry."""
    def check(g):
        check_graph(g)
        assert set(edge_pairs(g)) == set(zip(cols.tolist(), rows.tolist()))
    return check


def check_dataset_input(x, y, masks):
    """An accepted NodeDataset holds the given arrays after the documented casts."""
    def check(ds):
        check_dataset(ds)
        assert np.array_equal(ds.x, np.asarray(x).astype(np.float32))
        assert ds.y.tolist() == np.asarray(y).tolist()
        for got, want in zip((ds.train_mask, ds.val_mask, ds.test_mask), masks):
            assert np.array_equal(got, want)
    return check


@st.composite
def builder_cases(draw):
    """``(description, call, check)`` for one of CSRGraph, from_edges, from_edges_symmetric,
    from_scipy and NodeDataset."""
    n, src, dst = draw(edge_arrays())
    count = draw(st.sampled_from((None, n, n + 1, max(n - 1, 0)) + HOSTILE_COUNTS))
    which = draw(st.sampled_from(("CSRGraph", "from_edges", "from_edges_symmetric",
                                  "from_scipy", "NodeDataset")))
    if which == "CSRGraph":  # one of indptr, indices and num_nodes hostile
        g = CSRGraph.from_edges(src, dst, n)
        (indptr, how_p), (indices, how_i) = (g.indptr, "valid"), (g.indices, "valid")
        target = draw(st.sampled_from(("indptr", "indices", "num_nodes")))
        count = draw(st.sampled_from((None, n)))
        if target == "indptr":
            indptr, how_p = draw(hostile_array(g.indptr))
        elif target == "indices":
            indices, how_i = draw(hostile_array(g.indices))
        else:
            count = draw(st.sampled_from(HOSTILE_COUNTS + (n + 1,)))
        return (f"CSRGraph({indptr!r} ({how_p}), {indices!r} ({how_i}), num_nodes={count!r})",
                lambda: CSRGraph(indptr, indices, count, source=SOURCE),
                check_csr_input(indptr, indices, count))
    if which in ("from_edges", "from_edges_symmetric"):
        (s, how_s), (d, how_d) = draw(hostile_array(src)), draw(hostile_array(dst))
        case = f"{which}({s!r} ({how_s}), {d!r} ({how_d}), num_nodes={count!r}"
        if which == "from_edges_symmetric":
            return (case + ")", lambda: CSRGraph.from_edges_symmetric(s, d, count, SOURCE),
                    check_edges_input(s, d, count, True))
        weight = None
        if draw(st.booleans()):
            weight, how_w = draw(hostile_array(np.linspace(0.5, 2, len(src))))
            case += f", edge_weight={weight!r} ({how_w})"
        return (case + ")", lambda: CSRGraph.from_edges(s, d, count, weight, SOURCE),
                check_edges_input(s, d, count, False, weight))
    if which == "from_scipy":
        return draw(scipy_case(n, src, dst))
    return draw(dataset_case(n, src, dst))


@st.composite
def scipy_case(draw, n, src, dst):
    """from_scipy of the edges in a sparse format, shape and dtype, or of no sparse matrix."""
    form = draw(st.sampled_from(("coo", "csr", "csc", "lil", "dok", "dense", "list", "none")))
    if form == "dense":
        matrix = np.ones((n, n))
    elif form in ("list", "none"):
        matrix = [[1]] if form == "list" else None
    else:
        shape = draw(st.sampled_from(((n, n), (n, n + 1), (n + 1, n), (10**12, 10**12))))
        dtype = draw(st.sampled_from(("float32", "float64", "int64", "bool", "complex64")))
        data = np.ones(len(src), dtype)
        if len(src) and draw(st.booleans()):
            data[draw(st.integers(0, len(src) - 1))] = draw(st.sampled_from((0, 2) + (
                (float("nan"), float("inf")) if data.dtype.kind in "fc" else ())))
        matrix = sp.coo_matrix((data, (dst, src)), shape=shape)
        if shape[0] < 10**6:  # only coo holds a huge shape without allocating it
            matrix = matrix.asformat(form)
        return (f"from_scipy({form} {shape} {dtype}, rows={dst!r}, cols={src!r}, "
                f"data={data!r})", lambda: CSRGraph.from_scipy(matrix, SOURCE),
                check_scipy_input(dst, src))
    return (f"from_scipy({matrix!r})", lambda: CSRGraph.from_scipy(matrix, SOURCE),
            check_scipy_input(dst, src))


@st.composite
def dataset_case(draw, n, src, dst):
    """NodeDataset on a valid graph with hostile features, labels, masks, num_classes."""
    graph = CSRGraph.from_edges(src, dst, n, source=SOURCE)
    ids = np.arange(n)
    x, how_x = draw(hostile_array(np.arange(3 * n, dtype=np.float32).reshape(n, 3)))
    y, how_y = draw(hostile_array(ids % 3))
    masks, hows = [], []
    for k in range(3):
        m, how = draw(hostile_array(ids % 3 == k))
        masks.append(m)
        hows.append(how)
    classes = draw(st.sampled_from((0, 3, 2, 10**12) + HOSTILE_COUNTS))
    return (f"NodeDataset(n={n}, x={x!r} ({how_x}), y={y!r} ({how_y}), masks={masks!r} "
            f"({hows}), num_classes={classes!r})",
            lambda: NodeDataset(graph, x, y, *masks, num_classes=classes),
            check_dataset_input(x, y, masks))


@fuzz(builder_cases())
def test_graph_builders(case):
    description, call, check = case
    run_case("graph builders", description, call, check, names=[SOURCE])


# ---- 2. .npz files ------------------------------------------------------------------------------
NPZ_KEYS = tuple(tiny_arrays())


@st.composite
def npz_cases(draw):
    """A plan: ``members`` (name -> .npy bytes or a giant header or a pickle), the arrays an
    accepted load must return, the container and its damage, and ``split``."""
    arrays = dict(tiny_arrays())
    notes = []
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from(NPZ_KEYS))
        arrays[key], how = draw(hostile_array(arrays[key]))
        notes.append(f"{key}: {how} -> {arrays[key]!r}")
    if draw(st.booleans()):  # several splits, [S, N] each
        for m in ("train", "val", "test"):
            arrays[f"{m}_masks"] = np.stack([arrays[f"{m}_mask"], arrays[f"{m}_mask"]])
        key = draw(st.sampled_from(("train_masks", "val_masks", "test_masks")))
        arrays[key], how = draw(hostile_array(arrays[key]))
        notes.append(f"{key}: {how}")
    if draw(st.booleans()):
        key = draw(st.sampled_from(NPZ_KEYS))
        del arrays[key]
        notes.append(f"no {key}")
    members = {f"{k}.npy": ("array", v) for k, v in arrays.items()}
    special = draw(st.sampled_from((None, "pickle", "giant", "readme")))
    if special == "pickle":
        key = draw(st.sampled_from(NPZ_KEYS + ("extra",)))
        members[f"{key}.npy"] = ("pickle", None)
        notes.append(f"{key}: pickled object")
    elif special == "giant":
        key = draw(st.sampled_from(NPZ_KEYS))
        shape = draw(st.sampled_from(GIANT_SHAPES))
        members[f"{key}.npy"] = ("giant", giant_npy(shape, draw(st.sampled_from(("<f4", "<i8")))))
        notes.append(f"{key}: header declares shape {shape}")
    elif special == "readme":
        members["README.txt"] = ("raw", b"not an array")
    compressed = draw(st.booleans())
    damage = draw(st.sampled_from(("intact", "truncate", "flip", "empty", "garbage",
                                   "directory")))
    cut = draw(st.floats(0, 1))
    flips = draw(st.lists(st.tuples(st.floats(0, 1), st.integers(1, 255)), min_size=1,
                          max_size=4))
    split = draw(st.sampled_from((0, 0, 1, 2, -1)))
    return dict(arrays=arrays, members=members, compressed=compressed, damage=damage,
                cut=cut, flips=flips, split=split, notes=notes)


def write_npz_plan(path: Path, plan: dict, marker: Path) -> None:
    """Write the archive ``plan`` describes to ``path`` (``marker``: for a pickled payload)."""
    if plan["damage"] == "directory":
        path.mkdir()
        return
    content = {"array": npy_bytes, "giant": bytes, "raw": bytes,
               "pickle": lambda _: npy_bytes(marker_payload(marker))}
    data = npz_members({name: content[kind](value)
                        for name, (kind, value) in plan["members"].items()}, plan["compressed"])
    if plan["damage"] == "truncate":
        data = data[:int(plan["cut"] * (len(data) - 1))]
    elif plan["damage"] == "flip":
        data = bytearray(data)
        for where, mask in plan["flips"]:
            data[int(where * (len(data) - 1))] ^= mask
        data = bytes(data)
    elif plan["damage"] == "empty":
        data = b""
    elif plan["damage"] == "garbage":
        data = np.random.default_rng(int(plan["cut"] * 1000)).bytes(256)
    path.write_bytes(data)


def check_npz_result(arrays: dict, split: int):
    """An accepted load holds exactly ``arrays`` (after the documented casts)."""
    def check(ds):
        check_dataset(ds)
        assert ds.graph.indptr.tolist() == np.asarray(arrays["indptr"]).tolist()
        assert ds.graph.indices.tolist() == np.asarray(arrays["indices"]).tolist()
        assert np.array_equal(ds.x, np.asarray(arrays["x"]).astype(np.float32))
        assert ds.y.tolist() == np.asarray(arrays["y"]).tolist()
        for m, got in zip(("train", "val", "test"), (ds.train_mask, ds.val_mask, ds.test_mask)):
            want = arrays[f"{m}_masks"][split] if f"{m}_masks" in arrays else arrays[f"{m}_mask"]
            assert np.array_equal(got, want)
    return check


@fuzz(npz_cases())
def test_npz(plan):
    with tempfile.TemporaryDirectory() as tmp:
        path, marker = Path(tmp) / "data.npz", Path(tmp) / "pickle-ran"
        write_npz_plan(path, plan, marker)
        run_case("npz", f"{plan['notes']}, {'deflated' if plan['compressed'] else 'stored'}, "
                        f"{plan['damage']}, split {plan['split']}",
                 lambda: load(path, split=plan["split"]),
                 check_npz_result(plan["arrays"], plan["split"]), names=[path], marker=marker)


# ---- 3. edge lists ------------------------------------------------------------------------------
FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def reference_edges(data: bytes) -> list[tuple[int, int]] | None:
    """The ``(src, dst)`` pairs of a strictly well-formed edge list (printable ASCII, one
    delimiter, 2 or 3 fields on every line, decimal ids, decimal weights), else None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    pairs, ncols, delimiter = [], None, None
    for line in io.StringIO(text, newline=None).read().split("\n"):
        body = line.partition("#")[0]
        if any(not (c.isascii() and (c.isprintable() or c == "\t")) for c in body):
            return None
        if not body.strip(" \t"):
            continue
        if ncols is None:
            delimiter = "," if "," in body else None
        fields = [f.strip(" \t") for f in (body.split(",") if delimiter else body.split())]
        ncols = ncols or len(fields)
        if ncols not in (2, 3) or len(fields) != ncols:
            return None
        if not all(re.fullmatch(r"[+-]?[0-9]+", f) for f in fields[:2]):
            return None
        if ncols == 3 and not FLOAT.fullmatch(fields[2]):
            return None
        s, d = int(fields[0]), int(fields[1])
        if min(s, d) < 0 or max(s, d) >= 2**63:
            return None
        pairs.append((s, d))
    return pairs


@st.composite
def edge_list_cases(draw):
    """A plan: the edge-list bytes (gzip or not, maybe cut), and optional features/labels files."""
    n, src, dst = draw(edge_arrays(max_nodes=10, max_edges=16))
    weighted = draw(st.booleans())
    rows = [[str(s), str(d)] + ([draw(st.sampled_from(("0.5", "1", "2e-3", "nan", "-inf")))]
                                if weighted else []) for s, d in zip(src, dst)]
    notes = []
    for _ in range(draw(st.integers(0, 3))):
        how = draw(st.sampled_from(("token", "drop field", "extra field", "comment", "blank",
                                    "header")))
        at = draw(st.integers(0, len(rows)))
        if how == "token" and rows and at < len(rows):
            field = draw(st.integers(0, len(rows[at]) - 1))
            rows[at][field] = draw(st.sampled_from(HOSTILE_TOKENS))
        elif how == "drop field" and at < len(rows):
            rows[at] = rows[at][:-1]
        elif how == "extra field" and at < len(rows):
            rows[at] = rows[at] + ["7"]
        elif how in ("comment", "blank", "header"):
            rows.insert(at, [{"comment": "# a comment", "blank": "",
                              "header": "src dst # columns"}[how]])
        notes.append(how)
    delimiter = draw(st.sampled_from((" ", "\t", ",", ", ", "  ")))
    text = "\n".join(delimiter.join(r) for r in rows) + draw(st.sampled_from(("\n", "", "\r\n")))
    data, damage = draw(damaged_bytes(text.encode()))
    notes.append(damage)
    gz = draw(st.sampled_from((None, "gzip", "gzip cut", "gzip name only", "directory")))
    side = {}
    for name, base in (("features", np.ones((n, 2), np.float32)), ("labels", np.arange(n) % 3)):
        form = draw(st.sampled_from((None,) * 6 + ("npy", "text", "giant", "pickle",
                                                    "directory")))
        if form:
            array, how = draw(hostile_array(base))
            if form == "giant":
                array = draw(st.sampled_from(GIANT_SHAPES))
            side[name] = (form, array)
            notes.append(f"{name}: {form}, {how if form in ('npy', 'text') else array}")
    return dict(data=data, gz=gz, side=side, notes=notes, cut=draw(st.floats(0, 1)))


def write_side_file(path: Path, form: str, array, marker: Path) -> Path:
    """A features or labels file: ``.npy`` (maybe a giant header or a pickle), text, or a
    directory in its place."""
    if form == "text":
        path = path.with_suffix(".txt")
        path.write_text("".join(" ".join(map(str, np.ravel(row))) + "\n"
                                for row in np.atleast_1d(array)))
        return path
    path = path.with_suffix(".npy")
    if form == "npy":
        path.write_bytes(npy_bytes(array))
    elif form == "giant":
        path.write_bytes(giant_npy(array, "<f4"))
    elif form == "pickle":
        path.write_bytes(npy_bytes(marker_payload(marker)))
    else:
        path.mkdir()
    return path


@fuzz(edge_list_cases())
def test_edge_list(plan):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data, gz = plan["data"], plan["gz"]
        path, marker = tmp / ("edges.txt.gz" if gz else "edges.txt"), tmp / "pickle-ran"
        if gz in ("gzip", "gzip cut"):
            packed = gzip.compress(data)
            path.write_bytes(packed if gz == "gzip" else packed[:int(plan["cut"] * len(packed))])
        elif gz == "directory":
            path.mkdir()
        else:  # None, or "gzip name only": plain text under a .gz name
            path.write_bytes(data)
        side = {name: write_side_file(tmp / name, form, array, marker)
                for name, (form, array) in plan["side"].items()}
        reference = reference_edges(data) if gz in (None, "gzip") else None

        def check(ds):
            check_dataset(ds)
            if reference is not None:
                assert edge_pairs(ds.graph) == sorted(reference)

        run_case("edge list", f"{data!r} ({gz}), {plan['notes']}",
                 lambda: load(path, features=side.get("features"), labels=side.get("labels")),
                 check, names=[path, *side.values()], marker=marker)


# ---- 4. OGB node-property directories -----------------------------------------------------------
OGB_FILES = ("raw/edge.csv.gz", "raw/node-feat.csv.gz", "raw/node-label.csv.gz",
             "raw/num-node-list.csv.gz", "split/a_time/train.csv.gz",
             "split/a_time/valid.csv.gz", "split/b_other/test.csv.gz")
HOSTILE_NODE_COUNTS = (["1000000000000"], ["-1"], ["9223372036854775807", "9223372036854775807"],
                       ["6.5"], ["abc"], ["3", "3"], [], ["7"], ["5"])


@st.composite
def ogb_cases(draw):
    """A plan: labels of the 6-node toy directory, then one hostile change to one file."""
    labels = ["0", "1", "2", "1", "0", "nan"]
    if draw(st.booleans()):
        labels[draw(st.integers(0, 5))] = draw(st.sampled_from(HOSTILE_TOKENS + ("1e300",)))
    target = draw(st.sampled_from(OGB_FILES))
    action = draw(st.sampled_from(("rows", "bytes", "plain text", "gzip cut", "delete",
                                   "directory", "node count")))
    return dict(labels=labels, count_file=draw(st.booleans()), features=draw(st.booleans()),
                target=target, action=action,
                line=draw(st.integers(0, 10)), field=draw(st.integers(0, 2)),
                token=draw(st.sampled_from(HOSTILE_TOKENS)),
                counts=draw(st.sampled_from(HOSTILE_NODE_COUNTS)),
                bad=draw(st.sampled_from(HOSTILE_BYTES)), cut=draw(st.floats(0, 1)))


def apply_ogb_plan(root: Path, plan: dict) -> None:
    path = root / plan["target"]
    action = plan["action"]
    text = gzip.decompress(path.read_bytes()) if path.exists() else b""
    if action == "node count":  # without features, the count alone sizes the graph
        path = root / "raw/num-node-list.csv.gz"
        path.write_bytes(gzip.compress("".join(f"{c}\n" for c in plan["counts"]).encode()))
        if not plan["features"]:
            (root / "raw/node-feat.csv.gz").unlink()
    elif action == "rows":
        lines = text.decode().splitlines() or [""]
        row = lines[plan["line"] % len(lines)].split(",")
        row[plan["field"] % len(row)] = plan["token"]
        lines[plan["line"] % len(lines)] = ",".join(row)
        path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    elif action == "bytes":
        pos = int(plan["cut"] * len(text))
        path.write_bytes(gzip.compress(text[:pos] + plan["bad"] + text[pos:]))
    elif action == "plain text":
        path.write_bytes(text)
    elif action == "gzip cut":
        packed = gzip.compress(text)
        path.write_bytes(packed[:int(plan["cut"] * len(packed))])
    elif action == "delete":
        path.unlink(missing_ok=True)
    elif action == "directory":
        path.unlink(missing_ok=True)
        path.mkdir(parents=True)


@fuzz(ogb_cases())
def test_ogb(plan):
    with tempfile.TemporaryDirectory() as tmp:
        root = make_ogb(Path(tmp) / "ogbn-toy", plan["labels"],
                        num_nodes_file=plan["count_file"])
        apply_ogb_plan(root, plan)
        run_case("ogb", str(plan), lambda: load(root), check_dataset, names=[root])



# ---- 6. generator specs -------------------------------------------------------------------------
# sizes that fit no machine's memory (not merely a large one: accepting those is right),
# values that are not integers or not finite, malformed text
HOSTILE_SPEC_VALUES = ("-1", "0", "31", "60", "1000000000000", "9223372036854775808",
                       "1e300", "nan", "inf", "-inf", "1e3", "", "abc", "1.5", "1_0",
                       "9" * 5000)
SPEC_VALUES = {  # small valid values, so that an accepted spec generates in milliseconds
    "rmat": {"scale": st.integers(1, 8), "edge_factor": st.integers(1, 8),
             "features": st.integers(1, 16), "classes": st.integers(1, 10),
             "a": st.floats(0, 0.6), "b": st.floats(0, 0.2), "c": st.floats(0, 0.2),
             "seed": st.integers(0, 2**64)},
    "sbm": {"nodes": st.integers(1, 300), "blocks": st.integers(1, 8),
            "avg_degree": st.floats(0.1, 20), "p_in": st.floats(0, 1),
            "degree_exponent": st.floats(1.5, 4), "features": st.integers(8, 16),
            "noise": st.floats(0, 2), "seed": st.integers(0, 2**64)},
}


@st.composite
def generator_specs(draw):
    kind = draw(st.sampled_from(tuple(SPEC_VALUES)))
    items = []
    for key, valid in SPEC_VALUES[kind].items():
        choice = draw(st.sampled_from(("default", "valid", "valid", "hostile")))
        if choice == "valid":
            items.append(f"{key}={draw(valid)}")
        elif choice == "hostile":
            items.append(f"{key}={draw(st.sampled_from(HOSTILE_SPEC_VALUES))}")
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))),
                     draw(st.sampled_from(("bogus=1", "scale", "=3", "", " ", "nodes=1=2"))))
    return f"{kind}:{','.join(items)}"


@fuzz(generator_specs())
def test_generator_spec(spec):
    run_case("generator spec", spec[:200], lambda: load(spec), check_dataset,
             names=[spec.partition(":")[0]])


