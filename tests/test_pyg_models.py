"""PyTorch Geometric models trained on partitions as they are (:mod:`distgnn.pyg`).

The reference is PyG itself: on the whole graph, a distributed model computes what the
plain model computes (outputs and gradients); on 2 and 4 partitions (ranks on threads,
cd-0) it follows the whole graph's run epoch by epoch, dropout on.  ``python -m
tests.test_pyg_models [--dataset cora] [--epochs 50]`` prints that comparison for every
layer of :data:`tests.helpers.pyg_models.LAYERS` as a table."""
from __future__ import annotations

import argparse
import contextlib
import tempfile

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

torch_geometric = pytest.importorskip("torch_geometric")

import distgnn  # noqa: E402
import distgnn.pyg as dpyg  # noqa: E402
from distgnn.cli.predict import predict_main  # noqa: E402
from distgnn.errors import DistGNNError  # noqa: E402
from distgnn.run.config import TrainConfig  # noqa: E402
from distgnn.run.shard import partition_shard  # noqa: E402
from distgnn.run.training import fit  # noqa: E402
from distgnn.timing import PhaseTimer  # noqa: E402
from tests.helpers.partitions import write_dir  # noqa: E402
from tests.helpers.pyg_models import (  # noqa: E402
    LAYERS,
    MORE_LAYERS,
    REFUSED,
    Net,
    weighted_graph,
)
from tests.helpers.training import on_threads  # noqa: E402

# max relative difference of the per-epoch losses against one process, by type
BOUND = {"float32": 1e-5, "float64": 1e-10}


def quiet(**config) -> TrainConfig:
    return TrainConfig(progress=False, threads=1, lr=0.01, feature_norm="none", **config)


def train_on_ranks(source, ranks: int, cfg: TrainConfig, make_model) -> list:
    """Every rank's result of ``make_model``'s model trained on ``ranks`` partitions in
    ``source`` by ranks that are threads (one process on a dataset when ``ranks`` is 1)."""
    if ranks == 1:
        return [distgnn.train(source, cfg, make_model, log=lambda s: None)]

    def rank(comm):
        shard = partition_shard(str(source), cfg, comm, PhaseTimer(), torch.device("cpu"),
                                "numba")
        try:
            return fit(shard, cfg, comm, PhaseTimer(), log=lambda s: None,
                       make_model=make_model)
        finally:
            shard.nbr.exchange.finish()

    return on_threads(ranks, rank)


def loss_gap(one, many) -> float:
    a = np.array([r["loss"] for r in one.history])
    b = np.array([r["loss"] for r in many.history])
    return float(np.max(np.abs(a - b) / np.abs(a)))


@pytest.fixture(scope="module")
def weighted(tmp_path_factory):
    """The weighted graph, and its Libra partitions into 2 and 4 parts."""
    ds = weighted_graph()
    root = tmp_path_factory.mktemp("weighted")
    for parts in (2, 4):
        write_dir(ds, root / f"p{parts}", parts)
    return ds, {1: ds, 2: root / "p2", 4: root / "p4"}


@pytest.mark.parametrize("layer", [*LAYERS, *MORE_LAYERS])
def test_whole_graph_is_plain_pyg(layer, weighted):
    """On the whole graph the distributed model's outputs and parameter gradients are the
    plain PyG model's (float64, 1e-12 relative), under every layer (in evaluation mode:
    GAT's own attention dropout draws from torch's generator in the plain model)."""
    ds, _ = weighted
    run = distgnn.setup(ds, quiet(dtype="float64"), log=lambda s: None)
    torch.manual_seed(0)
    plain = Net(layer, ds.num_features, ds.num_classes, p=0.0).double()
    model = run.place(dpyg.distribute(Net(layer, ds.num_features, ds.num_classes, p=0.0)))
    model.load_state_dict(plain.state_dict())
    edge_index = torch.stack(run.g.edge_index())
    weight = torch.from_numpy(ds.graph.edge_weight).double()
    mix = torch.randn(ds.graph.num_nodes, ds.num_classes, dtype=torch.float64)
    run.start_epoch(model, 0, training=False)
    outputs = []
    for net, call in ((plain, lambda: plain(run.x, edge_index, weight)),
                      (model, lambda: model(run.g, run.x))):
        net.eval()
        out = call()
        (out * mix).sum().backward()
        outputs.append((out.detach(), [p.grad for p in net.parameters()]))
    (want, want_grads), (got, got_grads) = outputs
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12 * float(want.abs().max()))
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12 * float(w.abs().max()))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layer", list(LAYERS))
def test_partitions_follow_one_process(layer, dtype, weighted):
    """cd-0 on 2 and 4 ranks gives the losses of one process epoch by epoch, dropout 0.5
    (on vertices, and on edges in GAT, GATv2 and the transformer): within 1e-5 relative in
    float32 and 1e-10 in float64 over 30 epochs (the table of ``python -m
    tests.test_pyg_models``: 50), and the model learns."""
    ds, sources = weighted
    cfg = quiet(dtype=dtype, epochs=30, eval_every=30)

    def make(f, c):
        return dpyg.distribute(Net(layer, f, c))

    one = train_on_ranks(ds, 1, cfg, make)[0]
    for ranks in (2, 4):
        many = train_on_ranks(sources[ranks], ranks, cfg, make)
        assert loss_gap(one, many[0]) <= BOUND[dtype], ranks
        for other in many[1:]:  # one model on every rank
            for a, b in zip(other.model.parameters(), many[0].model.parameters()):
                assert torch.equal(a, b)
    assert one.history[-1]["loss"] < 0.9 * one.history[0]["loss"]


@pytest.mark.parametrize("layer", list(MORE_LAYERS))
def test_more_layers_follow_one_process(layer, weighted):
    """PyG's other layers and models that ``distribute`` takes: cd-0 on 2 and 4 ranks gives
    the losses of one process within 1e-10 relative (float64, 20 epochs, dropout 0.5)."""
    ds, sources = weighted
    cfg = quiet(dtype="float64", epochs=20, eval_every=20)

    def make(f, c):
        return dpyg.distribute(Net(layer, f, c))

    one = train_on_ranks(ds, 1, cfg, make)[0]
    for ranks in (2, 4):
        assert loss_gap(one, train_on_ranks(sources[ranks], ranks, cfg, make)[0]) <= 1e-10


@pytest.mark.parametrize("layer", list(REFUSED))
def test_other_pyg_layers_are_refused_naming_the_module(layer):
    with pytest.raises(DistGNNError) as e:
        dpyg.distribute(Net(layer, 8, 3))
    assert REFUSED[layer][1] in str(e.value) and "\n" not in str(e.value)


def test_dropout_is_keyed_by_vertex_and_edge(weighted):
    """``F.dropout`` in a distributed forward pass drops about ``p`` of the elements, the
    same ones on every call of an epoch and other ones in the next epoch; GAT's dropout of
    the edges' attention is keyed by edge.  torch's generator is not used."""
    ds, _ = weighted
    run = distgnn.setup(ds, quiet(), log=lambda s: None)

    class Drop(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(()))  # a model has weights to keep alike

        def forward(self, x, edge_index):
            return F.dropout(torch.ones_like(x), p=0.3, training=self.training) * self.scale

    model = run.place(dpyg.distribute(Drop()))
    masks = []
    for epoch in (0, 0, 1):
        run.start_epoch(model, epoch)
        state = torch.get_rng_state()
        masks.append(model(run.g, run.x))
        assert torch.equal(torch.get_rng_state(), state)
    kept = (masks[0] != 0).double().mean()
    assert abs(float(kept) - 0.7) < 0.03
    assert torch.equal(masks[0], masks[1]) and not torch.equal(masks[0], masks[2])
    assert torch.allclose(masks[0].unique(), torch.tensor([0.0, 1 / 0.7]))
    run.start_epoch(model, 0, training=False)
    assert torch.equal(model(run.g, run.x), torch.ones_like(run.x))


class Pooled(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch_geometric.nn.GCNConv(4, 4)
        self.pool = torch_geometric.nn.aggr.MeanAggregation()

    def forward(self, x, edge_index):
        return self.conv(x, edge_index) + self.pool(x)


class OwnAggregate(torch_geometric.nn.MessagePassing):
    def aggregate(self, inputs, index, ptr=None, dim_size=None):
        return super().aggregate(inputs, index, ptr, dim_size)


def _refused():
    g = torch_geometric.nn
    return [
        (nn.Sequential(g.GCNConv(4, 4), nn.BatchNorm1d(4)), "1 (BatchNorm1d)"),
        (nn.ModuleList([g.GCNConv(4, 4), g.BatchNorm(4)]), "1 (BatchNorm)"),
        (nn.ModuleList([g.GraphNorm(4)]), "0 (GraphNorm)"),
        (nn.ModuleList([g.LayerNorm(4)]), "0 (LayerNorm)"),
        (nn.ModuleList([g.ChebConv(4, 4, K=2)]), "0 (ChebConv): PyG's ChebConv is not among"),
        (nn.ModuleList([g.SAGEConv(4, 4, aggr="std")]), "aggregation StdAggregation"),
        (nn.ModuleList([g.GINConv(nn.Linear(4, 4), aggr="softmax")]),
         "aggregation SoftmaxAggregation"),
        (nn.ModuleList([OwnAggregate()]), "0 (OwnAggregate): overrides aggregate()"),
        (Pooled(), "pool (MeanAggregation): pooling over all vertices"),
        (nn.ModuleList([g.GATConv(4, 4, edge_dim=1)]), "fill_value='mean'"),
        (nn.ModuleList([nn.AlphaDropout(0.5)]), "0 (AlphaDropout)"),
        (nn.ModuleList([g.GCNConv(4, 4, decomposed_layers=2)]), "decomposed_layers"),
        (dpyg.distribute(Net("GCNConv", 4, 3)), "the model is distributed already"),
        (NeedsAttr(), "needs edge_attr, which distgnn does not pass"),
        (nn.Linear(4, 3), "Linear.forward takes (input); a PyG model takes (x, edge_index"),
    ]


class NeedsAttr(nn.Module):
    """A model whose forward cannot run without an argument distgnn does not pass."""

    def __init__(self):
        super().__init__()
        self.conv = torch_geometric.nn.GINEConv(nn.Linear(4, 4), edge_dim=1)

    def forward(self, x, edge_index, edge_attr):
        return self.conv(x, edge_index, edge_attr.view(-1, 1))


@pytest.mark.parametrize("model,message", _refused())
def test_what_cannot_be_exact_is_refused_naming_the_module(model, message):
    with pytest.raises(DistGNNError, match=None) as e:
        dpyg.distribute(model)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_edge_weights_argument_is_checked_and_passed(weighted):
    """``edge_weight=`` naming no argument of ``forward`` is refused with the choices; naming
    ``edge_attr`` hands the weights there; a ``forward`` that needs its weights on a graph
    without them, and a model made heterogeneous by ``to_hetero``, end in one line."""
    with pytest.raises(DistGNNError, match=r"edge_weight='w'\): NeedsAttr.forward has no "
                                           r"such argument .* \(it has 'edge_attr'\)"):
        dpyg.distribute(NeedsAttr(), edge_weight="w")
    ds, _ = weighted
    run = distgnn.setup(ds, quiet(), log=lambda s: None)
    features = run.num_features

    class Takes(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(features, 2)

        def forward(self, x, edge_index, edge_attr):
            return self.lin(x) * edge_attr.sum()

    model = run.place(dpyg.distribute(Takes(), edge_weight="edge_attr"))
    run.start_epoch(model, 0, training=False)
    weights = torch.from_numpy(run.g.graph.edge_weight).to(run.x.dtype)
    torch.testing.assert_close(model(run.g, run.x), model.module.lin(run.x) * weights.sum())
    bare = distgnn.setup(distgnn.NodeDataset(
        distgnn.CSRGraph(ds.graph.indptr, ds.graph.indices, ds.graph.num_nodes), ds.x, ds.y,
        ds.train_mask, ds.val_mask, ds.test_mask), quiet(), log=lambda s: None)
    model = bare.place(dpyg.distribute(Takes(), edge_weight="edge_attr"))
    with pytest.raises(DistGNNError, match="needs edge_attr, and the graph has no edge weights"):
        model(bare.g, bare.x)
    hetero = torch_geometric.nn.to_hetero(
        Net("SAGEConv-mean", 4, 3), (["a"], [("a", "to", "a")]))
    with pytest.raises(DistGNNError, match="heterogeneous .*to_homogeneous"):
        dpyg.distribute(hetero)


class Noisy(nn.Module):
    """A GCN whose training pass draws from torch's generator: noise on the features, PyG's
    ``dropout_edge``, or nothing (and a step counter, the same on every rank), or a buffer
    of this rank's mean features (``centre``)."""

    def __init__(self, f: int, c: int, how: str):
        super().__init__()
        self.conv, self.how = torch_geometric.nn.GCNConv(f, c), how
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("centre", torch.zeros(f))

    def forward(self, x, edge_index, edge_weight=None):
        if self.training:
            self.steps += 1
            if self.how == "noise":
                x = x + 0.1 * torch.randn_like(x)
            elif self.how == "dropout_edge":
                edge_index, keep = torch_geometric.utils.dropout_edge(edge_index, p=0.2)
                edge_weight = edge_weight[keep]
            elif self.how == "centre":
                self.centre = x.mean(0)
        return self.conv(x - self.centre, edge_index, edge_weight)


@pytest.mark.parametrize("how,message", [
    ("noise", "random number generator .* in place of dropout_edge"),
    ("dropout_edge", "random number generator"),
    ("centre", "buffer centre differs between ranks"),
    ("nothing", None)])
def test_what_would_differ_between_ranks_is_refused_in_the_first_pass(how, message, weighted):
    """On 2 ranks (threads), a training pass that draws from torch's generator, or a buffer
    that ends the first pass different on the ranks, is refused on every rank with the same
    line; a buffer that changes alike on every rank trains.  One process trains them all."""
    ds, sources = weighted
    cfg = quiet(epochs=2, eval_every=2)

    def make(f, c):
        return dpyg.distribute(Noisy(f, c, how))

    assert len(train_on_ranks(ds, 1, cfg, make)[0].history) == 2
    if message is None:
        for result in train_on_ranks(sources[2], 2, cfg, make):
            assert int(result.model.module.steps) == 2
        return
    with pytest.raises(DistGNNError, match=message):
        train_on_ranks(sources[2], 2, cfg, make)


def test_what_cannot_be_keyed_is_refused_where_it_is_called(weighted):
    """Dropout other than ``F.dropout``, dropout of rows that are neither vertices nor the
    edges of a message-passing call, and a softmax outside one end in one line."""
    ds, _ = weighted
    run = distgnn.setup(ds, quiet(), log=lambda s: None)

    class Calls(nn.Module):
        def __init__(self, call):
            super().__init__()
            self.call, self.scale = call, nn.Parameter(torch.ones(()))

        def forward(self, x, edge_index):
            return self.call(x, edge_index) * self.scale

    for call, message in [
            (lambda x, ei: F.alpha_dropout(x, 0.5, True), "alpha_dropout"),
            (lambda x, ei: F.dropout(x[:3], 0.5, True), "tensor of shape [3, 12]"),
            (lambda x, ei: torch_geometric.utils.softmax(x[:, 0], ei[1]), "softmax on a part")]:
        model = run.place(dpyg.distribute(Calls(call)))
        run.start_epoch(model, 0)
        with pytest.raises(DistGNNError) as e:
            model(run.g, run.x)
        assert message in str(e.value)


def test_weights_come_back_as_the_plain_models(weighted, tmp_path):
    """Trained on 4 ranks, the model file's ``state_dict`` loads into the plain PyG model,
    which predicts the class that distgnn's predictions file holds, for every vertex; the
    distributed model's own ``state_dict`` has the plain keys; ``distgnn.predict`` and
    ``distgnn-predict --model-factory`` take the factory again and give the same
    predictions."""
    ds, sources = weighted
    cfg = quiet(epochs=10, eval_every=10, save_model=str(tmp_path / "model.pt"),
                predictions_out=str(tmp_path / "pred.npz"))

    def make(f, c):
        return dpyg.distribute(Net("GATConv", f, c))

    result = train_on_ranks(sources[4], 4, cfg, make)[0]
    plain = Net("GATConv", ds.num_features, ds.num_classes)
    assert list(result.model.state_dict()) == list(plain.state_dict())
    saved = torch.load(tmp_path / "model.pt", weights_only=True)
    plain.load_state_dict(saved["state_dict"])
    plain.eval()
    run = distgnn.setup(ds, quiet(), log=lambda s: None)  # the features as trained
    src, dst = ds.graph.edges()
    edge_index = torch.from_numpy(np.stack([src, dst]).astype(np.int64))
    with torch.no_grad():
        predicted = plain(run.x, edge_index).argmax(1).numpy()
    written = np.load(tmp_path / "pred.npz")
    assert np.array_equal(written["vertex"], np.arange(ds.graph.num_nodes))
    assert np.array_equal(written["predicted_class"], predicted)
    distgnn.predict(tmp_path / "model.pt", ds, make_model=make,
                    predictions_out=str(tmp_path / "again.npz"), log=lambda s: None)
    assert np.array_equal(np.load(tmp_path / "again.npz")["predicted_class"], predicted)
    # distgnn-predict, the factory named in a file of the user's (GAT reads no weights, so
    # the graph goes as an unweighted .npz)
    (tmp_path / "factory.py").write_text(
        "import distgnn.pyg\nfrom tests.helpers.pyg_models import Net\n\n\n"
        "def make_model(f, c):\n    return distgnn.pyg.distribute(Net('GATConv', f, c))\n")
    np.savez(tmp_path / "graph.npz", indptr=ds.graph.indptr, indices=ds.graph.indices,
             x=ds.x, y=ds.y, train_mask=ds.train_mask, val_mask=ds.val_mask,
             test_mask=ds.test_mask)
    assert predict_main([str(tmp_path / "model.pt"), "--dataset", str(tmp_path / "graph.npz"),
                         "--model-factory", f"{tmp_path / 'factory.py'}:make_model",
                         "--predictions-out", str(tmp_path / "cli.npz")]) == 0
    assert np.array_equal(np.load(tmp_path / "cli.npz")["predicted_class"], predicted)


def test_own_loop_and_every_algorithm(weighted):
    """``distgnn.setup`` with ``run.place(distribute(model))``: a loop written by hand on 2
    ranks gives the losses of one process (cd-0); cd-r and 0c train the same model (finite,
    falling losses; 0c is another model, so only that)."""
    ds, sources = weighted
    torch.manual_seed(0)
    start = Net("SAGEConv-mean", ds.num_features, ds.num_classes).state_dict()

    def loop(source, comm=None, algo="cd-0"):
        cfg = quiet(algo=algo)
        if comm is None:
            run = distgnn.setup(source, cfg, log=lambda s: None)
        else:  # what distgnn.setup makes of partitions, on a rank that is a thread
            run = distgnn.Run(cfg, partition_shard(str(source), cfg, comm, PhaseTimer(),
                                                   torch.device("cpu"), "numba"), comm)
        net = Net("SAGEConv-mean", run.num_features, run.num_classes)
        net.load_state_dict(start)
        model = run.place(dpyg.distribute(net))
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        losses = []
        for epoch in range(20):
            run.start_epoch(model, epoch)
            opt.zero_grad()
            loss = run.loss(model(run.g, run.x))
            loss.backward()
            losses.append(run.sync(model, loss))
            opt.step()
        run.close()
        return losses

    one = loop(ds)
    two = on_threads(2, lambda comm: loop(sources[2], comm))[0]
    np.testing.assert_allclose(two, one, rtol=1e-5)
    for algo in ("cd-r", "0c"):
        losses = on_threads(2, lambda comm: loop(sources[2], comm, algo))[0]
        assert all(np.isfinite(losses)) and losses[-1] < losses[0]


@contextlib.contextmanager
def partitioned(dataset: str):
    """``(dataset, {1: dataset, 2: DIR, 4: DIR})``: ``dataset`` (``weighted``: the tests'
    graph) and its Libra partitions into 2 and 4 parts, removed afterwards."""
    ds = weighted_graph() if dataset == "weighted" else distgnn.load(dataset)
    with tempfile.TemporaryDirectory() as root:
        sources = {1: ds}
        for parts in (2, 4):
            write_dir(ds, f"{root}/p{parts}", parts)
            sources[parts] = f"{root}/p{parts}"
        yield ds, sources


def table(dataset: str, epochs: int) -> None:
    """Print, per layer, ranks and type, the max relative loss difference against one
    process (cd-0, dropout 0.5, ``epochs`` epochs, ranks on threads)."""
    with partitioned(dataset) as (ds, sources):
        print(f"| layer | ranks | float32 | float64 |  ({dataset}, {epochs} epochs, cd-0, "
              "dropout 0.5)\n|---|---|---|---|")
        for layer in LAYERS:
            gaps = {}
            for dtype in ("float32", "float64"):
                cfg = quiet(dtype=dtype, epochs=epochs, eval_every=epochs)

                def make(f, c, layer=layer):
                    return dpyg.distribute(Net(layer, f, c))

                one = train_on_ranks(ds, 1, cfg, make)[0]
                for ranks in (2, 4):
                    gaps[ranks, dtype] = loss_gap(one, train_on_ranks(sources[ranks], ranks,
                                                                      cfg, make)[0])
            for ranks in (2, 4):
                print(f"| {layer} | {ranks} | {gaps[ranks, 'float32']:.1e} | "
                      f"{gaps[ranks, 'float64']:.1e} |", flush=True)


def survey(dataset: str, epochs: int) -> None:
    """Print what happens to each of PyG's other layers and models
    (:data:`~tests.helpers.pyg_models.MORE_LAYERS`,
    :data:`~tests.helpers.pyg_models.REFUSED`): refused by ``distribute`` (the line), or
    trained on 2 and 4 ranks in float64 (the max relative loss difference against one
    process)."""
    with partitioned(dataset) as (ds, sources):
        print("| layer | what happens | 2 ranks | 4 ranks |\n|---|---|---|---|")
        for layer in [*MORE_LAYERS, *REFUSED]:
            def make(f, c, layer=layer):
                return dpyg.distribute(Net(layer, f, c))

            cfg = quiet(dtype="float64", epochs=epochs, eval_every=epochs)
            try:
                one = train_on_ranks(ds, 1, cfg, make)[0]
                gaps = [loss_gap(one, train_on_ranks(sources[r], r, cfg, make)[0])
                        for r in (2, 4)]
                print(f"| {layer} | trained | {gaps[0]:.1e} | {gaps[1]:.1e} |", flush=True)
            except DistGNNError as e:
                print(f"| {layer} | refused: {e} | | |", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="weighted", help="a dataset name (default: the "
                   "weighted random graph of the tests)")
    p.add_argument("--epochs", type=int, default=50, help="epochs per run")
    p.add_argument("--survey", action="store_true", help="try the other PyG layers instead")
    a = p.parse_args()
    (survey if a.survey else table)(a.dataset, a.epochs)
