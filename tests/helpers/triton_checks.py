"""Checks of the Triton kernels (:mod:`distgnn.kernels.gpu`) and the triton backend against
scipy, the Numba kernels and the torch backend, run as ``python -m
tests.helpers.triton_checks CHECK DEVICE``: on ``cuda``, or on ``cpu`` under Triton's
interpreter (``TRITON_INTERPRET=1`` in the environment, set before Triton is imported: the
caller's job, hence a process of its own).  Exits non-zero (an assertion) on a mismatch."""
import sys

import numpy as np
import scipy.sparse as sp
import torch

from distgnn.data.graph import CSRGraph
from distgnn.kernels import gpu
from distgnn.kernels.dropout import dropout_key
from distgnn.nn import GATConv, GCNConv, SAGEConv, assign_keys
from distgnn.nn.aggregate import Neighbourhood
from distgnn.nn.backends import get_backend
from distgnn.nn.dropout import apply_dropout_mask


def random_csr(n: int, e: int, seed: int, loops: int = 0):
    """A CSR (rows = destinations) of ``e`` random edges, ``loops`` of them self-loops."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    src[:loops] = dst[:loops]
    return CSRGraph.from_edges(src, dst, n)


def kernels(device: str) -> None:
    """spmm (plain, weighted, per head, row sums, row maxima, bf16 rows), sddmm_heads and
    keyed_dropout against references, on a graph with a hub and empty rows."""
    rng = np.random.default_rng(0)
    n = 70
    src = np.r_[rng.integers(0, n, 300), rng.integers(0, n, 200)]
    dst = np.r_[rng.integers(0, n - 10, 300), np.zeros(200, int)]  # vertex 0 a hub
    a = sp.csr_matrix((np.ones(len(src)), (dst, src)), shape=(n, n))
    a.sum_duplicates()
    a.sort_indices()
    a.data[:] = 1
    on = lambda v: torch.as_tensor(v).to(device)  # noqa: E731
    indptr, indices = on(a.indptr.astype(np.int64)), on(a.indices.astype(np.int32))
    order = gpu.row_order(indptr)
    rows = on(np.repeat(np.arange(n), np.diff(a.indptr)).astype(np.int32))
    e, heads, width = a.nnz, 3, 5
    x = torch.randn(n, 20, dtype=torch.float64)
    w = torch.rand(e, dtype=torch.float64)
    wh = torch.rand(e, heads, dtype=torch.float64)
    xh = torch.randn(n, heads * width, dtype=torch.float64)
    cpu = lambda t: t.cpu().numpy()  # noqa: E731
    np.testing.assert_allclose(cpu(gpu.spmm(indptr, indices, order, on(x))), a @ x.numpy(),
                               rtol=1e-12, atol=1e-12)
    aw = sp.csr_matrix((w.numpy(), a.indices, a.indptr), shape=(n, n))
    np.testing.assert_allclose(cpu(gpu.spmm(indptr, indices, order, on(x), on(w))),
                               aw @ x.numpy(), rtol=1e-12, atol=1e-12)
    per_head = [sp.csr_matrix((wh[:, h].numpy(), a.indices, a.indptr), shape=(n, n))
                for h in range(heads)]
    np.testing.assert_allclose(
        cpu(gpu.spmm(indptr, indices, order, on(xh), on(wh), heads)),
        np.concatenate([m @ xh[:, h * width:(h + 1) * width].numpy()
                        for h, m in enumerate(per_head)], 1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cpu(gpu.spmm(indptr, indices, order, None, on(wh), heads)),
                               np.stack([np.asarray(m.sum(1)).ravel() for m in per_head], 1),
                               rtol=1e-12, atol=1e-12)
    top = cpu(gpu.spmm(indptr, indices, order, None, on(wh), heads, row_max=True))
    degree = np.diff(a.indptr)
    assert np.all(np.isneginf(top[degree == 0]))
    for v in np.flatnonzero(degree):
        np.testing.assert_array_equal(top[v], wh[a.indptr[v]:a.indptr[v + 1]].max(0).values)
    x32 = torch.randn(n, 20)
    rounded = x32.to(torch.bfloat16).float().numpy()
    np.testing.assert_allclose(
        cpu(gpu.spmm(indptr, indices, order, on(x32.to(torch.bfloat16)),
                     out_dtype=torch.float32)), a @ rounded, rtol=1e-5, atol=1e-5)
    ga, gb, scale = (torch.randn(n, heads * width, dtype=torch.float64),
                     torch.randn(n, heads * width, dtype=torch.float64),
                     torch.rand(e, heads, dtype=torch.float64))
    src_e, dst_e = torch.from_numpy(a.indices.astype(np.int64)), rows.long().cpu()
    expected = (ga.view(n, heads, width)[dst_e] * gb.view(n, heads, width)[src_e]).sum(-1)
    got = gpu.sddmm_heads(indices, rows, on(ga), on(gb), heads, on(scale))
    np.testing.assert_allclose(cpu(got), (expected * scale).numpy(), rtol=1e-12, atol=1e-12)
    ids = rng.integers(0, 2**40, 50)
    for columns, key, dtype in ((1, dropout_key(3, 5, 1), torch.float32),
                                (7, 2**64 - 12345, torch.float64), (130, 77, torch.float32)):
        h = torch.randn(50, columns, dtype=dtype)
        got = gpu.keyed_dropout(on(h), on(ids), 0.3, key)
        np.testing.assert_array_equal(cpu(got), apply_dropout_mask(h.numpy(), ids, 0.3, key))


def layers(device: str) -> None:
    """GCN, GraphSAGE-gcn and GAT (dropout 0.4, stored self-loops present) through the
    triton backend equal the numba backend's outputs and gradients in float64."""
    graph = random_csr(60, 400, seed=1, loops=6)
    for make in (lambda: GCNConv(8, 6), lambda: SAGEConv(8, 6, "gcn"),
                 lambda: GATConv(8, 4, heads=3, dropout=0.4)):
        results = []
        for name, where in (("numba", "cpu"), ("triton", device)):
            torch.manual_seed(0)
            conv = make().double().to(where)
            assign_keys(conv)
            nbr = Neighbourhood(graph, get_backend(name), dtype=torch.float64, seed=5,
                                device=where)
            nbr.set_epoch(2, True)
            h = torch.randn(60, 8, dtype=torch.float64,
                            generator=torch.Generator().manual_seed(1)).to(where)
            h.requires_grad_()
            out = conv(nbr, h)
            out.backward(torch.randn(out.shape, dtype=torch.float64,
                                     generator=torch.Generator().manual_seed(2)).to(where))
            results.append([t.detach().cpu() for t in (out, h.grad, *(p.grad for p in
                                                                       conv.parameters()))])
        for mine, theirs in zip(*results):
            torch.testing.assert_close(theirs, mine, rtol=1e-10, atol=1e-12)


def repeat(device: str) -> None:
    """The same aggregation and GAT layer twice give the same bits."""
    graph = random_csr(300, 5000, seed=2)
    backend = get_backend("triton")
    x = torch.randn(300, 64).to(device)
    first, again = (backend.spmm(graph, x, "sum")[0] for _ in range(2))
    assert torch.equal(first, again)
    grads = [backend.spmm_backward(graph, x, "mean", None) for _ in range(2)]
    assert torch.equal(*grads)


if __name__ == "__main__":
    {"kernels": kernels, "layers": layers, "repeat": repeat}[sys.argv[1]](sys.argv[2])
