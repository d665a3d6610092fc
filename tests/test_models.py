"""GCNConv and SAGEConv against dense-adjacency references written from their docstrings'
math (outputs and gradients), and the GNN stack's shape, dropout, residual and arguments."""
import pytest
import torch

from distgnn.nn import GCNConv, SAGEConv
from distgnn.nn.aggregate import Neighbourhood
from distgnn.nn.backends import TorchSparseBackend
from distgnn.nn.models import GNN
from distgnn.nn.sage_conv import SAGE_AGGREGATORS

LAYERS = ["gcn_conv"] + [f"sage_{a}" for a in SAGE_AGGREGATORS]
N = 30


@pytest.fixture
def case(random_graph):
    """``(neighbourhood, dense float64 A with A[v, u] = number of edges u -> v)``."""
    g, src, dst, _ = random_graph(seed=5, n=N, e=100)
    a = torch.zeros(N, N, dtype=torch.float64)
    a.index_put_((torch.from_numpy(dst), torch.from_numpy(src)),
                 torch.ones(len(src), dtype=torch.float64), accumulate=True)
    return Neighbourhood(g, TorchSparseBackend()), a


def make_layer(name, d_in, d_out):
    torch.manual_seed(0)
    conv = GCNConv(d_in, d_out) if name == "gcn_conv" else SAGEConv(d_in, d_out, name[5:])
    with torch.no_grad():
        conv.bias.normal_()  # glorot() zeroes it; a zero bias would hide a missing "+ b"
    return conv


def reference(name, p, a, h):
    """The docstring formula, in float64, with ``p`` the layer's parameters by name."""
    deg = a.sum(1, keepdim=True)
    if name == "gcn_conv":
        s = (deg + 1).rsqrt()
        return s * ((a + torch.eye(N, dtype=a.dtype)) @ (s * h)) @ p["lin.weight"].T + p["bias"]
    agg = name[5:]
    if agg == "gcn":
        return ((a @ h + h) / (deg + 1)) @ p["lin_neigh.weight"].T + p["bias"]
    if agg == "sum":
        z = a @ h
    elif agg == "mean":
        z = a @ h / deg.clamp(min=1)
    else:  # element-wise max (min) over in-neighbours, 0 where there are none
        sign = 1 if agg == "max" else -1
        masked = (sign * h).expand(N, N, h.shape[1]).masked_fill((a == 0).unsqueeze(2),
                                                                  -torch.inf)
        z = torch.where(deg > 0, sign * masked.amax(1), torch.zeros(()))
    return h @ p["lin_root.weight"].T + z @ p["lin_neigh.weight"].T + p["bias"]


@pytest.mark.parametrize("d_in,d_out", [(8, 3), (3, 8)], ids=["project_first", "aggregate_first"])
@pytest.mark.parametrize("name", LAYERS)
def test_layer_forward_and_gradients_match_dense_reference(case, name, d_in, d_out):
    nbr, a = case
    conv = make_layer(name, d_in, d_out)
    assert conv.project_first == (d_out < d_in and name not in ("sage_max", "sage_min"))
    torch.manual_seed(1)
    h = torch.randn(N, d_in, requires_grad=True)
    probe = torch.randn(N, d_out, dtype=torch.float64)  # a random linear functional
    out = conv(nbr, h)
    (out.double() * probe).sum().backward()

    p = {k: v.detach().double().requires_grad_() for k, v in conv.named_parameters()}
    h_ref = h.detach().double().requires_grad_()
    expected = reference(name, p, a, h_ref)
    (expected * probe).sum().backward()

    assert out.shape == (N, d_out)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h.grad.double(), h_ref.grad, rtol=1e-4, atol=1e-5)
    for k, v in conv.named_parameters():
        torch.testing.assert_close(v.grad.double(), p[k].grad, rtol=1e-4, atol=1e-5, msg=k)


def gnn_pair(**kw):
    """Two models with identical weights, ``residual`` off and on."""
    torch.manual_seed(0)
    plain = GNN(**kw, residual=False)
    skip = GNN(**kw, residual=True)
    skip.load_state_dict(plain.state_dict())
    return plain.eval(), skip.eval()


@pytest.mark.parametrize("model", ["gcn", "sage"])
@pytest.mark.parametrize("num_layers", [1, 2, 3])
def test_gnn_output_shape(case, model, num_layers):
    net = GNN(model, 6, 16, 4, num_layers=num_layers, aggregator="mean")
    assert len(net.convs) == num_layers
    assert net(case[0], torch.randn(N, 6)).shape == (N, 4)


def forward(net, g, x, epoch, training=True):
    """``net(g, x)`` in epoch ``epoch``, training or evaluating, as the trainer runs it."""
    net.train(training)
    g.set_epoch(epoch, training)
    return net(g, x)


def test_gnn_without_dropout_is_the_same_in_train_and_eval(case):
    net = GNN("sage", 6, 16, 4, num_layers=3, dropout=0.0)
    x = torch.randn(N, 6)
    assert torch.equal(forward(net, case[0], x, 1), forward(net, case[0], x, 1, False))


def test_gnn_dropout_depends_on_mode_and_epoch(case):
    net = GNN("gcn", 6, 16, 4, num_layers=2, dropout=0.5)
    x = torch.randn(N, 6)
    a, b, c = (forward(net, case[0], x, e) for e in (1, 1, 2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert not torch.equal(a, forward(net, case[0], x, 1, False))


@pytest.mark.parametrize("num_layers,d_in,changes",
                         [(1, 6, False), (2, 6, False), (3, 6, True), (2, 16, True)])
def test_residual_only_acts_where_layer_width_is_kept(case, num_layers, d_in, changes):
    """Skips exist on hidden-to-hidden layers, and on the first if ``d_in == hidden``
    (without one the models agree to rounding: the plain one projects the last layer in its
    fused epilogue)."""
    plain, skip = gnn_pair(model="sage", in_channels=d_in, hidden_channels=16, out_channels=4,
                           num_layers=num_layers, dropout=0.0)
    x = torch.randn(N, d_in)
    same = torch.allclose(plain(case[0], x), skip(case[0], x), rtol=1e-5, atol=1e-6)
    assert same != changes


@pytest.mark.parametrize("kw", [dict(model="gatv2"), dict(num_layers=0), dict(dropout=1.0),
                                dict(dropout=-0.1), dict(model="sage", aggregator="lstm"),
                                dict(model="gat", hidden_channels=12),
                                dict(model="gin", precompute_first=True),
                                dict(model="sage", aggregator="min", precompute_first=True)])
def test_gnn_invalid_arguments_raise_value_error(kw):
    args = dict(model="gcn", in_channels=6, hidden_channels=16, out_channels=4) | kw
    with pytest.raises(ValueError):
        GNN(**args)


@pytest.mark.parametrize("model", ["gcn", "sage"])
@pytest.mark.parametrize("features", [4, 12])  # 12 > hidden 8: the plain model projects first
def test_precomputed_first_aggregation_is_the_same_model_with_one_aggregation(case, model,
                                                                             features):
    """With the input aggregated once, logits and parameter gradients equal the plain model's
    (no dropout on the input), and later epochs run one SpMM fewer."""
    nbr = case[0]
    x = torch.randn(N, features)
    torch.manual_seed(1)
    plain = GNN(model, features, 8, 3, num_layers=2, dropout=0.0)
    torch.manual_seed(1)
    cached = GNN(model, features, 8, 3, num_layers=2, dropout=0.0, precompute_first=True)
    grads = []
    for net in (plain, cached):
        net.zero_grad()
        out = forward(net, nbr, x, 0)
        out.square().sum().backward()
        grads.append([p.grad.clone() for p in net.parameters()])
        if net is plain:
            expected = out.detach()
    assert torch.allclose(out, expected, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(*grads))
    calls = []
    nbr.backend.spmm = lambda g, h, r, f=nbr.backend.spmm: calls.append(1) or f(g, h, r)
    forward(plain, nbr, x, 1)
    plain_calls, calls[:] = len(calls), []
    forward(cached, nbr, x, 1)
    assert len(calls) == plain_calls - 1


def test_precomputed_first_aggregation_needs_a_linear_aggregation():
    with pytest.raises(ValueError, match="a linear"):
        GNN("sage", 4, 8, 3, aggregator="max", precompute_first=True)

