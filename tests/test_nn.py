"""The layers of :mod:`distgnn.nn` that PyTorch Geometric also has (GIN, GAT, GCNII) against
PyG's own, from the same weights (outputs and gradients, float64, both backends, so both of
GAT's paths: the fused Numba kernels and torch operations); recomputed activations against
stored ones."""
import numpy as np
import pytest
import torch

from distgnn.data.graph import GraphError
from distgnn.nn import (
    MLP,
    GATConv,
    GCN2Conv,
    GCNConv,
    GINConv,
    KeyedDropout,
    SAGEConv,
    assign_keys,
    relu,
)
from distgnn.nn.aggregate import Neighbourhood
from distgnn.nn.backends import NumbaBackend, TorchSparseBackend
from distgnn.nn.models import GCNII, GNN

pyg = pytest.importorskip("torch_geometric.nn")
N = 40
BACKENDS = [NumbaBackend(), TorchSparseBackend()]


@pytest.fixture
def graph(random_graph):
    """A random graph (with self-loops and vertices without in-edges) and its
    ``edge_index`` as PyG wants it."""
    g, *_ = random_graph(seed=3, n=N, e=160)
    src, dst = g.edges()
    return g, torch.from_numpy(np.stack([src, dst]).astype(np.int64))


def compare(ours, theirs, params):
    """Outputs equal, and the gradients of a random functional of them w.r.t. the input
    and to each ``(our parameter, PyG's parameter)`` pair."""
    torch.manual_seed(7)
    x = torch.randn(N, 6, dtype=torch.float64, requires_grad=True)
    a, b = ours(x), theirs(x)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    probe = torch.randn_like(a)
    mine = torch.autograd.grad((a * probe).sum(), [x] + [p for p, _ in params])
    ref = torch.autograd.grad((b * probe).sum(), [x] + [q for _, q in params])
    for u, v in zip(mine, ref):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("heads, concat", [(1, True), (3, True), (3, False)])
def test_gat_equals_pyg(graph, backend, heads, concat):
    g, edge_index = graph
    nbr = Neighbourhood(g, backend, dtype=torch.float64)
    torch.manual_seed(0)
    conv = GATConv(6, 4, heads, concat).double()
    ref = pyg.GATConv(6, 4, heads, concat).double()
    with torch.no_grad():
        for name in ("lin.weight", "att_src", "att_dst"):
            ref.get_parameter(name).copy_(conv.get_parameter(name))
        conv.bias.normal_()
        ref.bias.copy_(conv.bias)
    compare(lambda x: conv(nbr, x), lambda x: ref(x, edge_index),
            [(conv.att_src, ref.att_src), (conv.lin.weight, ref.lin.weight),
             (conv.bias, ref.bias)])


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("hidden", [3, 9], ids=["projects-first", "aggregates-first"])
def test_gin_equals_pyg(graph, backend, hidden):
    g, edge_index = graph
    nbr = Neighbourhood(g, backend, dtype=torch.float64)
    torch.manual_seed(0)
    conv = GINConv(MLP(6, hidden, 5), eps=0.3, train_eps=True).double()
    mlp = torch.nn.Sequential(torch.nn.Linear(6, hidden), torch.nn.ReLU(),
                              torch.nn.Linear(hidden, 5))
    ref = pyg.GINConv(mlp, eps=0.3, train_eps=True).double()
    assert conv.project_first == (hidden < 6)
    with torch.no_grad():
        conv.nn[0].bias.normal_()
        for ours, theirs in zip(conv.nn.parameters(), mlp.parameters()):
            theirs.copy_(ours)
    compare(lambda x: conv(nbr, x), lambda x: ref(x, edge_index),
            [(conv.eps, ref.eps), (conv.nn[0].weight, mlp[0].weight)])


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_gin_with_any_module_equals_pyg(graph, backend):
    """An ``nn`` that is not a Sequential starting with a Linear: aggregated as given."""
    g, edge_index = graph
    nbr = Neighbourhood(g, backend, dtype=torch.float64)
    torch.manual_seed(0)
    lin = torch.nn.Linear(6, 3).double()
    conv, ref = GINConv(lin, eps=0.1).double(), pyg.GINConv(lin, eps=0.1).double()
    assert not conv.project_first
    compare(lambda x: conv(nbr, x), lambda x: ref(x, edge_index), [(lin.weight, lin.weight)])


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_gcn2_equals_pyg(graph, backend):
    """On a graph without stored self-loops (PyG keeps a stored loop as the ``I`` of
    ``A + I``; this project adds ``I`` to whatever ``A`` holds, as :class:`GCNConv` does)."""
    g = graph[0].remove_self_loops()
    edge_index = torch.from_numpy(np.stack(g.edges()).astype(np.int64))
    nbr = Neighbourhood(g, backend, dtype=torch.float64)
    torch.manual_seed(0)
    conv = GCN2Conv(6, alpha=0.2, theta=0.5, layer=3).double()
    ref = pyg.GCN2Conv(6, alpha=0.2, theta=0.5, layer=3).double()
    with torch.no_grad():
        ref.weight1.copy_(conv.weight1)
    x_0 = torch.randn(N, 6, dtype=torch.float64)
    compare(lambda x: conv(nbr, x, x_0), lambda x: ref(x, x_0, edge_index),
            [(conv.weight1, ref.weight1)])


@pytest.mark.parametrize("make", [
    lambda: GNN("gat", 6, 8, 3, num_layers=3, heads=2, dropout=0.5, recompute=True),
    lambda: GCNII(6, 8, 3, num_layers=5, dropout=0.5, recompute=True)], ids=["gat", "gcnii"])
def test_recomputed_activations_give_the_stored_gradients(graph, make):
    """``recompute=True`` (activation checkpointing) changes what is kept, not the maths:
    the same loss and gradients as the model that stores its activations, dropout on."""
    g, _ = graph
    nbr = Neighbourhood(g, NumbaBackend(), dtype=torch.float64)
    torch.manual_seed(0)
    model = make().double().train()
    x = torch.randn(N, 6, dtype=torch.float64)
    grads = []
    for recompute in (True, False):
        model.recompute = recompute
        model.zero_grad()
        nbr.set_epoch(3)
        loss = model(nbr, x).square().sum()
        loss.backward()
        grads.append([loss.detach()] + [p.grad.clone() for p in model.parameters()])
    for u, v in zip(*grads):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype,rtol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("make", [
    lambda: GNN("gcn", 6, 8, 3, num_layers=3, dropout=0.5),
    lambda: GNN("sage", 6, 8, 3, num_layers=3, dropout=0.5),
    lambda: GNN("sage", 6, 8, 3, num_layers=2, dropout=0.5, aggregator="mean"),
    lambda: GNN("sage", 6, 8, 3, num_layers=2, dropout=0.3, precompute_first=True),
    lambda: GNN("gcn", 8, 5, 3, num_layers=2, dropout=0.5),  # projects before aggregating
    lambda: GNN("gin", 6, 8, 3, num_layers=3, dropout=0.5)],
    ids=["gcn", "sage-gcn", "sage-mean", "sage-precomputed", "gcn-project-first", "gin"])
def test_fused_epilogues_give_the_layered_models_loss_and_gradients(graph, make, dtype, rtol):
    """GCN, GraphSAGE and GIN apply each hidden layer's bias, ReLU and next dropout in one
    pass (KeyedDropout.after_relu); the layer-by-layer forward (the one recompute takes)
    gives the same logits, loss and gradients, dropout on, and the same logits in
    evaluation."""
    g, _ = graph
    nbr = Neighbourhood(g, NumbaBackend(), dtype=dtype)
    torch.manual_seed(0)
    model = make().to(dtype).train()
    width = next(p for p in model.convs[0].parameters() if p.dim() == 2).shape[1]
    x = torch.randn(N, width, dtype=dtype)
    results = []
    for layered in (True, False):
        model.recompute = layered
        model.zero_grad()
        nbr.set_epoch(3)
        logits = model(nbr, x)
        loss = logits.square().sum()
        loss.backward()
        nbr.set_epoch(3, training=False)
        with torch.no_grad():
            evaluated = model(nbr, x)
        results.append([logits.detach(), evaluated] + [p.grad.clone()
                                                       for p in model.parameters()])
    for u, v in zip(*results):
        torch.testing.assert_close(u, v, rtol=rtol, atol=rtol)


def test_fused_attention_equals_the_torch_formulation_with_dropout(graph):
    """The Numba path of GAT (one kernel chain, dropout inside) against the torch-operations
    path the torch backend takes, training with attention dropout 0.5 (float64): same output
    and gradients, so both draw the same masks."""
    g, _ = graph
    torch.manual_seed(0)
    conv = GATConv(6, 4, heads=3, dropout=0.5).double().train()
    x = torch.randn(N, 6, dtype=torch.float64, requires_grad=True)
    results = []
    for backend in BACKENDS:
        nbr = Neighbourhood(g, backend, dtype=torch.float64, seed=9)
        nbr.set_epoch(5)
        out = conv(nbr, x, key=2)
        probe = torch.arange(out.numel(), dtype=torch.float64).view_as(out).sin()
        results.append([out, *torch.autograd.grad((out * probe).sum(),
                                                  [x, conv.att_src, conv.att_dst])])
    for u, v in zip(*results):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-12)
    dropped = GATConv(6, 4, heads=3, dropout=0.0).double()
    dropped.load_state_dict(conv.state_dict())
    plain = dropped(Neighbourhood(g, BACKENDS[0], dtype=torch.float64), x)
    assert not torch.allclose(plain, results[0][0])  # the dropout did act


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("make", [lambda: GCNConv(6, 4), lambda: SAGEConv(6, 4, "max"),
                                  lambda: GINConv(MLP(6, 4, 4)), lambda: GATConv(6, 2, heads=2)],
                         ids=["gcn", "sage", "gin", "gat"])
def test_layers_refuse_inputs_of_another_shape_or_type(graph, backend, make):
    """Rows of another graph, another width or dtype: one line naming the layer, the
    expected and the given shape, before anything is aggregated."""
    nbr = Neighbourhood(graph[0], backend)
    nbr.set_epoch(0)
    conv = make()
    name = type(conv).__name__
    assert conv(nbr, torch.rand(N, 6)).shape[0] == N
    for h, says in [(torch.rand(N - 10, 6), rf"shape \[{N - 10}, 6\], expected \[{N}, 6\]"),
                    (torch.rand(4 * N, 6), rf"shape \[{4 * N}, 6\], expected \[{N}, 6\]"),
                    (torch.rand(N, 5), rf"shape \[{N}, 5\], expected \[{N}, 6\]"),
                    (torch.rand(N, 6, dtype=torch.float64), "dtype torch.float64")]:
        with pytest.raises(GraphError, match=f"{name} input h has {says}"):
            conv(nbr, h, key=1)


def test_gcn2_refuses_an_initial_residual_of_another_graph(graph):
    nbr = Neighbourhood(graph[0], BACKENDS[0])
    conv = GCN2Conv(6, alpha=0.1)
    with pytest.raises(GraphError, match=rf"GCN2Conv input x_0 has shape \[3, 6\], "
                                         rf"expected \[{N}, 6\]"):
        conv(nbr, torch.rand(N, 6), torch.rand(3, 6))


def test_gat_refuses_attention_vectors_for_other_heads(graph):
    """A ``[1, 1, C]`` vector would broadcast over the heads (silently other maths)."""
    nbr = Neighbourhood(graph[0], BACKENDS[0])
    conv = GATConv(6, 4, heads=2)
    conv.att_dst = torch.nn.Parameter(torch.rand(1, 1, 4))
    with pytest.raises(GraphError, match=r"att_dst has shape \[1, 1, 4\], expected \[1, 2, 4\]"):
        conv(nbr, torch.rand(N, 6))


def test_keyed_dropout_refuses_rows_of_another_graph_and_probabilities_out_of_range(graph):
    nbr = Neighbourhood(graph[0], BACKENDS[0])
    nbr.set_epoch(0)
    with pytest.raises(GraphError, match=rf"\[{10 * N}, 3\], expected \[{N}, d\]"):
        KeyedDropout(0.5)(nbr, torch.rand(10 * N, 3), key=0)
    for p in (1.0, 1.5, -0.1, float("nan")):
        with pytest.raises(GraphError, match=r"must be in \[0, 1\)"):
            KeyedDropout(p)


class TwoLayers(torch.nn.Module):
    """GCN, dropout, GCN: keys from the modules' positions."""

    def __init__(self, p=0.5):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(6, 5), GCNConv(5, 3)
        self.drop1, self.drop2 = KeyedDropout(p), KeyedDropout(p)

    def forward(self, g, x):
        return self.conv2(g, self.drop2(g, torch.relu(self.conv1(g, self.drop1(g, x)))))


def test_keys_follow_module_positions_and_masks_follow_seed_epoch_and_key(graph):
    """Layers and dropouts are numbered apart, in ``model.modules()`` order; a dropout's
    mask depends on the graph's seed and epoch and the module's key, not on the module
    object (a second model of the same structure draws the same masks)."""
    model = TwoLayers()
    assign_keys(model)
    assert (model.conv1.key, model.conv2.key, model.drop1.key, model.drop2.key) == (0, 1, 0, 1)
    g = Neighbourhood(graph[0], BACKENDS[0], seed=4)
    x = torch.rand(N, 6)

    def mask(seed, epoch, drop):
        g.seed = seed
        g.set_epoch(epoch)
        return drop(g, torch.ones(N, 6)) != 0

    base = mask(4, 2, model.drop1)
    twin = TwoLayers()
    assign_keys(twin)
    assert torch.equal(base, mask(4, 2, twin.drop1))
    for other in (mask(5, 2, model.drop1), mask(4, 3, model.drop1), mask(4, 2, model.drop2)):
        assert not torch.equal(base, other)
    g.set_epoch(2, training=False)
    assert torch.equal(model.drop1(g, x), x)  # evaluation drops nothing


def test_a_module_called_twice_in_an_epoch_needs_a_key_of_its_own(graph):
    """A layer object called at two places of one training pass would share one exchange
    state (and a dropout one mask): refused, unless the second call names its key; the
    next epoch may call it again; an unkeyed layer on a partition is refused too."""
    g = Neighbourhood(graph[0], BACKENDS[0])
    conv = GCNConv(6, 6)
    conv.key = 0
    g.set_epoch(1)
    h = conv(g, torch.rand(N, 6))
    with pytest.raises(GraphError, match="GCNConv ran twice in epoch 1 under key 0"):
        conv(g, h)
    conv(g, h, key=1)
    with pytest.raises(GraphError, match="both use key 1 in epoch 1"):
        GCNConv(6, 6)(g, h, key=1)
    g.set_epoch(2)
    conv(g, h)
    drop = KeyedDropout(0.5)
    with pytest.raises(GraphError, match="KeyedDropout has no key"):
        drop(g, h)


def test_layers_print_their_arguments_and_reset_their_parameters():
    """``repr`` names the arguments (as PyG's and DGL's layers do); ``reset_parameters``
    draws new weights and restores GIN's initial epsilon."""
    torch.manual_seed(0)
    assert "6, 4, aggr='max'" in repr(SAGEConv(6, 4, aggr="max"))
    assert "heads=2" in repr(GATConv(6, 4, heads=2)) and "p=0.3" in repr(KeyedDropout(0.3))
    for conv in (GCNConv(6, 4), SAGEConv(6, 4), GATConv(6, 4, heads=2), GCN2Conv(6, 0.1),
                 GINConv(MLP(6, 5, 4), eps=0.2, train_eps=True)):
        before = [p.detach().clone() for p in conv.parameters()]
        with torch.no_grad():
            for p in conv.parameters():
                p.add_(1.0)
        conv.reset_parameters()
        after = list(conv.parameters())
        assert any(not torch.equal(u, v) for u, v in zip(before, after) if u.dim() > 1)
        if isinstance(conv, GINConv):
            assert conv.eps.item() == pytest.approx(0.2)


class Identity:
    """An exchange that changes nothing: a partition's graph in one process."""

    combines_clones = True

    def __call__(self, y, key, epoch, training):
        return y


class WithTorchDropout(torch.nn.Module):
    def __init__(self, module=None, functional=0.0):
        super().__init__()
        self.conv, self.drop, self.functional = GCNConv(6, 3), module, functional

    def forward(self, g, x):
        x = self.drop(x) if self.drop is not None else x
        return self.conv(g, torch.nn.functional.dropout(x, self.functional, self.training))


def test_torch_dropout_is_refused_on_a_partition_and_allowed_on_one_socket(graph):
    """torch's dropout draws other masks on every rank: on a partition a ``nn.Dropout``
    module is refused when the model is prepared, and ``F.dropout`` in its first training
    pass; with ``p = 0``, in evaluation or on one socket both are allowed."""
    from distgnn.errors import DistGNNError
    from distgnn.nn import prepare

    part = Neighbourhood(graph[0], BACKENDS[0], exchange=Identity())
    whole = Neighbourhood(graph[0], BACKENDS[0])
    x = torch.rand(N, 6)
    with pytest.raises(DistGNNError, match="drop is a torch.nn.Dropout: .*KeyedDropout"):
        prepare(WithTorchDropout(torch.nn.Dropout(0.5)), part)
    model = WithTorchDropout(functional=0.3)
    prepare(model, part)
    part.set_epoch(0, training=False)
    model.eval()(part, x)
    part.set_epoch(0)
    with pytest.raises(DistGNNError, match="calls torch.s dropout: .*KeyedDropout"):
        model.train()(part, x)
    for allowed, g in ((WithTorchDropout(torch.nn.Dropout(0.0)), part),
                       (WithTorchDropout(torch.nn.Dropout(0.5), 0.5), whole)):
        prepare(allowed, g)
        g.set_epoch(1)
        assert allowed.train()(g, x).shape == (N, 3)


class RandomRows(torch.nn.Module):
    """A GCN that masks rows with ``torch.rand`` in training, as a hand-written dropout."""

    def __init__(self):
        super().__init__()
        self.conv = GCNConv(6, 3)

    def forward(self, g, x):
        if self.training:
            x = x * (torch.rand(x.shape[0], 1) > 0.5)
        return self.conv(g, x)


def test_random_draws_are_refused_at_the_end_of_the_first_training_pass(graph):
    """On a partition a model drawing from torch's generator in training is refused once
    its first training pass ends, naming KeyedDropout; in evaluation, and on one socket, it
    runs."""
    from distgnn.errors import DistGNNError
    from distgnn.nn import prepare

    x = torch.rand(N, 6)
    part = Neighbourhood(graph[0], BACKENDS[0], exchange=Identity())
    model = RandomRows()
    prepare(model, part)
    part.set_epoch(0, training=False)
    model.eval()(part, x)
    part.set_epoch(0)
    with pytest.raises(DistGNNError, match="random number generator.*KeyedDropout"):
        model.train()(part, x)
    whole = Neighbourhood(graph[0], BACKENDS[0])
    model = RandomRows()
    prepare(model, whole)
    whole.set_epoch(0)
    assert model.train()(whole, x).shape == (N, 3)


def test_layers_models_and_weights_checked_before_they_run(graph, capsys):
    """A layer called without the graph, GCNII's alpha NaN or theta 0, and a model with
    nothing to train end in one line; GAT on a weighted graph says once that the weights are
    not read, GCN does not."""
    from distgnn.errors import DistGNNError
    from distgnn.nn import prepare

    x = torch.rand(N, 6)
    for call in (lambda: GCNConv(6, 3)(None, x), lambda: GCNConv(6, 3)(x)):
        with pytest.raises(GraphError, match=r"called as conv\(g, h, ...\)"):
            call()
    for kwargs, message in (({"alpha": float("nan")}, "alpha must be in"),
                            ({"theta": 0.0}, "theta must be a finite number > 0"),
                            ({"layer": 0}, "layer must be an integer >= 1")):
        with pytest.raises(GraphError, match=message):
            GCN2Conv(6, **{"alpha": 0.1, "theta": 0.5, "layer": 1, **kwargs})
    nbr = Neighbourhood(graph[0], BACKENDS[0])
    with pytest.raises(DistGNNError, match="nothing to train"):
        prepare(torch.nn.Sequential(torch.nn.Identity()), nbr)
    weighted = type(graph[0])(graph[0].indptr, graph[0].indices, N,
                              np.ones(graph[0].num_edges, np.float32))
    for model, said in ((GNN("gat", 6, 8, 3, heads=2), 1), (GNN("gcn", 6, 8, 3), 0)):
        prepare(model, Neighbourhood(weighted, BACKENDS[0]))
        assert capsys.readouterr().err.count("GAT has no edge-weight term") == said


def test_relu_keeps_a_mask_and_gives_torchs_gradient():
    """distgnn.nn.graph_layer.relu: the same output and gradient as torch.relu, bit for bit
    (zeros and negative zeros included), with only a bool mask saved for the backward pass."""
    x = torch.randn(300, 40, generator=torch.Generator().manual_seed(0))
    x[:5] = 0.0
    x[5:10] = -0.0
    grad = torch.randn(300, 40, generator=torch.Generator().manual_seed(1))
    saved = []
    ours = x.clone().requires_grad_()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = relu(ours)
    out.backward(grad)
    theirs = x.clone().requires_grad_()
    expected = torch.relu(theirs)
    expected.backward(grad)
    assert torch.equal(out, expected) and torch.equal(ours.grad, theirs.grad)
    assert [(t.dtype, tuple(t.shape)) for t in saved] == [(torch.bool, (300, 40))]
    with torch.no_grad():  # nothing to keep
        assert torch.equal(relu(x), torch.relu(x))
