"""The split-vertex exchange (:mod:`distgnn.exchange`) in one process: every mode on P ranks
that are threads (:mod:`tests.helpers.threads_comm`), checked against the whole-graph sum
(cd-0) and the references of :mod:`tests.helpers.cdr_reference` (cd-r's bins with delays,
smoothing and the bf16 wire, the adaptive schedule), forward and backward; the bytes each
mode sends; max/min with gradient routing; state round trips; the bf16 wire on its own.

Inputs are dyadic (multiples of 1/16 with few bits): every sum and average the exchange and
the references make is exact in float64, so they must agree to the bit, rounding to bf16
included.  The transports themselves (mpi4py, torch.distributed) are tested under mpirun in
``tests/test_distributed.py``.
"""
import io
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from distgnn.comm import RankFailed
from distgnn.data.graph import NodeDataset
from distgnn.data.partitions import load
from distgnn.errors import DistGNNError
from distgnn.exchange import Exchange, SplitIndex
from distgnn.exchange.wire import Wire, row_bytes
from partition.layout import order_layout
from partition.stats import node_rows
from partition.vertex_cut import vertex_cut
from partition.write import write_dataset
from tests.helpers.cdr_reference import AdaptiveSimulation, Clones, History, Kept
from tests.helpers.graphs import build_random_graph
from tests.helpers.threads_comm import Aborted, ThreadsCommunicator, World, run_ranks

EPOCHS = 10
WIDTHS = {0: 3, 1: 2}  # two layers (keys) of different widths


def partition(tmp, graph, parts, method, order, features=None):
    """The partitions of ``graph`` (``method``, local order ``order``), loaded."""
    n = graph.num_nodes
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, 4)).astype(np.float32) if features is None else features
    ds = NodeDataset(graph, x, rng.integers(0, 3, n), np.ones(n, bool), np.zeros(n, bool),
                     np.zeros(n, bool), name="exchange")
    layout = vertex_cut(graph, parts, method, seed=0)
    ordering = order_layout(layout, graph.indptr, graph.indices, order)
    write_dataset(tmp, ds, layout, {"method": method, "seed": 0, **ordering})
    return [load(tmp, p, mmap=False) for p in range(parts)]


@pytest.fixture(scope="module", params=["libra", "ne"])
def weighted(tmp_path_factory, request):
    """A weighted random graph (a hub, isolated vertices, self-loops, duplicate edges) in 3
    libra or neighbourhood-expansion partitions stored in RCM order, with its edge list."""
    graph, src, dst, weight = build_random_graph(seed=3, n=60, e=400, weighted=True,
                                                 hub_degree=30, isolated=5, self_loops=5,
                                                 duplicates=6)
    parts = partition(tmp_path_factory.mktemp("weighted") / "p3", graph, 3, request.param,
                      "rcm")
    return SimpleNamespace(parts=parts, n=graph.num_nodes, src=src, dst=dst, weight=weight)


@pytest.fixture(scope="module")
def heavy(tmp_path_factory):
    """A random graph cut into 4 random-edge partitions: nearly every vertex is split."""
    graph, *_ = build_random_graph(seed=5, n=150, e=1200)
    parts = partition(tmp_path_factory.mktemp("heavy") / "p4", graph, 4, "random", "given")
    return SimpleNamespace(parts=parts, n=graph.num_nodes)


def dyadic(rank, epoch, gids, width, salt):
    """Distinct per rank, epoch, vertex, column and ``salt``: multiples of 1/16 in
    [-125, 125] (11 bits: bf16 must round them; float64 sums of them are exact)."""
    k = (np.asarray(gids, np.int64)[:, None] * 37 + epoch * 101 + rank * 53 + salt * 11
         + np.arange(width) * 17) % 4001 - 2000
    return k.astype(np.float64) / 16


def drive(parts, epochs, options, keys=WIDTHS, start=0, state=None, losses=None, nodes=None):
    """Train-mode exchanges of ``Exchange(**options)`` on every rank, epochs
    ``start..epochs-1``, each key forward (input ``dyadic(.., salt=key)``) and backward
    (upstream ``dyadic(.., salt=10 + key)``), then ``observe(epoch, losses[epoch])`` when
    ``losses`` are given; restored from ``state`` (one per rank) when given; ``nodes``: the
    node of each rank.  Per rank: ``fwd[(epoch, key)]``, ``bwd[(epoch, key)]`` (numpy),
    ``sent`` (``total_bytes_sent`` after each epoch), the final ``state`` (``torch.save``'d
    and loaded back as a checkpoint is) and the exchange's ``topology``."""
    def work(comm):
        part = parts[comm.rank]
        ex = Exchange(index=SplitIndex.from_partition(part), comm=comm, **options)
        if state is not None:
            ex.load_state_dict(state[comm.rank])
        gids = np.asarray(part.global_ids)
        out = SimpleNamespace(fwd={}, bwd={}, sent=[])
        for e in range(start, epochs):
            for key, width in keys.items():
                x = torch.from_numpy(dyadic(comm.rank, e, gids, width, key)).requires_grad_()
                y = ex(x * 1.0, key, e, True)  # the exchange edits y in place: not a leaf
                out.fwd[(e, key)] = y.detach().numpy().copy()
                y.backward(torch.from_numpy(dyadic(comm.rank, e, gids, width, 10 + key)))
                out.bwd[(e, key)] = x.grad.numpy()
            out.sent.append(ex.total_bytes_sent)
            if losses is not None:
                out.exact = {**getattr(out, "exact", {}), e: ex.exact_epoch(e)}
                out.drift = {**getattr(out, "drift", {}), e: ex.drift()}
                ex.observe(e, losses[e])
        buffer = io.BytesIO()
        torch.save(ex.state_dict(), buffer)
        buffer.seek(0)
        out.state = torch.load(buffer, weights_only=True)
        out.topology = ex.topology
        out.across = ex.tree.across_bytes if ex.tree is not None else None
        ex.finish()
        return out

    return run_ranks(len(parts), work, nodes)


def bf16(v):
    return torch.from_numpy(np.asarray(v, np.float64)).to(torch.bfloat16).double().numpy()


def block_scaled(bits):
    """The integer wire's rounding of a row, from its definition: per block of 32 values the
    least power of two ``s`` with ``max |v| / s <= 2^(bits-1) - 1``, then ``v / s`` rounded
    to the nearest integer (ties to even)."""
    qmax = 2 ** (bits - 1) - 1

    def rounded(v):
        v = np.atleast_1d(np.asarray(v, np.float64))
        out = np.zeros_like(v)
        for start in range(0, len(v), 32):
            block = v[start:start + 32]
            top = np.abs(block).max()
            if top == 0:
                continue
            s = 2.0 ** math.ceil(math.log2(top / qmax))
            out[start:start + 32] = np.clip(np.round(block / s), -qmax, qmax) * s
        return out
    return rounded


ROUNDING = {"bf16": bf16, "int8": block_scaled(8), "int4": block_scaled(4),
            "int2": block_scaled(2)}


# ---- the split tables --------------------------------------------------------------------------
def test_split_tables_agree_across_ranks_and_a_wrong_entry_is_named(weighted):
    """:meth:`SplitIndex.check` passes on the partitions as written; a root's table that
    lists another vertex fails on every rank with one message naming it."""
    def check(tamper):
        def work(comm):
            index = SplitIndex.from_partition(weighted.parts[comm.rank])
            if tamper and comm.rank == 1:
                index.root_global = index.root_global[::-1].copy()
            index.check(comm, weighted.parts[comm.rank])
        return run_ranks(3, work)

    check(False)
    with pytest.raises(RankFailed, match=r"rank 1: split-vertex table entry \d+ is vertex"):
        check(True)


# ---- cd-0: the sum over clones -----------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cd0_gives_every_clone_the_whole_graph_aggregate(weighted, dtype):
    """cd-0 forward turns each clone's partial ``A_p X`` into the whole graph's ``A X``,
    and its backward makes the clone gradients sum to ``A^T G`` (``G`` at root clones);
    without the exchange both fail."""
    rng = np.random.default_rng(7)
    n, src, dst, w = weighted.n, weighted.src, weighted.dst, weighted.weight.astype(np.float64)
    x, g = rng.standard_normal((n, 4)), rng.standard_normal((n, 4))
    y_ref, grad_ref = np.zeros((n, 4)), np.zeros((n, 4))
    np.add.at(y_ref, dst, w[:, None] * x[src])
    np.add.at(grad_ref, src, w[:, None] * g[dst])

    def work(comm, exchange):
        part = weighted.parts[comm.rank]
        gids, graph = np.asarray(part.global_ids), part.graph
        a = np.zeros((len(gids), len(gids)))
        rows = np.repeat(np.arange(len(gids)), np.diff(graph.indptr))
        np.add.at(a, (rows, graph.indices), graph.edge_weight)
        h = torch.from_numpy(x[gids]).to(dtype).requires_grad_()
        y = torch.from_numpy(a).to(dtype) @ h
        if exchange:
            y = Exchange(index=SplitIndex.from_partition(part), comm=comm)(y, 0, 0, True)
        root = torch.from_numpy(np.asarray(part.root_rank) == comm.rank)
        (y * torch.from_numpy(g[gids]).to(dtype))[root].sum().backward()
        return gids, y.detach().double().numpy(), h.grad.double().numpy()

    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    for exchange in (True, False):
        outs = run_ranks(3, lambda comm, exchange=exchange: work(comm, exchange))
        grad = np.zeros((n, 4))
        for gids, _, h_grad in outs:
            np.add.at(grad, gids, h_grad)
        y_right = all(np.allclose(y, y_ref[gids], **tol) for gids, y, _ in outs)
        assert y_right == exchange and np.allclose(grad, grad_ref, **tol) == exchange


@pytest.mark.parametrize("precision", ["bf16", "int8", "int2"])
def test_cd0_on_a_compressed_wire_follows_its_error_feedback(heavy, precision):
    """cd-0 on a compressed wire (``Q``: bf16, or block-scaled integers): each leaf sends
    ``W = Q(x + E)`` and keeps ``E <- x + E - W``, the root adds the leaves' ``W`` to its own
    partial and replies ``Q(total + E')`` per leaf entry; every epoch, layer and pass to the
    bit, at the wire's bytes per row (bf16: a quarter of the float64 run's own type) and not
    equal to the exact sum."""
    bf16 = ROUNDING[precision]
    options = dict(algo="cd-0", exchange_precision=precision)
    got, exact = drive(heavy.parts, 6, options), drive(heavy.parts, 6, dict(algo="cd-0"))
    clones = Clones(heavy.parts, heavy.n)
    for name, salt in (("fwd", 0), ("bwd", 10)):
        for key, width in WIDTHS.items():
            up, down = {}, {}  # residual per (vertex, leaf rank)
            for e in range(6):
                want = [dyadic(p, e, part.global_ids, width, salt + key)
                        for p, part in enumerate(heavy.parts)]
                for g in clones.split:
                    rho = clones.root[g]
                    leaves = [q for q in np.flatnonzero(clones.local[:, g] >= 0) if q != rho]
                    total = want[rho][clones.local[rho, g]].copy()
                    for q in leaves:
                        carried = up.get((g, q), 0.0) + want[q][clones.local[q, g]]
                        total += bf16(carried)
                        up[(g, q)] = carried - bf16(carried)
                    want[rho][clones.local[rho, g]] = total
                    for q in leaves:
                        carried = down.get((g, q), 0.0) + total
                        want[q][clones.local[q, g]] = bf16(carried)
                        down[(g, q)] = carried - bf16(carried)
                for p, out in enumerate(got):
                    np.testing.assert_array_equal(getattr(out, name)[(e, key)], want[p])
                    assert not np.array_equal(getattr(out, name)[(e, key)],
                                              getattr(exact[p], name)[(e, key)])
    wire_bytes = sum(row_bytes(precision, w) for w in WIDTHS.values())
    for out, fp32 in zip(got, exact):
        assert out.sent == [s * wire_bytes // (8 * sum(WIDTHS.values())) for s in fp32.sent]
        assert out.sent[0] > 0


def test_cd0_bytes_and_no_backward_exchange(heavy):
    """fp32 cd-0 sends every leaf row up and every leaf entry's row down, per layer and
    pass: ``8 d (l + L)`` bytes in float64.  Without the backward exchange (DGL's cd-0) the
    forward is the same and the gradients stay as they came."""
    full = drive(heavy.parts, 2, dict(algo="cd-0"))
    local = drive(heavy.parts, 2, dict(algo="cd-0", backward_exchange=False))
    for p, (a, b) in enumerate(zip(full, local)):
        ix = SplitIndex.from_partition(heavy.parts[p])
        rows = len(ix.leaf_ids) + len(ix.root_ids)
        assert a.sent == [8 * rows * sum(WIDTHS.values()) * 2 * (e + 1) for e in range(2)]
        assert b.sent == [s // 2 for s in a.sent]
        gids = heavy.parts[p].global_ids
        for (e, key), grad in b.bwd.items():
            np.testing.assert_array_equal(b.fwd[(e, key)], a.fwd[(e, key)])
            np.testing.assert_array_equal(grad, dyadic(p, e, gids, WIDTHS[key], 10 + key))
            assert not np.array_equal(grad, a.bwd[(e, key)])


# ---- the node-aware (two-level) cd-0 ----------------------------------------------------------
def rows_across(clones, nodes):
    """Rows one direction of one exchange sends to other nodes: ``(flat, node-aware)``."""
    flat = two_level = 0
    for g in clones.split:
        holders = np.flatnonzero(clones.local[:, g] >= 0)
        home = nodes[clones.root[g]]
        flat += sum(nodes[p] != home for p in holders)
        two_level += len({nodes[p] for p in holders}) - 1
    return flat, two_level


@pytest.mark.parametrize("nodes", [[0, 0, 1, 1], [0, 1, 0, 1], [0, 0, 0, 1], [0, 0, 0, 0]])
def test_node_aware_cd0_equals_the_flat_sum_and_sends_a_row_per_node_across(heavy, nodes):
    """With the ranks on ``nodes``, the two-level cd-0 gives every clone the same sum as the
    flat exchange, forward and backward, to the bit (dyadic inputs: every order of adding
    is exact), and sends to other nodes one row per vertex and node off its root's node,
    per direction, layer and pass: fewer rows than the flat exchange's one per leaf there,
    whenever a node holds two clones of a vertex rooted elsewhere."""
    flat = drive(heavy.parts, 3, dict(algo="cd-0"), nodes=nodes)
    two_level = drive(heavy.parts, 3, dict(algo="cd-0", topology="node"), nodes=nodes)
    for a, b in zip(flat, two_level):
        assert (a.topology, b.topology) == ("flat", "node")
        for name in ("fwd", "bwd"):
            for key in getattr(a, name):
                np.testing.assert_array_equal(getattr(b, name)[key], getattr(a, name)[key])
    rows_flat, rows_node = rows_across(Clones(heavy.parts, heavy.n), nodes)
    per_row = 8 * sum(WIDTHS.values()) * 2 * 2 * 3  # float64, both directions, passes, epochs
    assert sum(out.across for out in two_level) == rows_node * per_row
    if len(set(nodes)) == 1:
        assert rows_flat == rows_node == 0
    else:
        assert 0 < rows_node < rows_flat
    leaders = {nodes.index(n) for n in nodes}
    for p, out in enumerate(two_level):  # only leaders send across
        assert (out.across > 0) == (p in leaders and len(set(nodes)) > 1)


@pytest.mark.parametrize("nodes, chosen", [([0, 0, 1, 1], "node"), ([0, 0, 0, 0], "flat"),
                                            ([0, 1, 2, 3], "flat")])
def test_auto_topology_is_two_level_when_nodes_hold_several_ranks(heavy, nodes, chosen):
    """``auto`` makes the sum in two levels when the job spans nodes and some node holds
    several ranks; one node, or a rank per node, keeps the flat exchange.  Under cd-r the
    training schedule stays flat and the evaluation sums take the chosen topology."""
    for algo, options in (("cd-0", {}), ("cd-r", dict(delay=2))):
        out = drive(heavy.parts, 1, dict(algo=algo, topology="auto", **options), nodes=nodes)
        assert {o.topology for o in out} == {chosen}


@pytest.mark.parametrize("nodes", [[0, 0, 1, 1], [0, 1, 0, 1], [0, 0, 0, 1]])
def test_the_scaling_model_counts_the_rows_each_node_link_carries(heavy, nodes):
    """:func:`partition.stats.node_rows` (what ``distgnn-bench predict`` counts), from the clone
    sets, gives the rows of the busiest node link per alltoallv as the exchanges make
    them: the node-aware tree's leaders, and the flat exchange's leaves and leaf entries
    summed per node."""
    clones = Clones(heavy.parts, heavy.n)
    sets = {}
    for g in clones.split:
        key = (int(clones.root[g]), int(sum(1 << int(p)
                                            for p in np.flatnonzero(clones.local[:, g] >= 0))))
        sets[key] = sets.get(key, 0) + 1
    sets = [[r, m, c] for (r, m), c in sets.items()]

    def tables(comm):
        ix = SplitIndex.from_partition(heavy.parts[comm.rank])
        tree = Exchange(index=ix, comm=comm, topology="node").tree
        return len(tree.out_rows), len(tree.in_rows), ix.leaf_counts, ix.root_counts

    got = run_ranks(4, tables, nodes)
    assert node_rows(sets, nodes, "node")["across"] == max(max(o, i) for o, i, _, _ in got)
    out, into = np.zeros(max(nodes) + 1, int), np.zeros(max(nodes) + 1, int)
    for p, (_, _, leaf_counts, root_counts) in enumerate(got):
        out[nodes[p]] += sum(c for q, c in enumerate(leaf_counts) if nodes[q] != nodes[p])
        into[nodes[p]] += sum(c for q, c in enumerate(root_counts) if nodes[q] != nodes[p])
    assert node_rows(sets, nodes, "flat")["across"] == max(out.max(), into.max())


def test_one_rank_needs_no_node_tables():
    """``--exchange-topology node`` on a job of one rank: nothing is exchanged, and no
    two-level tables are built."""
    def work(comm):
        none = torch.zeros(0, dtype=torch.int64)
        index = SplitIndex(none, [0], none, [0], np.zeros(0, np.int64), np.zeros(0, np.int64))
        ex = Exchange(index=index, comm=comm, topology="node")
        y = torch.ones(3, 2)
        return ex.topology, ex.tree, ex(y, 0, 0, True) is y

    assert run_ranks(1, work) == [("flat", None, True)]


def test_evaluation_sums_are_two_level_and_exact_under_cdr(heavy):
    """cd-r with a node topology: the evaluation pass and :meth:`Exchange.exact` are the
    exact sum over clones (made in two levels); the training schedule is cd-r's own."""
    nodes = [0, 0, 1, 1]

    def work(comm):
        part = heavy.parts[comm.rank]
        ex = Exchange(index=SplitIndex.from_partition(part), comm=comm, algo="cd-r", delay=2,
                      topology="node")
        gids = np.asarray(part.global_ids)
        y = ex(torch.from_numpy(dyadic(comm.rank, 0, gids, 3, 5)), 0, 0, False)
        return y.numpy().copy(), ex.tree.across_bytes

    got = run_ranks(4, work, nodes)
    total = np.zeros((heavy.n, 3))
    for p, part in enumerate(heavy.parts):
        np.add.at(total, part.global_ids, dyadic(p, 0, part.global_ids, 3, 5))
    for part, (y, _) in zip(heavy.parts, got):
        np.testing.assert_array_equal(y, total[part.global_ids])
    assert sum(across for _, across in got) > 0


# ---- cd-r: bins, delays, smoothing, bf16 ---------------------------------------------------------
CDR = {"cd-1": dict(delay=1), "cd-2": dict(delay=2), "cd-3": dict(delay=3),
       "cd-3-smooth": dict(delay=3, smoothing=0.25),
       "cd-2-bf16": dict(delay=2, exchange_precision="bf16"),
       "cd-2-smooth-bf16": dict(delay=2, smoothing=0.25, exchange_precision="bf16"),
       "cd-2-int4": dict(delay=2, exchange_precision="int4")}


def cdr_expected(parts, n, epochs, r, gamma, wire, subtract_own=True):
    """``{(name, epoch, key): [per rank]}`` of :class:`~tests.helpers.cdr_reference.Kept`:
    each clone's fresh value plus its remote complement, forward and backward."""
    hist, clones = History(), Clones(parts, n)
    kept = Kept(hist, clones, r, gamma, subtract_own, wire)
    out = {}
    for name, direction, salt in (("fwd", "forward", 0), ("bwd", "backward", 10)):
        for e in range(epochs):
            for key, width in WIDTHS.items():
                per_rank = []
                for p, part in enumerate(parts):
                    fresh = dyadic(p, e, part.global_ids, width, salt + key)
                    hist.values[(key, direction, e, p)] = fresh
                    value = fresh.copy()
                    for i, extra in kept.complement(key, direction, e, p).items():
                        value[i] += extra
                    per_rank.append(value)
                out[(name, e, key)] = per_rank
    return out


@pytest.mark.parametrize("name", CDR)
def test_cdr_follows_the_reference_forward_and_backward(heavy, name):
    """cd-r gives each clone its fresh partial plus the stale complement that the reference
    builds from the schedule's definition (a history of every clone's values), epoch by
    epoch, for two layers, forward and on the gradients; smoothed, and through a bf16 wire
    with error feedback, alike.  A reference whose replies carry the leaf's own partial back
    (and, for bf16, one without rounding) misses it."""
    options = CDR[name]
    r, gamma = options["delay"], options.get("smoothing", 0.0)
    rounding = ROUNDING.get(options.get("exchange_precision"))
    compressed = rounding is not None
    got = drive(heavy.parts, EPOCHS, dict(algo="cd-r", **options))
    want = cdr_expected(heavy.parts, heavy.n, EPOCHS, r, gamma, rounding)
    for (what, e, key), per_rank in want.items():
        for p, out in enumerate(got):
            np.testing.assert_array_equal(getattr(out, what)[(e, key)], per_rank[p],
                                          err_msg=f"{what} epoch {e} key {key} rank {p}")
    wrong = [cdr_expected(heavy.parts, heavy.n, EPOCHS, r, gamma, rounding, subtract_own=False)]
    if compressed:
        wrong.append(cdr_expected(heavy.parts, heavy.n, EPOCHS, r, gamma, None))
    for other in wrong:
        assert any(not np.array_equal(getattr(out, what)[(e, key)], other[(what, e, key)][p])
                   for (what, e, key) in want for p, out in enumerate(got))


@pytest.mark.parametrize("name", ["cd-3", "cd-2-bf16"])
def test_cdr_sends_one_bin_per_epoch(heavy, name):
    """Each epoch, per layer and pass, a rank sends one row per leaf and per leaf entry of
    bin ``epoch mod r`` (vertex ``v`` in bin ``v mod r``): 8 bytes a value in float64, 2 on
    the bf16 wire; every bin holds some."""
    options = CDR[name]
    r, size = options["delay"], 2 if "exchange_precision" in options else 8
    got = drive(heavy.parts, EPOCHS, dict(algo="cd-r", **options))
    for part, out in zip(heavy.parts, got):
        ix = SplitIndex.from_partition(part)
        bins = np.concatenate([ix.leaf_global, ix.root_global]) % r
        assert all((bins == b).any() for b in range(r))
        per_epoch = [2 * size * sum(WIDTHS.values()) * np.count_nonzero(bins == e % r)
                     for e in range(EPOCHS)]
        assert out.sent == np.cumsum(per_epoch).tolist()


# ---- cd-r's default schedule ---------------------------------------------------------------------
# a loss that rises after epochs 2 and 6: the controller makes epochs 3 and 7 exact as well
LOSSES = [5.0, 4.0, 4.5, 4.4, 4.3, 4.2, 4.4, 4.1, 4.0, 3.9]
CONTROLLED = dict(algo="cd-r", delay=1, controlled=True)


def test_default_schedule_is_exact_or_one_epoch_stale_as_the_controller_decides(heavy):
    """Under cd-r's default schedule epoch ``e`` is exact when ``e = 0``, ``e`` is even or
    the loss rose the epoch before (every rank agrees), and then equals cd-0; a stale
    epoch follows an exact one, so each clone gets its fresh partial plus the other clones'
    partials of the epoch before, ``x_p(e) + sum_{q != p} x_q(e - 1)``, forward and
    backward.  An exact epoch sends what cd-1 sends each epoch; a stale one, nothing."""
    got = drive(heavy.parts, EPOCHS, CONTROLLED, losses=LOSSES)
    cd0 = drive(heavy.parts, EPOCHS, dict(algo="cd-0"))
    cd1 = drive(heavy.parts, EPOCHS, dict(algo="cd-r", delay=1))
    exact = {0, 2, 3, 4, 6, 7, 8}
    for p, (out, ref) in enumerate(zip(got, cd0)):
        assert out.exact == {e: e in exact for e in range(EPOCHS)}
        per_epoch = cd1[p].sent[0]
        assert out.sent == np.cumsum([per_epoch * (e in exact) for e in range(EPOCHS)]).tolist()
        gids = heavy.parts[p].global_ids
        for (e, key), y in out.fwd.items():
            for what, salt in (("fwd", key), ("bwd", 10 + key)):
                mine = getattr(out, what)[(e, key)]
                if e in exact:
                    np.testing.assert_array_equal(mine, getattr(ref, what)[(e, key)])
                else:
                    before = getattr(ref, what)[(e - 1, key)]
                    np.testing.assert_array_equal(mine, dyadic(p, e, gids, WIDTHS[key], salt)
                                                  + before - dyadic(p, e - 1, gids,
                                                                    WIDTHS[key], salt))
                    assert not np.array_equal(mine, getattr(ref, what)[(e, key)])


def test_exact_epochs_measure_the_drift_of_the_remote_terms(heavy):
    """An exact epoch ``e`` after an exact epoch ``e'`` measures, per rank and direction,
    ``sum_v ||r_v(e) - r_v(e')||^2`` and ``sum_v ||a_v(e)||^2`` over the split clones ``v``
    here, ``a_v`` the exact sum and ``r_v = a_v - x_v`` what the other clones add (cd-0's
    outputs less this rank's inputs); the first exact epoch and stale ones measure nothing."""
    got = drive(heavy.parts, EPOCHS, CONTROLLED, losses=LOSSES)
    cd0 = drive(heavy.parts, EPOCHS, dict(algo="cd-0"))
    exact = sorted(e for e, x in got[0].exact.items() if x)
    for p, (out, ref) in enumerate(zip(got, cd0)):
        index = SplitIndex.from_partition(heavy.parts[p])
        rows = np.unique(np.concatenate([index.root_ids.numpy(), index.leaf_ids.numpy()]))
        gids = heavy.parts[p].global_ids
        assert {e for e, d in out.drift.items() if d} == set(exact[1:])
        for before, e in zip(exact, exact[1:]):
            for field, what, salt in (("stale_drift", "fwd", 0), ("stale_drift_grad", "bwd", 10)):
                for key, width in WIDTHS.items():
                    def remote(epoch):
                        return (getattr(ref, what)[(epoch, key)]
                                - dyadic(p, epoch, gids, width, salt + key))[rows]
                    moved, total = out.drift[e][field][str(key)]
                    assert moved == ((remote(e) - remote(before)) ** 2).sum()
                    assert total == (getattr(ref, what)[(e, key)][rows] ** 2).sum()
                    assert moved > 0


def test_default_schedule_keeps_narrow_layers_exact_every_epoch(heavy):
    """A layer whose rows take at most a quarter of the widest layer's bytes (2 columns
    against 8) equals cd-0 in every epoch, forward and backward, sends every epoch (what it
    sends alone in its first, exact, epoch) and measures no drift (nothing stale is ever
    added there); the wide layer keeps the controller's stale epochs and sends what it sends
    alone.  At 3 columns against 8 no layer is held exact."""
    def run(keys, **options):
        return drive(heavy.parts, EPOCHS, {**CONTROLLED, **options}, keys=keys, losses=LOSSES)
    got, cd0 = run({0: 8, 1: 2}), run({0: 8, 1: 2}, algo="cd-0")
    narrow, wide = run({1: 2}), run({0: 8})
    stale = [e for e, exact in got[0].exact.items() if not exact]
    assert stale
    for out, ref, alone, wide_alone in zip(got, cd0, narrow, wide):
        for what in ("fwd", "bwd"):
            for e in range(EPOCHS):
                np.testing.assert_array_equal(getattr(out, what)[(e, 1)],
                                              getattr(ref, what)[(e, 1)])
                assert np.array_equal(getattr(out, what)[(e, 0)],
                                      getattr(ref, what)[(e, 0)]) == (e not in stale)
        assert all(set(d.get("stale_drift", {})) == {"0"} for d in out.drift.values() if d)
        assert np.diff([0, *out.sent]).tolist() == [
            alone.sent[0] + w for w in np.diff([0, *wide_alone.sent])]
    wider, wider_cd0 = run({0: 8, 1: 3}), run({0: 8, 1: 3}, algo="cd-0")
    assert all(not np.array_equal(wider[0].fwd[(e, 1)], wider_cd0[0].fwd[(e, 1)])
               for e in stale)


def test_default_schedule_resumes_exactly_and_refuses_another_schedule(heavy):
    """The controller's memory (the last two losses) travels in the exchange's state: a run
    restored after 5 epochs decides and computes as the uninterrupted one; a state of the
    default schedule does not load into plain cd-1, nor the other way round."""
    whole = drive(heavy.parts, EPOCHS, CONTROLLED, losses=LOSSES)
    first = drive(heavy.parts, 5, CONTROLLED, losses=LOSSES)
    rest = drive(heavy.parts, EPOCHS, CONTROLLED, start=5, losses=LOSSES,
                 state=[out.state for out in first])
    for a, c in zip(whole, rest):
        assert {e: a.exact[e] for e in c.exact} == c.exact
        for k in c.fwd:
            np.testing.assert_array_equal(c.fwd[k], a.fwd[k])
            np.testing.assert_array_equal(c.bwd[k], a.bwd[k])
    index = SplitIndex.from_partition(heavy.parts[0])
    comm = ThreadsCommunicator(World(4), 0)
    plain = drive(heavy.parts, 2, dict(algo="cd-r", delay=1))[0].state
    for state, options in ((first[0].state, dict(algo="cd-r", delay=1)), (plain, CONTROLLED)):
        with pytest.raises(DistGNNError, match="default schedule"):
            Exchange(index=index, comm=comm, **options).load_state_dict(state)


# ---- the adaptive schedule ---------------------------------------------------------------------
@pytest.mark.parametrize("budget, precision", [(0.3, "fp32"), (0.5, "bf16"), (2.0, "fp32")])
def test_adaptive_schedule_follows_the_reference(heavy, budget, precision):
    """Under a byte budget each rank sends, per peer block, the rows that moved most since
    last sent (the reference: :class:`~tests.helpers.cdr_reference.AdaptiveSimulation`),
    and exactly the bytes the reference counts, forward and backward, for two layers.  The
    budget bounds the bytes to ``F`` times cd-0's; a budget that sends every row is cd-r
    with delay 1."""
    compressed = precision == "bf16"
    got = drive(heavy.parts, EPOCHS, dict(algo="cd-r", delay=1, comm_budget=budget,
                                          exchange_precision=precision))
    cd0 = drive(heavy.parts, EPOCHS, dict(algo="cd-0"))
    sims = {(what, key): AdaptiveSimulation(heavy.parts, budget, width * (2 if compressed else 8),
                                            bf16 if compressed else None)
            for what in ("fwd", "bwd") for key, width in WIDTHS.items()}
    sent = np.zeros((len(heavy.parts), EPOCHS), np.int64)
    for e in range(EPOCHS):
        for (what, key), sim in sims.items():
            salt = key + (10 if what == "bwd" else 0)
            outs, nbytes = sim.epoch([dyadic(p, e, part.global_ids, WIDTHS[key], salt)
                                      for p, part in enumerate(heavy.parts)])
            sent[:, e] += nbytes
            for p, out in enumerate(got):
                np.testing.assert_array_equal(getattr(out, what)[(e, key)], outs[p],
                                              err_msg=f"{what} epoch {e} key {key} rank {p}")
    for p, (out, exact) in enumerate(zip(got, cd0)):
        assert out.sent == np.cumsum(sent[p]).tolist()
        assert out.sent[-1] <= budget * exact.sent[-1]
    if budget >= 2:
        delay1 = drive(heavy.parts, EPOCHS, dict(algo="cd-r", delay=1))
        for a, b in zip(got, delay1):
            assert all(np.array_equal(a.fwd[k], b.fwd[k]) and np.array_equal(a.bwd[k], b.bwd[k])
                       for k in a.fwd)
    else:
        assert any(not np.array_equal(a.fwd[k], b.fwd[k]) for a, b in zip(got, cd0)
                   for k in a.fwd)


# ---- evaluation and exact sums under cd-r ------------------------------------------------------
def test_evaluation_and_exact_sums_stay_exact_under_cdr(heavy):
    """Under cd-r with a bf16 wire, an evaluation pass and :meth:`Exchange.exact` (forward
    and backward) are the exact fp32 sum over clones, between training epochs, and leave
    the training schedule as it was."""
    def work(comm):
        part = heavy.parts[comm.rank]
        ex = Exchange(index=SplitIndex.from_partition(part), comm=comm, algo="cd-r", delay=2,
                      exchange_precision="bf16")
        gids, out = np.asarray(part.global_ids), {}
        for e in range(4):
            x = torch.from_numpy(dyadic(comm.rank, e, gids, 3, 0))
            out[("train", e)] = ex(x.clone(), 0, e, True).numpy().copy()
            out[("eval", e)] = ex(torch.from_numpy(dyadic(comm.rank, e, gids, 3, 5)), 0, e,
                                  False).numpy().copy()
            h = torch.from_numpy(dyadic(comm.rank, e, gids, 4, 6)).requires_grad_()
            y = ex.exact(h * 1.0)
            y.backward(torch.from_numpy(dyadic(comm.rank, e, gids, 4, 7)))
            out[("exact", e)], out[("exact grad", e)] = y.detach().numpy().copy(), h.grad.numpy()
        ex.finish()
        return out

    got = run_ranks(4, work)
    plain = drive(heavy.parts, 4, dict(algo="cd-r", delay=2, exchange_precision="bf16"),
                  keys={0: 3})
    for e in range(4):
        for what, salt, width in (("eval", 5, 3), ("exact", 6, 4), ("exact grad", 7, 4)):
            total = np.zeros((heavy.n, width))
            for p, part in enumerate(heavy.parts):
                np.add.at(total, part.global_ids, dyadic(p, e, part.global_ids, width, salt))
            for part, out in zip(heavy.parts, got):
                np.testing.assert_array_equal(out[(what, e)], total[part.global_ids])
        for out, alone in zip(got, plain):
            np.testing.assert_array_equal(out[("train", e)], alone.fwd[(e, 0)])


# ---- max and min -----------------------------------------------------------------------------
@pytest.mark.parametrize("reduce", ["max", "min"])
def test_extreme_over_clones_routes_each_gradient_to_one_clone(weighted, reduce):
    """``max``/``min`` over clones of partial extremes (integer features: many ties) gives
    every clone the whole graph's extreme over in-edges (0 without any); each element's
    gradient, summed over clones, goes to the clone that attained it: the root on a tie,
    else the first leaf entry the root lists."""
    rng = np.random.default_rng(2)
    n, src, dst = weighted.n, weighted.src, weighted.dst
    x = rng.integers(0, 4, (n, 3)).astype(np.float64)
    pick, fill = (np.maximum, -np.inf) if reduce == "max" else (np.minimum, np.inf)
    whole = np.full((n, 3), fill)
    pick.at(whole, dst, x[src])
    whole[np.isinf(whole)] = 0.0

    def work(comm):
        part = weighted.parts[comm.rank]
        gids, graph = np.asarray(part.global_ids), part.graph
        empty = np.diff(graph.indptr) == 0
        partial = np.full((len(gids), 3), fill)
        pick.at(partial, np.repeat(np.arange(len(gids)), np.diff(graph.indptr)),
                x[gids][graph.indices])
        h = torch.from_numpy(np.where(empty[:, None], 9.0, partial)).requires_grad_()
        ex = Exchange(index=SplitIndex.from_partition(part), comm=comm)
        y = ex.extreme(h * 1.0, reduce, torch.from_numpy(empty))  # 9.0 takes no part
        y.backward(torch.from_numpy(dyadic(comm.rank, 0, gids, 3, 1)))
        return y.detach().numpy(), h.grad.numpy(), partial

    got = run_ranks(3, work)
    for part, (y, _, _) in zip(weighted.parts, got):
        np.testing.assert_array_equal(y, whole[part.global_ids])
    clones = Clones(weighted.parts, n)
    grad_sum = np.zeros((n, 3))
    for p, part in enumerate(weighted.parts):
        np.add.at(grad_sum, part.global_ids, dyadic(p, 0, part.global_ids, 3, 1))
    ties = 0
    for g in range(n):
        rho = clones.root[g]  # then the leaves in the order the root's table lists them
        root_part = weighted.parts[rho]
        entries = np.flatnonzero(np.asarray(root_part.leaf_root_local) == clones.local[rho, g])
        order = [rho, *(np.searchsorted(root_part.leaf_ptr, entries, side="right") - 1)]
        values = np.array([got[q][2][clones.local[q, g]] for q in order])
        attained = values == (values.max(0) if reduce == "max" else values.min(0))
        ties += int((attained.sum(0) > 1).sum())
        winner = np.argmax(attained, axis=0)
        for j, q in enumerate(order):
            np.testing.assert_array_equal(got[q][1][clones.local[q, g]],
                                          np.where(winner == j, grad_sum[g], 0.0))
    assert ties > 10 and len(clones.split) > 10


# ---- state: round trips and refusals -------------------------------------------------------------
ROUND_TRIPS = {"cd-0-bf16": dict(algo="cd-0", exchange_precision="bf16"),
               "cd-3-smooth-bf16": dict(algo="cd-r", delay=3, smoothing=0.25,
                                        exchange_precision="bf16"),
               "adaptive": dict(algo="cd-r", delay=1, comm_budget=0.4),
               "cd-0": dict(algo="cd-0")}


@pytest.mark.parametrize("name", ROUND_TRIPS)
def test_a_restored_exchange_continues_as_the_uninterrupted_one(heavy, name):
    """The state after 4 epochs (through ``torch.save``/``torch.load(weights_only=True)``
    as a checkpoint stores it), loaded into a new exchange on new ranks, gives the epochs
    after it to the bit; every state is tagged with its kind."""
    options = ROUND_TRIPS[name]
    whole = drive(heavy.parts, 8, options)
    first = drive(heavy.parts, 4, options)
    rest = drive(heavy.parts, 8, options, start=4, state=[out.state for out in first])
    kind = {"cd-0": "exact"}.get(options["algo"], "adaptive" if "comm_budget" in options
                                 else "delayed")
    for a, b, c in zip(whole, first, rest):
        assert b.state["kind"] == kind and {s["kind"] for s in b.state["layers"].values()} == {kind}
        assert set(b.state["layers"]) == {f"{k}/{d}" for k in WIDTHS for d in ("forward",
                                                                                 "backward")}
        for k in c.fwd:
            np.testing.assert_array_equal(c.fwd[k], a.fwd[k])
            np.testing.assert_array_equal(c.bwd[k], a.bwd[k])
    if name != "cd-0":  # the state matters: a fresh exchange does otherwise
        fresh = drive(heavy.parts, 8, options, start=4)
        assert any(not np.array_equal(f.fwd[k], a.fwd[k]) for f, a in zip(fresh, whole)
                   for k in f.fwd)


def test_a_state_of_another_kind_or_shape_is_refused_with_one_line(heavy):
    """An exchange refuses another kind's state (another algorithm or schedule), an
    untagged one (written before states were tagged) and one of another delay or
    precision, each with one line that says what does not fit."""
    states = {name: drive(heavy.parts, 2, options)[0].state
              for name, options in ROUND_TRIPS.items()}
    index = SplitIndex.from_partition(heavy.parts[0])
    comm = ThreadsCommunicator(World(4), 0)  # loading sends nothing

    def load_into(state, **options):
        Exchange(index=index, comm=comm, **options).load_state_dict(state)

    cases = [(states["cd-3-smooth-bf16"], ROUND_TRIPS["cd-0-bf16"],
              "state is of kind 'delayed'; this run's is of kind 'exact'"),
             (states["adaptive"], dict(algo="cd-r", delay=3),
              "state is of kind 'adaptive'; this run's is of kind 'delayed'"),
             (states["cd-3-smooth-bf16"]["layers"], ROUND_TRIPS["cd-3-smooth-bf16"],
              "state is untagged"),
             (states["cd-3-smooth-bf16"], dict(algo="cd-r", delay=2, smoothing=0.25,
                                               exchange_precision="bf16"),
              "does not fit this partition, delay and exchange precision"),
             (states["cd-0-bf16"], dict(algo="cd-0"),
              "does not fit this partition and exchange precision")]
    for state, options, message in cases:
        with pytest.raises(DistGNNError, match=message) as caught:
            load_into(state, **options)
        assert "\n" not in str(caught.value)
    load_into(states["cd-3-smooth-bf16"], **ROUND_TRIPS["cd-3-smooth-bf16"])  # its own: fine


# ---- the bf16 wire -------------------------------------------------------------------------------
# the largest rounding error of a wire, relative to the largest value of the block
STEP = {"bf16": 2.0 ** -8, "int8": 1 / 127, "int4": 1 / 7, "int2": 1.0}


@pytest.mark.parametrize("precision, width", [("bf16", 4), ("int8", 70), ("int4", 5),
                                              ("int2", 33)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_error_feedback_carries_the_rounding_into_later_sends(dtype, precision, width):
    """``sum decode(encode(x_k)) + residual == sum x_k`` for a run of sends (exactly, up to the
    run's own rounding), the residual stays within a step of the wire, each row takes the
    wire's bytes (integers: a scale byte per 32 values and the packed codes), an all-zero
    row travels as zeros, and the wire agrees with its definition (:func:`block_scaled`)."""
    rng = np.random.default_rng(0)
    wire = Wire(precision, dtype, width)
    values = [torch.from_numpy(rng.standard_normal((50, width)) * 3
                               * rng.uniform(0, 2, (50, 1))).to(dtype) for _ in range(40)]
    values[0][7] = 0
    residual = torch.zeros(50, width, dtype=dtype)
    out = wire.buffer(50, width, "cpu")
    assert out.element_size() * out.shape[1] == row_bytes(precision, width) == wire.row_bytes
    received = torch.zeros(50, width, dtype=dtype)
    for i, x in enumerate(values):
        before = residual.clone()
        wire.encode(x, out, residual)
        got = wire.decode(out)
        want = [ROUNDING[precision](row) for row in (x + before).double().numpy()]
        np.testing.assert_allclose(got.double().numpy(), np.array(want), rtol=0,
                                   atol=1e-4 if dtype == torch.float32 else 0)
        received += got
        bound = STEP[precision] * (x + before).abs().amax(1, keepdim=True)
        assert torch.all(residual.abs() <= bound * (1 + 1e-6) + 1e-30)
        if i == 0:
            assert torch.all(got[7] == 0) and torch.all(residual[7] == 0)
    meant = sum(values)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(received + residual, meant, rtol=tol, atol=tol)


def test_without_feedback_a_repeated_value_drifts_and_with_it_does_not():
    """Sending the same value 64 times: rounding each send alone adds up to 64 times its
    error; with feedback the total stays within one bf16 step."""
    wire = Wire("bf16", torch.float64)
    x = torch.full((1, 3), 1.0 + 3 * 2.0 ** -10, dtype=torch.float64)
    residual = torch.zeros(1, 3, dtype=torch.float64)
    out = wire.buffer(1, 3, "cpu")
    received = torch.zeros(1, 3, dtype=torch.float64)
    for _ in range(64):
        wire.encode(x, out, residual)
        received += wire.decode(out)
    assert torch.all((received - 64 * x).abs() <= 2.0 ** -7)
    assert torch.all((64 * x.to(torch.bfloat16).to(torch.float64) - 64 * x).abs() >= 2.0 ** -5)


def test_rows_select_which_residuals_a_send_uses():
    """A send of some rows reads and updates only those rows' residuals."""
    wire = Wire("bf16", torch.float32)
    residual = torch.zeros(6, 2)
    residual[0] = 7.0
    rows = torch.tensor([1, 4])
    x = torch.full((2, 2), 1.0 + 2.0 ** -10)  # not representable in bf16
    out = wire.buffer(2, 2, "cpu")
    wire.encode(x, out, residual, rows)
    assert torch.all(wire.decode(out) == 1.0)
    assert torch.all(residual[rows] == 2.0 ** -10)
    assert torch.all(residual[0] == 7.0) and torch.all(residual[[2, 3, 5]] == 0)


def test_fp32_wire_sends_the_values_themselves():
    wire = Wire("fp32", torch.float32)
    x = torch.randn(3, 2)
    assert wire.carrier(x) is x and wire.decode(x) is x
    out = torch.empty(3, 2)
    wire.encode(x, out, None)
    assert torch.equal(out, x)


# ---- the in-process communicator the tests above run on --------------------------------------
def test_threads_communicator_matches_collectives_in_call_order_and_fails_fast():
    """alltoallv blocks go to their ranks; an ialltoallv started before a blocking one
    completes with its own data; reductions and broadcast agree on every rank; counts that
    do not match, and a rank that fails, raise instead of hanging."""
    def work(comm):
        r, size = comm.rank, comm.size
        send = torch.tensor([[10.0 * r + q] for q in range(size) for _ in range(q + 1)])
        counts, recv_counts = [q + 1 for q in range(size)], [r + 1] * size
        later = torch.zeros(sum(recv_counts), 1)
        handle = comm.ialltoallv(send, counts, later, recv_counts)
        now = torch.zeros(sum(recv_counts), 1)
        comm.alltoallv(send * 2, counts, now, recv_counts)
        assert not later.any()  # written at wait(), as MPI may
        handle.wait()
        total = torch.tensor([float(r)])
        comm.allreduce(total, "sum")
        top = torch.tensor([float(r)])
        comm.allreduce(top, "max")
        value = torch.tensor([float(r) + 5])
        comm.broadcast(value, root=2)
        comm.barrier()
        return later.squeeze(1).tolist(), now.squeeze(1).tolist(), total.item(), top.item(), \
            value.item()

    for r, (later, now, total, top, value) in enumerate(run_ranks(3, work)):
        assert later == [10.0 * q + r for q in range(3) for _ in range(r + 1)]
        assert now == [2 * v for v in later]
        assert (total, top, value) == (3.0, 2.0, 7.0)

    def wrong_counts(comm):
        comm.alltoallv(torch.zeros(2, 1), [1, 1], torch.zeros(2, 1),
                       [1, 1] if comm.rank == 0 else [2, 0])

    with pytest.raises(DistGNNError, match="rank 0 sends rank 1 1 rows but it expects 2"):
        run_ranks(2, wrong_counts)

    def one_fails(comm):
        if comm.rank == 1:
            raise ValueError("boom")
        comm.barrier()

    with pytest.raises(ValueError, match="boom"):
        run_ranks(3, one_fails)
    with pytest.raises(Aborted):
        run_ranks(2, lambda comm: comm.abort(3) if comm.rank == 0 else comm.barrier())
