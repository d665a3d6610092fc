"""Activations saved for the backward pass in bf16: what is narrowed, what is kept, and
gradients that differ from float32 storage by rounding only."""
import copy

import pytest
import torch

from distgnn.nn import prepare
from distgnn.nn.aggregate import Neighbourhood
from distgnn.nn.backends import TorchSparseBackend
from distgnn.nn.models import GNN
from distgnn.nn.saved_activations import MIN_ELEMENTS, saved_in_bf16


def test_large_float_tensors_are_narrowed_once_and_parameters_never():
    lin = torch.nn.Linear(512, 512)
    x = torch.randn(512, 512, requires_grad=True)
    packed = {}
    with saved_in_bf16({p.untyped_storage().data_ptr() for p in lin.parameters()}, packed):
        y = x * x  # saves x twice: stored once
        z = lin(y)  # saves y and the weight; the weight stays float32
    assert len(packed) == 2
    assert all(t.dtype == torch.bfloat16 for _, t in packed.values())
    assert {t.shape for _, t in packed.values()} == {(512, 512)}
    z.sum().backward()
    # d/dx sum(W (x*x)) = 2 x * (1 W): the saved x and x*x are rounded, W is not
    want = 2 * x.detach() * lin.weight.detach().sum(0)
    torch.testing.assert_close(x.grad, want, rtol=2 ** -7, atol=1e-6)
    small = torch.randn(MIN_ELEMENTS - 1, requires_grad=True)
    packed.clear()
    with saved_in_bf16(set(), packed):
        (small * small).sum().backward()
    assert not packed and torch.equal(small.grad, 2 * small.detach())


def test_an_address_freed_within_the_pass_is_not_mistaken_for_its_next_tensor():
    # sin saves (a * 2), which nothing else holds: it is freed at once and the allocator
    # hands its address to (b * 3), of the same shape; a copy found by address alone would
    # give b the gradient of a's values
    reused = 0
    for _ in range(200):
        if reused >= 3:
            break
        a, b = (torch.randn(256, 256, requires_grad=True) for _ in range(2))
        packed = {}
        with saved_in_bf16(set(), packed):
            y = (a * 2).sin()
            z = (b * 3).sin()
        reused += len(packed) == 1  # both saved under one address
        (y.sum() + z.sum()).backward()
        for x, scale in ((a, 2), (b, 3)):  # d/dx sin(s x) = s cos(s x), s x read back rounded
            want = scale * torch.cos((scale * x.detach()).bfloat16().float())
            torch.testing.assert_close(x.grad, want, rtol=1e-5, atol=1e-6)
    if not reused:  # malloc's state is the process's, left by the tests before this one
        pytest.skip("malloc gave no address twice in 200 passes in this process: the case "
                    "this test is about did not happen")


def _gradients(model, g, x, y, bf16: bool) -> dict:
    model = copy.deepcopy(model)
    prepare(model, g, bf16_activations=bf16)
    model.train()
    g.set_epoch(3, True)
    torch.nn.functional.cross_entropy(model(g, x), y).backward()
    g.set_epoch(0, False)
    with torch.no_grad():  # evaluation saves nothing: the hooks stay out of it
        model.eval()
        model(g, x)
    return {name: p.grad for name, p in model.named_parameters()}


def test_training_gradients_change_by_rounding_only(random_graph):
    graph, *_ = random_graph(seed=3, n=600, e=6000)
    g = Neighbourhood(graph, TorchSparseBackend())
    torch.manual_seed(0)
    x, y = torch.randn(600, 256), torch.randint(0, 5, (600,))
    model = GNN("sage", 256, 256, 5, num_layers=2, aggregator="gcn")
    exact, rounded = _gradients(model, g, x, y, False), _gradients(model, g, x, y, True)
    assert exact.keys() == rounded.keys()
    differs = False
    for name in exact:
        torch.testing.assert_close(rounded[name], exact[name], rtol=0.02,
                                   atol=0.02 * float(exact[name].abs().max()))
        differs |= not torch.equal(rounded[name], exact[name])
    assert differs  # the saved [600, 256] activations were rounded
