"""Numba SpMM kernels against scipy, blocking and threading invariance, autotune; bf16
aggregation through the backends and in training."""
import numba
import numpy as np
import pytest
import scipy.sparse as sp

from distgnn.kernels import plan_spmm, spmm
from distgnn.kernels.autotune import autotune_plan, cache_sizes, candidate_hub_blocks
from distgnn.kernels.blocking import balanced_chunks


def skewed_csr(n=120_000, e=40_000, hub_degree=110_000, seed=0, index_dtype=np.int32):
    """CSR with empty rows, self-loops, and vertex 7 of in-degree ``hub_degree`` (> 10^5)."""
    rng = np.random.default_rng(seed)
    src = np.concatenate([rng.integers(0, n, e), rng.permutation(n)[:hub_degree],
                          np.arange(50)])
    dst = np.concatenate([rng.integers(0, 3000, e), np.full(hub_degree, 7), np.arange(50)])
    m = sp.csr_matrix((rng.uniform(-1, 1, len(src)).astype(np.float32), (dst, src)), (n, n))
    m.sum_duplicates()
    return m.indptr.astype(np.int64), m.indices.astype(index_dtype), m.data, m


def reference(m, x, reduce, weighted):
    a = m.copy() if weighted else sp.csr_matrix((np.ones_like(m.data), m.indices, m.indptr),
                                               m.shape)
    if reduce in ("sum", "mean"):
        y = a @ x.astype(np.float64)
        return y / np.maximum(np.diff(m.indptr), 1)[:, None] if reduce == "mean" else y
    out = np.zeros((m.shape[0], x.shape[1]))
    rows = np.flatnonzero(np.diff(m.indptr))
    vals = a.data[:, None] * x[m.indices]
    ufunc = np.maximum if reduce == "max" else np.minimum
    out[rows] = ufunc.reduceat(vals, m.indptr[rows])
    return out


@pytest.fixture(scope="module")
def graph():
    return skewed_csr()


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min"])
def test_matches_scipy(reduce, weighted, index_dtype):
    indptr, indices, data, m = skewed_csr(index_dtype=index_dtype)
    assert np.diff(indptr).max() > 100_000 and (np.diff(indptr) == 0).any()
    x = np.random.default_rng(1).standard_normal((m.shape[1], 24)).astype(np.float32)
    got = spmm(indptr, indices, x, reduce, data if weighted else None)
    y = got[0] if reduce in ("max", "min") else got
    want = reference(m, x, reduce, weighted)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_blocking_does_not_change_the_result(graph, reduce):
    indptr, indices, data, m = graph
    x = np.random.default_rng(2).standard_normal((m.shape[1], 40)).astype(np.float32)
    unblocked = spmm(indptr, indices, x, reduce, data)
    scale = np.abs(unblocked).max()
    for hub in (1, 16, 500, 100_000):
        plan = plan_spmm(indptr, indices, data, hub, m.shape[1])
        assert len(plan.blocks) == 2 and plan.hub_block == hub
        blocked = spmm(indptr, indices, x, reduce, data, plan=plan)
        # Same terms, other order: float32 rounding of a 110,000-term row sum.
        np.testing.assert_allclose(blocked, unblocked, rtol=1e-4, atol=1e-4 * scale)


def test_hub_block_holds_the_highest_out_degree_sources(graph):
    indptr, indices, _, m = graph
    plan = plan_spmm(indptr, indices, None, 10, m.shape[1])
    out_degree = np.bincount(indices, minlength=m.shape[1])
    hubs = np.unique(plan.blocks[0].indices)
    assert len(hubs) == 10
    assert out_degree[hubs].min() >= np.sort(out_degree)[-10]
    assert plan.blocks[0].indptr[-1] + plan.blocks[1].indptr[-1] == len(indices)


@pytest.mark.parametrize("reduce", ["sum", "max"])
def test_one_and_two_threads_agree(graph, reduce):
    indptr, indices, data, m = graph
    x = np.random.default_rng(3).standard_normal((m.shape[1], 16)).astype(np.float32)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = spmm(indptr, indices, x, reduce, data)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = spmm(indptr, indices, x, reduce, data)
    finally:
        numba.set_num_threads(before)
    for a, b in zip(*(r if isinstance(r, tuple) else (r,) for r in (one, two))):
        np.testing.assert_array_equal(a, b)  # rows never split across threads


def test_empty_and_single_vertex_graphs():
    x = np.ones((1, 3), np.float32)
    np.testing.assert_array_equal(spmm(np.zeros(2, np.int64), np.zeros(0, np.int32), x),
                                  np.zeros((1, 3)))
    assert spmm(np.zeros(1, np.int64), np.zeros(0, np.int32), np.ones((0, 3), np.float32)
                ).shape == (0, 3)
    y, arg = spmm(np.array([0, 1]), np.array([0], np.int32), 2 * x, "max")
    np.testing.assert_array_equal(y, 2 * x)
    np.testing.assert_array_equal(arg, [[0, 0, 0]])


def test_balanced_chunks_split_by_nonzeros():
    indptr = np.concatenate([[0], np.cumsum([1000] + [1] * 1000)]).astype(np.int64)
    bounds = balanced_chunks(indptr, 4)
    assert bounds[0] == 0 and bounds[-1] == 1001 and np.all(np.diff(bounds) > 0)
    assert bounds[1] == 1  # the heavy row is a chunk by itself
    nnz = np.diff(indptr[bounds])
    assert nnz[1:].max() - nnz[1:].min() <= 2


def test_autotune_trial_picks_the_fastest_candidate(graph):
    indptr, indices, data, m = graph
    plan, times = autotune_plan(indptr, indices, data, m.shape[1], 32, trial=True)
    assert set(times) == set(candidate_hub_blocks(32, m.shape[1]))
    assert plan.hub_block == min(times, key=times.get)
    plan, times = autotune_plan(indptr, indices, data, m.shape[1], 32)  # small: no trial
    assert times == {} and plan.hub_block == 0


def test_autotune_trial_runs_on_the_callers_arrays_with_two_plans_alive(graph, monkeypatch):
    """The trial times the caller's operand into the caller's buffer (which ends holding the
    product) and builds each candidate only after the slower one before it is gone."""
    import weakref

    from distgnn.kernels import autotune

    indptr, indices, data, m = graph
    built, most = [], []  # weak references to every plan built; plans alive at each build
    real = autotune.plan_spmm

    def counted(*args, **kwargs):
        plan = real(*args, **kwargs)
        built.append(weakref.ref(plan))
        most.append(sum(ref() is not None for ref in built))
        return plan

    monkeypatch.setattr(autotune, "plan_spmm", counted)
    monkeypatch.setattr(autotune, "as_aligned", lambda a: a)  # the arrays as passed
    x = np.random.default_rng(3).standard_normal((m.shape[1], 32), dtype=np.float32)
    out = np.full((m.shape[0], 32), np.nan, np.float32)
    plan, times = autotune_plan(indptr, indices, data, m.shape[1], 32, trial=True, x=x, out=out)
    assert len(times) == len(most) >= 3 and max(most) == 2
    assert plan.hub_block == min(times, key=times.get)
    np.testing.assert_allclose(out, m @ x, rtol=1e-4, atol=1e-4)


def test_cache_sizes_are_read_from_the_os():
    sizes = cache_sizes()
    if not sizes:
        pytest.skip("no /sys cache information on this machine")
    assert sizes["L2"] >= 64 << 10
    assert candidate_hub_blocks(128, 10**9)[1] == int(0.5 * sizes["L2"] / 512)


def test_misaligned_and_strided_inputs_give_the_aligned_result(graph):
    from distgnn.kernels.spmm import as_aligned, empty_aligned

    indptr, indices, _, m = graph
    base = np.random.default_rng(3).standard_normal((m.shape[1] * 16 + 1,), dtype=np.float32)
    misaligned = base[1:].reshape(-1, 16)  # 4 bytes past numpy's own alignment
    if misaligned.ctypes.data % 64 == 0:
        misaligned = base[:-1].reshape(-1, 16)
    assert misaligned.ctypes.data % 64 != 0
    aligned = empty_aligned(misaligned.shape, np.float32)
    aligned[...] = misaligned
    assert aligned.ctypes.data % 64 == 0 and as_aligned(aligned) is aligned
    assert as_aligned(misaligned).ctypes.data % 64 == 0
    strided = np.asfortranarray(misaligned)
    expected = spmm(indptr, indices, aligned)
    assert expected.ctypes.data % 64 == 0
    np.testing.assert_array_equal(spmm(indptr, indices, misaligned), expected)
    np.testing.assert_array_equal(spmm(indptr, indices, strided), expected)


@pytest.mark.parametrize("width,distance", [(1, 64), (16, 64), (64, 16), (128, 8), (256, 4),
                                            (4096, 4)])
def test_prefetch_distance_keeps_about_four_kilobytes_in_flight(width, distance):
    from distgnn.kernels.spmm import prefetch_distance

    assert prefetch_distance(width) == distance
    assert prefetch_distance(2 * width, 2) == distance  # bf16: the same bytes in flight
    if cache_sizes():
        assert prefetch_distance(width, 4, rows=1) == 0  # rows in cache need no hints


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to bf16 (to nearest even, by torch), as uint16 bit patterns."""
    import torch

    return torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("width", [1, 7, 8, 16, 24, 40, 64, 100, 136, 256])
@pytest.mark.parametrize("reduce,weighted", [("sum", False), ("mean", True)])
def test_every_width_matches_scipy_in_float32_and_bf16(graph, width, reduce, weighted):
    """Panels of 64/32/16/8 lanes and the masked tail, over empty rows and a 110,000-edge
    row (split into many edge runs); bf16 against scipy on the bf16-rounded features."""
    from distgnn.kernels.spmm import edge_block, panel_lanes

    indptr, indices, data, m = graph
    assert np.diff(indptr).max() > 10 * edge_block(width, 2)
    weight = data if weighted else None
    x = np.random.default_rng(width).standard_normal((m.shape[1], width)).astype(np.float32)
    bits = bf16_bits(x)
    exact = reference(m, x, reduce, weighted)
    rounded = reference(m, bf16_values(bits), reduce, weighted)
    scale = np.abs(exact).max()
    y32 = spmm(indptr, indices, x, reduce, weight)
    y16 = spmm(indptr, indices, bits, reduce, weight)
    assert y16.dtype == np.float32 and panel_lanes(width) <= max(width, 8)
    np.testing.assert_allclose(y32, exact, rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(y16, rounded, rtol=1e-5, atol=1e-5 * scale)
    # bf16 keeps 8 bits of mantissa: each term is off by at most 2^-9 of itself.
    bound = reference(m, np.abs(x), reduce, weighted=False) * np.abs(data).max() * 2.0**-8
    assert np.all(np.abs(y16 - y32) <= bound + 1e-5 * scale)


def test_bf16_through_a_hub_block_plan_and_into_given_out(graph):
    indptr, indices, data, m = graph
    x = np.random.default_rng(4).standard_normal((m.shape[1], 48)).astype(np.float32)
    bits = bf16_bits(x)
    plan = plan_spmm(indptr, indices, data, 16, m.shape[1])
    out = np.full((m.shape[0], 48), np.nan, np.float32)
    y = spmm(indptr, indices, bits, "mean", data, out=out, plan=plan)
    assert y is out
    want = reference(m, bf16_values(bits), "mean", True)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_bf16_max_is_refused():
    with pytest.raises(ValueError, match="bf16 features aggregate by sum or mean"):
        spmm(np.array([0, 1]), np.array([0], np.int32), np.ones((1, 4), np.uint16), "max")


def test_float64_features_aggregate_in_float64(graph):
    indptr, indices, data, m = graph
    x = np.random.default_rng(5).standard_normal((m.shape[1], 40))
    y = spmm(indptr, indices, x, "mean", data)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, reference(m, x, "mean", True), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_bf16_backends_agree_and_stay_near_fp32(reduce):
    """Both backends gather the same bf16-rounded operands, forward and backward; max/min
    ignore the precision."""
    import torch

    from distgnn.data.graph import CSRGraph
    from distgnn.nn.backends import get_backend

    indptr, indices, data, m = skewed_csr(n=3000, e=20_000, hub_degree=2000)
    graph = CSRGraph(indptr, indices, m.shape[0], np.abs(data))
    x = torch.randn(m.shape[0], 20, generator=torch.Generator().manual_seed(0))
    g = torch.randn(m.shape[0], 20, generator=torch.Generator().manual_seed(1))
    results = {}
    for name in ("numba", "torch"):
        for precision in ("fp32", "bf16"):
            backend = get_backend(name, precision)
            y, arg = backend.spmm(graph, x, reduce)
            results[name, precision] = y, backend.spmm_backward(graph, g, reduce, arg)
    for y, y_ref in zip(results["numba", "bf16"], results["torch", "bf16"]):
        torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-4 * float(y_ref.abs().max()))
    for y, y_ref in zip(results["numba", "bf16"], results["numba", "fp32"]):
        if reduce == "max":
            assert torch.equal(y, y_ref)
        else:
            assert y.dtype == torch.float32
            torch.testing.assert_close(y, y_ref, rtol=0.02, atol=0.01 * float(y_ref.abs().max()))


def test_unknown_aggregation_precision_is_refused():
    from distgnn.errors import DistGNNError
    from distgnn.nn.backends import get_backend

    with pytest.raises(DistGNNError, match="unknown aggregation precision 'fp16'"):
        get_backend("numba", "fp16")


def test_bf16_training_follows_the_fp32_loss_curve(cora):
    from tests.helpers.training import losses, train_quietly

    fp32 = losses(train_quietly(cora, epochs=10, seed=1))
    bf16 = losses(train_quietly(cora, epochs=10, seed=1, aggregation_precision="bf16"))
    assert fp32 != bf16  # the rounding happened
    np.testing.assert_allclose(bf16, fp32, rtol=2e-3)


@pytest.mark.parametrize("flags,message", [
    ({"aggregation_precision": "fp16"}, "--aggregation-precision must be one of fp32, bf16"),
    ({"aggregation_precision": "bf16", "dtype": "float64"}, "use fp32 with it")])
def test_aggregation_precision_flags_that_cannot_make_a_run_are_refused(flags, message):
    from distgnn.errors import DistGNNError
    from distgnn.run.config import TrainConfig

    with pytest.raises(DistGNNError, match=message):
        TrainConfig(**flags)


def test_the_backend_times_plans_only_when_a_trial_is_allowed(monkeypatch):
    """``kernel_trial=False`` (inference, ``--no-kernel-trial``): the untimed plan even on
    a graph large enough for the trial (here the threshold is lowered to the test graph)."""
    import torch

    from distgnn import kernels
    from distgnn.data.graph import CSRGraph
    from distgnn.nn.backends import get_backend

    monkeypatch.setattr(kernels.autotune, "TRIAL_MIN_EDGES", 1)
    timed = []
    real = kernels.autotune.time_plan
    monkeypatch.setattr(kernels.autotune, "time_plan",
                        lambda *a, **k: timed.append(1) or real(*a, **k))
    m = sp.random(300, 300, density=0.05, format="csr", random_state=0, dtype=np.float32)
    x = torch.randn(300, 32)
    want = torch.from_numpy(m @ x.numpy())
    for trial in (False, True):
        timed.clear()
        g = CSRGraph.from_scipy(m)
        backend = get_backend("numba", kernel_trial=trial)
        y, _ = backend.spmm(g, x, "sum")
        torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
        grad = backend.spmm_backward(g, x, "sum", None)  # the transposed plan's trial too
        torch.testing.assert_close(grad, torch.from_numpy(m.T @ x.numpy()), rtol=1e-5,
                                   atol=1e-5)
        assert bool(timed) == trial
        assert (g.cache[("numba-plan", False, 32, 4)].hub_block == 0) or trial


def test_widths_that_choose_the_same_blocking_share_one_plan():
    import torch

    from distgnn.data.graph import CSRGraph
    from distgnn.nn.backends import get_backend

    m = sp.random(200, 200, density=0.05, format="csr", random_state=1, dtype=np.float32)
    g = CSRGraph.from_scipy(m)
    backend = get_backend("numba", kernel_trial=False)
    for width in (8, 24):
        x = torch.randn(200, width)
        y, _ = backend.spmm(g, x, "sum")
        torch.testing.assert_close(y, torch.from_numpy(m @ x.numpy()), rtol=1e-5, atol=1e-5)
        grad = backend.spmm_backward(g, x, "sum", None)
        torch.testing.assert_close(grad, torch.from_numpy(m.T @ x.numpy()), rtol=1e-5,
                                   atol=1e-5)
    plans = {k: v for k, v in g.cache.items() if k[0] == "numba-plan"}
    assert len(plans) == 4
    assert plans[("numba-plan", False, 8, 4)] is plans[("numba-plan", False, 24, 4)]
    assert plans[("numba-plan", True, 8, 4)] is plans[("numba-plan", True, 24, 4)]
    assert plans[("numba-plan", False, 8, 4)] is not plans[("numba-plan", True, 8, 4)]


def test_a_source_scale_folded_into_the_plan_gives_the_gathered_sums_bit_for_bit():
    import torch

    from distgnn.data.graph import CSRGraph
    from distgnn.nn.backends import get_backend

    m = sp.random(300, 300, density=0.05, format="csr", random_state=3, dtype=np.float32)
    m = (m + m.T).tocsr()  # symmetric: GCN's backward pass runs on the same CSR
    rng = np.random.default_rng(0)
    q = rng.random(300, dtype=np.float32) + 0.5
    r = rng.random(300, dtype=np.float32) + 0.5
    x = rng.standard_normal((300, 24), dtype=np.float32)
    for weight in (None, m.data):
        for hub in (0, 9):
            gathered = spmm(m.indptr, m.indices, x, edge_weight=weight, source_scale=q,
                            row_scale=r, self_loop=True,
                            plan=plan_spmm(m.indptr, m.indices, weight, hub))
            plan = plan_spmm(m.indptr, m.indices, weight, hub, source_scale=q)
            folded = spmm(m.indptr, m.indices, x, edge_weight=weight, source_scale=q,
                          row_scale=r, self_loop=True, plan=plan)
            np.testing.assert_array_equal(folded, gathered)
            with pytest.raises(ValueError, match="folds a source scale"):
                spmm(m.indptr, m.indices, x, edge_weight=weight, plan=plan)
    # the backend folds GCN's scale once for both passes, another scale into a plan of its own
    g = CSRGraph.from_scipy(m)
    backend = get_backend("numba", kernel_trial=False)
    qt, rt = torch.from_numpy(q).view(-1, 1), torch.from_numpy(r).view(-1, 1)
    xt = torch.from_numpy(x)
    forward = backend.propagate(g, xt, qt, qt)
    backward = backend.propagate(g, xt, qt, qt, transposed=True)
    want = q[:, None] * ((m + sp.eye(300)) @ (q[:, None] * x))
    torch.testing.assert_close(forward, torch.from_numpy(want.astype(np.float32)))
    torch.testing.assert_close(backward, forward, rtol=0, atol=0)
    other = backend.propagate(g, xt, rt, None)
    torch.testing.assert_close(other, torch.from_numpy(
        ((m + sp.eye(300)) @ (r[:, None] * x)).astype(np.float32)))
    folded = g.cache[("numba-folded-plans", False)]
    assert len(folded) == 2 and all(p.hub_block == 0 for p in folded)
    assert not any(k[0] == "numba-plan" for k in g.cache)  # no unscaled plan was made
