"""The fused passes: the normalised aggregation in one kernel pass each way (scales, self-loop,
bf16 rows in and out), a symmetric graph's transpose, the one-pass masked cross-entropy, and
the keyed dropout of bf16 rows -- each against the separate operations it replaces."""
import numba
import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from distgnn.data.graph import CSRGraph
from distgnn.kernels.blocking import plan_spmm
from distgnn.kernels.lanes import BF16
from distgnn.kernels.loss import exp_nonpositive
from distgnn.kernels.spmm import spmm
from distgnn.nn.aggregate import Neighbourhood, Propagate
from distgnn.nn.backends import get_backend
from distgnn.nn.dropout import vertex_dropout
from distgnn.nn.loss import masked_cross_entropy
from distgnn.timing import PhaseTimer


def bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(BF16)


def from_bits(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)


@pytest.mark.parametrize("hub_block", [0, 7])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("width", [3, 16, 40])
def test_fused_kernel_is_the_scaled_loop_sum(random_graph, hub_block, weighted, width):
    """r * ((A + I)(q * x)) against scipy, over one source block and several (whose partial
    sums are read back between blocks), with and without edge weights."""
    graph, src, dst, weight = random_graph(seed=5, n=60, e=400, weighted=weighted,
                                           hub_degree=50)
    n, rng = graph.num_nodes, np.random.default_rng(1)
    x = rng.standard_normal((n, width)).astype(np.float32)
    q, r = rng.uniform(0.5, 2, n).astype(np.float32), rng.uniform(0.5, 2, n).astype(np.float32)
    a = sp.coo_matrix((np.ones(len(src)) if weight is None else weight.astype(np.float64),
                       (dst, src)), shape=(n, n)).tocsr()
    expected = r[:, None] * (a @ (q[:, None] * x) + q[:, None] * x)
    plan = plan_spmm(graph.indptr, graph.indices, graph.edge_weight, hub_block, n)
    got = spmm(graph.indptr, graph.indices, x, "sum", graph.edge_weight, plan=plan,
               source_scale=q, row_scale=r, self_loop=True)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # bf16 rows in and out: the float32 result rounded once (one block), to nearest even
    xb = torch.from_numpy(x).bfloat16()
    out = np.empty((n, width), BF16)
    spmm(graph.indptr, graph.indices, bits(xb), "sum", graph.edge_weight, out=out, plan=plan,
         source_scale=q, row_scale=r, self_loop=True)
    wide = spmm(graph.indptr, graph.indices, bits(xb), "sum", graph.edge_weight, plan=plan,
                source_scale=q, row_scale=r, self_loop=True)
    if hub_block == 0:
        assert torch.equal(from_bits(out), torch.from_numpy(wide).bfloat16())
    else:  # the partial of the first block rounded too: an error of its size's rounding
        torch.testing.assert_close(from_bits(out).float(), torch.from_numpy(wide),
                                   rtol=2 ** -7, atol=2 ** -7 * float(np.abs(wide).max()))


def test_fused_options_are_refused_with_a_reduction_they_do_not_serve(random_graph):
    graph = random_graph()[0]
    x = np.ones((graph.num_nodes, 4), np.float32)
    with pytest.raises(ValueError, match="go with sum"):
        spmm(graph.indptr, graph.indices, x, "mean", self_loop=True)


@pytest.mark.parametrize("weighted", [False, True])
def test_propagate_gradients_match_autograd_of_the_separate_operations(random_graph,
                                                                       weighted):
    graph = random_graph(seed=3, n=50, e=300, weighted=weighted)[0]
    nbr = Neighbourhood(graph, get_backend("numba"), dtype=torch.float64)
    rng = np.random.default_rng(2)
    q = torch.from_numpy(rng.uniform(0.5, 2, (50, 1)))
    r = torch.from_numpy(rng.uniform(0.5, 2, (50, 1)))
    x = torch.from_numpy(rng.standard_normal((50, 6))).requires_grad_()
    torch.autograd.gradcheck(
        lambda x: Propagate.apply(x, graph, nbr.backend, q, r, PhaseTimer()), (x,))
    fused = nbr.loop_sum(x, q, r)
    separate = nbr.self_loop(nbr.reduce(q * x, "sum"), q * x, r, divide=False)
    g = torch.from_numpy(rng.standard_normal((50, 6)))
    (a,) = torch.autograd.grad(fused, x, g)
    (b,) = torch.autograd.grad(separate, x, g)
    torch.testing.assert_close(fused, separate)
    torch.testing.assert_close(a, b)


def test_symmetric_graph_is_its_own_transpose_and_a_directed_one_is_not(random_graph):
    directed = random_graph(seed=4)[0]
    t = directed.transpose()
    assert t is not directed
    src, dst = directed.edges()
    ts, td = t.edges()
    assert sorted(zip(src.tolist(), dst.tolist())) == sorted(zip(td.tolist(), ts.tolist()))
    both_src, both_dst = np.r_[src, dst], np.r_[dst, src]
    order = np.lexsort((both_src, both_dst))  # each row's sources in order, as loaders give
    both_src, both_dst = both_src[order], both_dst[order]
    symmetric = CSRGraph.from_edges(both_src, both_dst, directed.num_nodes)
    assert symmetric.transpose() is symmetric
    weights = np.arange(1, len(both_src) + 1, dtype=np.float32)  # u->v and v->u differ
    weighted = CSRGraph.from_edges(both_src, both_dst, directed.num_nodes, weights)
    assert weighted.transpose() is not weighted
    even = CSRGraph.from_edges(both_src, both_dst, directed.num_nodes,
                               np.ones(len(both_src), np.float32))
    assert even.transpose() is even


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masked_cross_entropy_equals_torchs_loss_and_gradient(dtype):
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(5000, 7, generator=gen, dtype=dtype) * 8).requires_grad_()
    labels = torch.randint(0, 7, (5000,), generator=gen)
    mask = torch.rand(5000, generator=gen) < 0.3
    ours = masked_cross_entropy(logits, labels, mask, 321.0)
    theirs = F.cross_entropy(logits[mask], labels[mask], reduction="sum") / 321.0
    (a,) = torch.autograd.grad(ours * 3, logits)
    (b,) = torch.autograd.grad(theirs * 3, logits)
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(ours, theirs, rtol=tol, atol=0)
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    assert ours.dtype == dtype and not a[~mask].any()


@numba.njit
def _exp_each(x, out):
    for i in range(len(x)):
        out[i] = exp_nonpositive(x[i])


def test_the_vectorised_exponential_is_within_one_unit_in_the_last_place():
    x = np.concatenate([np.linspace(-87.3, 0, 200_001, dtype=np.float32),
                        -np.random.default_rng(0).exponential(3, 100_000).astype(np.float32)])
    x = x[x >= -87.3]
    ours = np.empty_like(x)
    _exp_each(x, ours)
    exact = np.exp(x.astype(np.float64))
    assert np.max(np.abs(ours - exact) / np.spacing(exact.astype(np.float32))) <= 1.0
    edges = np.array([np.nan, -np.inf, -1000.0, 0.0], np.float32)
    out = np.empty_like(edges)
    _exp_each(edges, out)
    assert np.isnan(out[0]) and out[3] == 1.0
    assert 0 < out[1] == out[2] < 1.2e-38  # the smallest normal, not a denormal
    wide = np.array([-700.0, -1.5])
    out = np.empty_like(wide)
    _exp_each(wide, out)
    np.testing.assert_array_equal(out, np.exp(wide))  # float64: math.exp's


def test_masked_cross_entropy_refuses_a_label_out_of_range():
    labels = torch.tensor([0, 9, 1])
    with pytest.raises(ValueError, match="labels outside 0..2"):
        masked_cross_entropy(torch.zeros(3, 3), labels, torch.ones(3, dtype=torch.bool), 3.0)
    # an unmasked row's label is never read
    masked_cross_entropy(torch.zeros(3, 3), labels, torch.tensor([True, False, True]), 2.0)


def test_dropout_of_bf16_rows_is_the_float32_dropout_rounded():
    x = torch.randn(300, 37, generator=torch.Generator().manual_seed(1))
    ids = np.arange(1000, 1300, dtype=np.int64)
    xb = x.bfloat16()
    got = vertex_dropout(xb, ids, 0.3, 12345)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, vertex_dropout(xb.float(), ids, 0.3, 12345).bfloat16())
    g = torch.randn(300, 37).bfloat16()
    h = xb.clone().requires_grad_()
    (grad,) = torch.autograd.grad(vertex_dropout(h, ids, 0.3, 12345), h, g)
    assert torch.equal(grad, vertex_dropout(g.float(), ids, 0.3, 12345).bfloat16())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [0.0, 0.5])
@pytest.mark.parametrize("shape", [(403, 40, 7), (64, 16, 16), (9, 19, 21)])
def test_epilogue_with_projection_is_the_epilogue_then_the_product(dtype, p, shape):
    """h = dropout(relu(x + b)); z = h W^T and every gradient, against the separate fused
    epilogue and F.linear: float32 to rounding, bf16 to its rounding of z; row counts not a
    multiple of the kernels' row blocks, class counts over one register panel."""
    from distgnn.nn.dropout import bias_relu_dropout, bias_relu_dropout_project

    n, d, c = shape
    gen = torch.Generator().manual_seed(n)
    x = torch.randn(n, d, generator=gen).to(dtype)
    b, w = torch.randn(d, generator=gen), torch.randn(c, d, generator=gen)
    ids = np.arange(n, dtype=np.int64) * 5 + 2
    g = torch.randn(n, c, generator=gen).to(dtype)
    ours = [t.clone().requires_grad_() for t in (x, b, w)]
    theirs = [t.clone().requires_grad_() for t in (x, b, w)]
    z = bias_relu_dropout_project(*ours, ids, p, 77)
    h = bias_relu_dropout(theirs[0], theirs[1], ids, p, 77)
    expected = F.linear(h.float(), theirs[2])
    assert z.dtype == dtype and z.shape == (n, c)
    rtol = 1e-5 if dtype == torch.float32 else 2 ** -7
    scale = float(expected.abs().max())
    torch.testing.assert_close(z.float(), expected, rtol=rtol, atol=rtol * scale)
    got = torch.autograd.grad(z, ours, g)
    want = torch.autograd.grad(expected, theirs, g.float())
    for a, e in zip(got, want):
        torch.testing.assert_close(a.float(), e.float(), rtol=rtol,
                                   atol=rtol * float(e.float().abs().max()))


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_models_fuse_the_last_projection_only_where_it_applies(model):
    from distgnn.nn.models import GNN

    assert GNN(model, 32, 16, 4).projects_last()
    assert not GNN(model, 32, 16, 40).projects_last()  # the last layer aggregates first
    assert not GNN(model, 32, 16, 4, num_layers=1).projects_last()
    assert not GNN("sage", 32, 16, 4, aggregator="mean").projects_last()  # W_r h too
    assert not GNN("gin", 32, 16, 4).projects_last()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_epilogues_written_over_their_input_give_the_same_values_and_gradients(dtype):
    """overwrite=True: the epilogue's activation takes the product's memory (bias_relu_dropout
    returns it; the projecting one keeps it), the values and gradients those of the epilogue
    that allocates; the projecting one's backward pass, written over what it kept, runs once."""
    from distgnn.nn.dropout import bias_relu_dropout, bias_relu_dropout_project

    n, d, c = 403, 40, 7  # two of the kernels' tasks of rows, the second with a tail
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(n, d, generator=gen).to(dtype)
    b, w = torch.randn(d, generator=gen), torch.randn(c, d, generator=gen)
    ids = np.arange(n, dtype=np.int64) * 3 + 1
    g_h, g_z = torch.randn(n, d, generator=gen).to(dtype), torch.randn(n, c, generator=gen)
    for project, grad in ((False, g_h), (True, g_z.to(dtype))):
        outs, grads, inputs = [], [], []
        for overwrite in (False, True):
            xi = (x.clone() * 1).requires_grad_()  # a non-leaf: what a product hands on
            bi = b.clone().requires_grad_()
            xt = xi * 1
            before = xt.clone()
            out = (bias_relu_dropout_project(xt, bi, w, ids, 0.5, 9, overwrite=overwrite)
                   if project else bias_relu_dropout(xt, bi, ids, 0.5, 9, overwrite=overwrite))
            inputs.append(torch.equal(xt, before))
            if not project:
                assert (out.data_ptr() == xt.data_ptr()) == overwrite
            outs.append(out.detach().clone())
            out.backward(grad)
            grads.append((xi.grad.clone(), bi.grad.clone()))
            if project:
                with pytest.raises(RuntimeError, match="cannot run twice"):
                    ctx_out = bias_relu_dropout_project(xi * 1, bi, w, ids, 0.5, 9,
                                                        overwrite=overwrite)
                    ctx_out.backward(grad, retain_graph=True)
                    ctx_out.backward(grad)
        assert inputs == [True, False]  # only the overwriting epilogue changed its input
        assert torch.equal(outs[0], outs[1])
        for a, e in zip(grads[0], grads[1]):
            assert torch.equal(a, e)



@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_a_layer_dropping_its_own_input_frees_the_copy_before_its_product(random_graph,
                                                                          model):
    """A layer given its input's dropout (a model's first layer) holds the dropped copy only
    until it is aggregated: the copy is gone when the product's epilogue runs; the output
    and the gradients are those of the layer on the input dropped beforehand."""
    import weakref

    from distgnn.nn.gcn_conv import GCNConv
    from distgnn.nn.keyed_dropout import KeyedDropout
    from distgnn.nn.prepare import assign_keys
    from distgnn.nn.sage_conv import SAGEConv

    graph, *_ = random_graph(seed=2, n=50, e=300)
    torch.manual_seed(0)
    conv = GCNConv(16, 24) if model == "gcn" else SAGEConv(16, 24, "gcn")
    drop = KeyedDropout(0.5)
    assign_keys(torch.nn.ModuleList([conv, drop]))
    nbr = Neighbourhood(graph, get_backend("numba"))
    x = torch.randn(graph.num_nodes, 16)
    copies, alive = [], []

    def dropout(g, h):
        out = drop(g, h)
        copies.append(weakref.ref(out))
        return out

    def epilogue(y, b):
        alive.append(copies[0]() is not None)
        return y + b

    results = []
    for fused in (True, False):
        nbr.set_epoch(3)
        conv.zero_grad()
        y = (conv(nbr, x, dropout=dropout, epilogue=epilogue) if fused
             else conv(nbr, drop(nbr, x)))
        y.backward(torch.ones_like(y))
        results.append((y.detach(), [p.grad.clone() for p in conv.parameters()]))
    assert alive == [False]
    nbr.set_epoch(3)
    assert not torch.equal(drop(nbr, x), x)  # the dropout dropped something
    assert torch.equal(results[0][0], results[1][0])
    for a, e in zip(results[0][1], results[1][1]):
        assert torch.equal(a, e)
