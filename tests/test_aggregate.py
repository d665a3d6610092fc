"""Every aggregation backend of CPU tensors (numba, torch), SpMM and Neighbourhood against
numpy/scipy references built from the raw edge lists (never from CSRGraph), plus gradcheck
of every reduce."""
import numpy as np
import pytest
import scipy.sparse as sp
import torch

from distgnn.data.graph import CSRGraph, GraphError
from distgnn.errors import DistGNNError
from distgnn.kernels import REDUCES
from distgnn.nn.aggregate import Neighbourhood, SpMM
from distgnn.nn.backends import BACKENDS, TorchSparseBackend, get_backend
from distgnn.timing import PhaseTimer

# the backends of CPU tensors; triton's kernels run CUDA tensors, and are checked on the CPU
# under Triton's interpreter by tests/test_gpu_kernels.py
CPU_BACKENDS = [name for name in BACKENDS if name != "triton"]


@pytest.fixture(params=CPU_BACKENDS)
def backend(request):
    return get_backend(request.param)


GRAPHS = {  # kwargs of build_random_graph (conftest.py)
    "random": dict(seed=1, n=40, e=160),
    # ~3000 edges, 2000 of them into vertex 0; 50 isolated vertices
    "hub": dict(seed=2, n=600, e=1000, hub_degree=2000, isolated=50),
}


def reference(src, dst, weight, n, x, reduce):
    """float64 ``[n, d]``: ``reduce_{u -> v} w_uv x_u`` with 0 for rows without edges."""
    x = np.asarray(x, np.float64)
    w = np.ones(len(src)) if weight is None else weight.astype(np.float64)
    deg = np.bincount(dst, minlength=n)
    if reduce in ("sum", "mean"):
        y = sp.coo_matrix((w, (dst, src)), shape=(n, n)).tocsr() @ x
        return y / np.maximum(deg, 1)[:, None] if reduce == "mean" else y
    ufunc, start = (np.maximum, -np.inf) if reduce == "max" else (np.minimum, np.inf)
    y = np.full((n, x.shape[1]), start)
    ufunc.at(y, dst, w[:, None] * x[src])
    y[deg == 0] = 0.0
    return y


def features(n, d, seed=0, dtype=np.float32):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal((n, d)).astype(dtype))


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("case", sorted(GRAPHS))
def test_spmm_forward_matches_reference(backend, random_graph, case, reduce, weighted):
    g, src, dst, w = random_graph(weighted=weighted, **GRAPHS[case])
    x = features(g.num_nodes, 5)
    y, arg = backend.spmm(g, x, reduce)
    assert y.shape == (g.num_nodes, 5) and y.dtype == torch.float32
    np.testing.assert_allclose(y.numpy(), reference(src, dst, w, g.num_nodes, x, reduce),
                               rtol=1e-5, atol=1e-4)
    assert (arg is None) == (reduce in ("sum", "mean"))


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduce", ["max", "min"])
def test_arg_points_to_an_edge_attaining_the_extreme(backend, random_graph, reduce, weighted):
    g, *_ = random_graph(weighted=weighted, **GRAPHS["hub"])
    x = features(g.num_nodes, 5)
    y, arg = backend.spmm(g, x, reduce)
    rows = np.repeat(np.arange(g.num_nodes), g.in_degrees())
    empty = g.in_degrees() == 0
    assert empty.any() and arg.dtype == torch.int64
    arg = arg.numpy()
    assert np.all(arg[empty] == -1)
    e, f = arg[~empty], np.broadcast_to(np.arange(5), arg.shape)[~empty]
    assert np.all(rows[e] == np.nonzero(~empty)[0][:, None])  # the edge lies in row v
    w = np.ones(g.num_edges, np.float32) if g.edge_weight is None else g.edge_weight
    np.testing.assert_array_equal(w[e] * x.numpy()[g.indices[e], f], y.numpy()[~empty])


def small_case(random_graph, weighted, seed=3, n=8, d=3):
    """A small graph (with an isolated vertex, self-loops, duplicate edges) and float64
    features whose values, and weighted messages, are far apart: max/min are unique."""
    g, *_ = random_graph(seed=seed, n=n, e=24, weighted=weighted, isolated=1,
                               self_loops=2, duplicates=2)
    perm = np.random.default_rng(seed).permutation(n * d).reshape(n, d)
    x = torch.tensor(perm / (n * d) - 0.5 + 0.01, dtype=torch.float64, requires_grad=True)
    return g, x


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduce", REDUCES)
def test_spmm_gradcheck(backend, random_graph, reduce, weighted):
    g, x = small_case(random_graph, weighted)
    assert torch.autograd.gradcheck(
        lambda x: SpMM.apply(x, g, backend, reduce, PhaseTimer()), (x,))


@pytest.mark.parametrize("num_nodes", [0, 5])
@pytest.mark.parametrize("reduce", REDUCES)
def test_graph_without_edges_gives_zeros_and_no_gradient(backend, reduce, num_nodes):
    none = np.array([], np.int64)
    g = CSRGraph.from_edges(none, none, num_nodes=num_nodes)
    x = features(num_nodes, 3, dtype=np.float64).requires_grad_()
    y = SpMM.apply(x, g, backend, reduce, PhaseTimer())
    assert torch.equal(y, torch.zeros(num_nodes, 3, dtype=torch.float64))
    y.backward(torch.ones_like(y))
    assert torch.equal(x.grad, torch.zeros_like(x))
    arg = backend.spmm(g, x.detach(), reduce)[1]
    assert arg is None if reduce in ("sum", "mean") else torch.all(arg == -1)


@pytest.mark.parametrize("reduce", REDUCES)
def test_single_vertex_graph(backend, reduce):
    x = torch.tensor([[1.5, -2.0]], requires_grad=True)
    looped = CSRGraph.from_edges([0], [0], 1, edge_weight=[-3.0])
    y = SpMM.apply(x, looped, backend, reduce, PhaseTimer())
    assert torch.equal(y, torch.tensor([[-4.5, 6.0]]))
    y.backward(torch.tensor([[1.0, 2.0]]))
    assert torch.equal(x.grad, torch.tensor([[-3.0, -6.0]]))
    alone = CSRGraph.from_edges(np.array([], np.int64), np.array([], np.int64), 1)
    assert torch.equal(backend.spmm(alone, x.detach(), reduce)[0], torch.zeros(1, 2))


def test_neighbourhood_mean_divides_by_supplied_in_degree(backend, random_graph):
    g, src, dst, _ = random_graph(**GRAPHS["random"])
    in_degree = g.in_degrees() + np.arange(g.num_nodes) % 3  # e.g. global degrees
    in_degree[-1] = 0  # an isolated vertex: clamped to 1, not a division by zero
    x = features(g.num_nodes, 4)
    y = Neighbourhood(g, backend, in_degree=in_degree).reduce(x, "mean")
    expected = reference(src, dst, None, g.num_nodes, x, "sum") / np.maximum(in_degree, 1)[:, None]
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-6)
    default = Neighbourhood(g, backend).reduce(x, "mean")
    np.testing.assert_allclose(default.numpy(), reference(src, dst, None, g.num_nodes, x, "mean"),
                               rtol=1e-5, atol=1e-6)


def test_phase_timer_receives_aggregation_time(backend, random_graph):
    g, *_ = random_graph(**GRAPHS["random"])
    timer = PhaseTimer()
    nbr = Neighbourhood(g, backend, timer=timer)
    x = features(g.num_nodes, 4).requires_grad_()
    assert not timer.seconds
    nbr.reduce(x, "max").sum().backward()
    assert timer.seconds["aggregation_forward"] > 0
    assert timer.seconds["aggregation_backward"] > 0
    first = dict(timer.seconds)
    nbr.reduce(x, "mean").sum().backward()
    assert all(timer.seconds[k] > first[k] for k in first)  # accumulates
    timer.reset()
    assert not timer.seconds


def test_get_backend():
    assert isinstance(get_backend("torch"), TorchSparseBackend)
    with pytest.raises(DistGNNError, match="nope"):
        get_backend("nope")


@pytest.mark.parametrize("shape, says", [((20, 4), r"\[20, 4\], expected \[40, d\]"),
                                         ((40, 2, 2), r"\[40, 2, 2\], expected \[40, d\]")])
def test_features_of_another_shape_are_refused_before_the_kernels(backend, random_graph,
                                                                 shape, says):
    g, *_ = random_graph(**GRAPHS["random"])
    nbr = Neighbourhood(g, backend)
    with pytest.raises(GraphError, match=says):
        nbr.reduce(torch.rand(shape), "sum")
    with pytest.raises(GraphError, match="expected \\[40, d\\]"):
        backend.spmm_backward(g, torch.rand(39, 4), "sum", None)


def test_numba_kernels_refuse_integer_features_and_a_graph_whose_weights_lost_edges(
        random_graph):
    g, *_ = random_graph(**GRAPHS["random"])
    nbr = Neighbourhood(g, get_backend("numba"))
    with pytest.raises(GraphError, match="dtype torch.int64, expected torch.float32 or "):
        nbr.reduce(torch.ones(40, 3, dtype=torch.int64), "sum")
    g.edge_weight = np.ones(5, np.float32)  # set after the graph checked its own
    says = rf"edge_weight has shape \[5\], expected \[{g.num_edges}\]"
    with pytest.raises(GraphError, match=says):
        nbr.reduce(torch.rand(40, 3), "sum")


def test_neighbourhood_refuses_per_vertex_arrays_of_another_length(backend, random_graph):
    g, *_ = random_graph(**GRAPHS["random"])
    with pytest.raises(GraphError, match=r"global_ids has shape \[10\], expected \[40\]"):
        Neighbourhood(g, backend, global_ids=np.arange(10))
    with pytest.raises(GraphError, match=r"in_degree has shape \[41\], expected \[40\]"):
        Neighbourhood(g, backend, in_degree=np.ones(41, np.int64))
    with pytest.raises(GraphError, match="epoch must be an integer"):
        Neighbourhood(g, backend).set_epoch(0.5)


def test_attention_kernels_refuse_scores_of_another_shape(random_graph):
    g, *_ = random_graph(**GRAPHS["random"])
    nbr = Neighbourhood(g, get_backend("numba"))
    s, z = torch.rand(40, 2), torch.rand(40, 2, 3)
    nbr.attend(s, s, s, z, 0.2, 0.0, 0)  # the shapes it takes
    with pytest.raises(GraphError, match=r"t has shape \[30, 2\], expected \[40, 2\]"):
        nbr.attend(s, s, torch.rand(30, 2), z, 0.2, 0.0, 0)
    with pytest.raises(GraphError, match=r"z has shape \[20, 2, 3\], expected \[40, 2, d\]"):
        nbr.attend(s, s, s, torch.rand(20, 2, 3), 0.2, 0.0, 0)
    with pytest.raises(GraphError, match="s has dtype torch.float64, expected torch.float32"):
        nbr.attend(s, s.double(), s, z, 0.2, 0.0, 0)


class Identity:
    """An exchange that changes nothing: a partition's neighbourhood on one process."""

    combines_clones = True

    def __call__(self, y, layer, step, training):
        return y


def test_two_layers_on_one_key_are_refused_on_a_partition_but_not_a_recomputed_one(
        random_graph):
    """On a partition the exchange keeps state per layer key (cd-r): a second layer on a
    key in the same training pass is an error naming both, and so is an unkeyed layer;
    the same layer again inside the backward pass (as ``--recompute`` runs it), another
    epoch, evaluation or one process are not."""
    from distgnn.nn import GCNConv
    from distgnn.nn.models import GNN

    g, *_ = random_graph(**GRAPHS["random"])
    nbr = Neighbourhood(g, get_backend("numba"), exchange=Identity())
    first, second, x = GCNConv(4, 4), GCNConv(4, 4), torch.rand(40, 4)
    with pytest.raises(GraphError, match="GCNConv has no key"):
        first(nbr, x)
    nbr.set_epoch(3)
    first(nbr, x, key=0)
    second(nbr, x, key=1)
    nbr.set_epoch(3, training=False)
    second(nbr, x, key=0)
    nbr.set_epoch(4)
    second(nbr, x, key=0)
    with pytest.raises(GraphError, match="GCNConv and GCNConv both use key 0 in epoch 4"):
        first(nbr, x, key=0)
    whole = Neighbourhood(g, get_backend("numba"))
    first(whole, x)
    second(whole, x)
    with pytest.raises(GraphError, match="training aggregation on a partition outside a layer"):
        nbr.reduce(x, "sum")
    model = GNN("gcn", 4, 8, 3, num_layers=3, recompute=True).train()
    nbr.set_epoch(5)
    model(nbr, x).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("dtype, z_dtype", [(torch.float32, torch.float32),
                                            (torch.float64, torch.float64),
                                            (torch.float32, torch.bfloat16)])
@pytest.mark.parametrize("divide", [True, False])
def test_self_loop_norm_is_add_then_scale_bit_for_bit(dtype, z_dtype, divide):
    """Neighbourhood.self_loop: (y + z) / c or (y + z) * c in one pass each way, written over
    the sums y, gives the values and gradients of torch.add followed by div_ / mul_, bit for
    bit; bf16 z (a product's output under autocast) beside float32 sums as torch.add
    promotes it, its gradient in bf16."""
    n, d = 700, 19
    g = Neighbourhood(CSRGraph(np.zeros(n + 1, np.int64), np.zeros(0, np.int32), n),
                      get_backend("numba"), dtype=dtype)
    gen = torch.Generator().manual_seed(1)
    y0, z0, grad = (torch.randn(n, d, generator=gen, dtype=dtype) for _ in range(3))
    z0 = z0.to(z_dtype)
    c = torch.randint(0, 40, (n, 1), generator=gen).to(dtype) + 1
    c = c if divide else c.rsqrt()
    y, z = y0.clone().requires_grad_(), z0.clone().requires_grad_()
    sums = y * 1  # an aggregation's output, which nothing else reads
    out = g.self_loop(sums, z, c, divide)
    assert out.data_ptr() == sums.data_ptr()
    out.backward(grad)
    ry, rz = y0.clone().requires_grad_(), z0.clone().requires_grad_()
    expected = torch.add(ry, rz)
    expected = expected.div(c) if divide else expected.mul(c)
    expected.backward(grad)
    assert torch.equal(out, expected)
    assert torch.equal(y.grad, ry.grad) and z.grad.dtype == z_dtype
    assert torch.equal(z.grad, rz.grad)
    with pytest.raises(GraphError, match="shape"):
        g.self_loop(y0, z0[:-1], c, divide)
