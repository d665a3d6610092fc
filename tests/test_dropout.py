"""Vertex-keyed dropout: keep rate, scaling, determinism per key, dependence on the global
vertex id only (what makes partitioned runs draw the whole graph's masks), and backward."""
import numpy as np
import pytest
import torch

from distgnn.data.graph import GraphError
from distgnn.kernels.dropout import dropout_key
from distgnn.nn.dropout import apply_dropout_mask, vertex_dropout

KEY = dropout_key(seed=7, step=3, layer=1)


def mask(n, d, p, key=KEY, ids=None):
    """bool ``[n, d]``: the kept entries (applied to ones)."""
    ids = np.arange(n) if ids is None else np.asarray(ids)
    return apply_dropout_mask(np.ones((n, d)), ids, p, key) != 0


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_kept_fraction_is_one_minus_p(p):
    kept = mask(100_000, 16, p).mean()
    assert abs(kept - (1 - p)) < 0.01 * (1 - p)


@pytest.mark.parametrize("dtype,rtol", [(np.float32, 1e-6), (np.float64, 1e-15)])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_values_are_zero_or_scaled_input(p, dtype, rtol):
    x = (np.random.default_rng(0).random((2000, 8)) + 0.5).astype(dtype)  # no zeros
    out = apply_dropout_mask(x, np.arange(2000), p, KEY)
    assert out.dtype == dtype
    kept = out != 0
    assert 0 < kept.sum() < x.size
    np.testing.assert_allclose(out[kept], x[kept] / (1 - p), rtol=rtol)


def test_same_key_same_mask_and_other_keys_differ():
    assert np.array_equal(mask(1000, 8, 0.5), mask(1000, 8, 0.5, dropout_key(7, 3, 1)))
    others = [dropout_key(8, 3, 1), dropout_key(7, 4, 1), dropout_key(7, 3, 2)]
    assert len({KEY, *others}) == 4
    for key in others:
        agree = (mask(1000, 8, 0.5, key) == mask(1000, 8, 0.5)).mean()
        assert 0.45 < agree < 0.55  # independent masks agree on about half the entries


def test_mask_of_a_vertex_depends_only_on_its_global_id():
    whole = mask(10, 6, 0.5)
    part = mask(3, 6, 0.5, ids=[5, 9, 2])
    np.testing.assert_array_equal(part, whole[[5, 9, 2]])
    assert not np.array_equal(part, whole[:3])


def test_vertex_dropout_backward_applies_the_same_mask():
    torch.manual_seed(0)
    h = (torch.rand(50, 7) + 0.5).requires_grad_()
    out = vertex_dropout(h, np.arange(100, 150), 0.3, KEY)
    grad = torch.randn(50, 7)
    out.backward(grad)
    ratio = out.detach() / h.detach()  # the mask: 0 or 1 / (1 - p)
    kept = ratio != 0
    assert 0 < kept.sum() < kept.numel()
    torch.testing.assert_close(ratio[kept], torch.full_like(ratio[kept], 1 / 0.7))
    torch.testing.assert_close(h.grad, grad * ratio)


def test_p_zero_returns_the_input_unchanged():
    h = torch.randn(20, 4, requires_grad=True)
    assert vertex_dropout(h, np.arange(20), 0.0, KEY) is h
    x = h.detach().numpy()
    np.testing.assert_array_equal(apply_dropout_mask(x, np.arange(20), 0.0, KEY), x)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_torch_mask_has_the_numba_kernel_bits(p):
    """GPU ranks draw the mask with torch ops; on the CPU they must give the same bits."""
    from distgnn.kernels.dropout import dropout_mask_torch

    ids = np.array([0, 1, 5, 17, 123_456_789, 2**40 + 3, 2**62], np.int64)
    for key in (KEY, dropout_key(seed=2**40, step=10**6, layer=0), 2**64 - 1):
        expected = apply_dropout_mask(np.ones((len(ids), 37), np.float32), ids, p, key)
        got = dropout_mask_torch(torch.from_numpy(ids), 37, p, key, torch.float32)
        np.testing.assert_array_equal(got.numpy(), expected)


def test_rows_without_a_global_id_and_probabilities_out_of_range_are_refused():
    """The kernel reads ``global_ids[i]`` for every row ``i``: more rows than ids (or not
    ``[n, d]``) is refused before it runs, as is a ``p`` that is no probability below 1."""
    ids = np.arange(10)
    for x in (np.ones((11, 3), np.float32), np.ones((10,), np.float32)):
        with pytest.raises(GraphError, match=r"expected \[10, d\]"):
            apply_dropout_mask(x, ids, 0.5, KEY)
    with pytest.raises(GraphError, match=r"shape \[20, 3\], expected \[10, d\]"):
        vertex_dropout(torch.ones(20, 3), ids, 0.5, KEY)
    for p in (1.0, 1.5, -0.5, float("nan")):
        with pytest.raises(GraphError, match=r"must be in \[0, 1\)"):
            vertex_dropout(torch.ones(10, 3), ids, p, KEY)


def test_vertex_dropout_runs_under_the_profiler_with_keys_of_64_bits():
    """torch's profiler records a function's arguments as int64: a key of 2^63 and more,
    passed as a Python int, failed the forward pass under it."""
    key = (1 << 63) + 12345
    h = torch.ones(6, 4, requires_grad=True)
    with torch.profiler.profile(record_shapes=True):
        y = vertex_dropout(h, np.arange(6), 0.5, key)
        y.sum().backward()
    expected = torch.from_numpy(apply_dropout_mask(np.ones((6, 4), np.float32), np.arange(6),
                                                   0.5, key))
    assert torch.equal(y.detach(), expected) and torch.equal(h.grad, expected)


@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("p", [0.0, 0.5])
@pytest.mark.parametrize("width", [13, 64])
@pytest.mark.parametrize("with_bias", [True, False])
def test_fused_bias_relu_dropout_is_the_separate_operations(dtype, rtol, p, width, with_bias):
    """bias_relu_dropout: the output and the input's gradient of vertex_dropout(relu(x + b))
    bit for bit (NaN kept where the mask keeps it, zeros included), the bias gradient to
    rounding, with only ceil(d / 8) bytes per row saved for the backward pass."""
    from distgnn.nn.dropout import bias_relu_dropout
    from distgnn.nn.graph_layer import relu

    gen = torch.Generator().manual_seed(width)
    x = torch.randn(500, width, generator=gen, dtype=dtype)
    x[:5] = 0.0
    x[7, 3] = float("nan")
    bias = torch.randn(width, generator=gen, dtype=dtype) if with_bias else None
    grad = torch.randn(500, width, generator=gen, dtype=dtype)
    ids = np.arange(1000, 1500)
    saved = []
    ours = x.clone().requires_grad_()
    ours_bias = bias.clone().requires_grad_() if with_bias else None
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = bias_relu_dropout(ours, ours_bias, ids, p, KEY)
    out.backward(grad)
    theirs = x.clone().requires_grad_()
    theirs_bias = bias.clone().requires_grad_() if with_bias else None
    expected = relu(theirs if bias is None else theirs + theirs_bias)
    expected = vertex_dropout(expected, ids, p, KEY) if p else expected
    expected.backward(grad)
    assert torch.equal(out, expected) or torch.equal(out.nan_to_num(), expected.nan_to_num())
    assert out.isnan().sum() == expected.isnan().sum()
    assert torch.equal(ours.grad, theirs.grad)
    if with_bias:
        torch.testing.assert_close(ours_bias.grad, theirs_bias.grad, rtol=rtol, atol=rtol)
    assert [(t.dtype, tuple(t.shape)) for t in saved] == [(torch.uint8,
                                                           (500, (width + 7) // 8))]


@pytest.mark.parametrize("p", [0.0, 0.5])
def test_fused_bias_relu_dropout_of_bf16_rows_rounds_the_float32_result_once(p):
    """A bf16 x (a product's output under autocast) with a float32 bias: the output is the
    float32 computation on the widened x rounded to bf16 once (as torch rounds, NaN
    included), the input's gradient the float32 gradient of a bf16 grad rounded once, the
    bias gradient float32."""
    from distgnn.nn.dropout import bias_relu_dropout
    from distgnn.nn.graph_layer import relu

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(700, 37, generator=gen).bfloat16()
    x[:4] = 0.0
    x[9, 5] = float("nan")
    bias = torch.randn(37, generator=gen)
    grad = torch.randn(700, 37, generator=gen).bfloat16()
    ours, ours_bias = x.clone().requires_grad_(), bias.clone().requires_grad_()
    out = bias_relu_dropout(ours, ours_bias, np.arange(700), p, KEY)
    out.backward(grad)
    wide, wide_bias = x.float().requires_grad_(), bias.clone().requires_grad_()
    expected = relu(wide + wide_bias)  # a NaN gets no gradient, as in the float32 kernel
    expected = vertex_dropout(expected, np.arange(700), p, KEY) if p else expected
    expected.backward(grad.float())
    assert out.dtype == ours.grad.dtype == torch.bfloat16 and ours_bias.grad.dtype == torch.float32
    assert torch.equal(out.float().nan_to_num(), expected.bfloat16().float().nan_to_num())
    assert out.isnan().sum() == expected.isnan().sum() == (1 if not p else out.isnan().sum())
    assert torch.equal(ours.grad, wide.grad.bfloat16())
    torch.testing.assert_close(ours_bias.grad, wide_bias.grad, rtol=1e-5, atol=1e-5)


def test_fused_bias_gradient_does_not_depend_on_the_thread_count():
    """The bias gradient's partial sums follow fixed blocks of rows, so a run on another
    number of threads (a resumed job, another node) computes the same bits."""
    import numba

    from distgnn.nn.dropout import bias_relu_dropout

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(20_000, 32, generator=gen)
    grad = torch.randn(20_000, 32, generator=gen)
    grads = []
    threads = numba.get_num_threads()
    try:
        for n in sorted({1, threads}):
            numba.set_num_threads(n)
            bias = torch.zeros(32, requires_grad=True)
            bias_relu_dropout(x, bias, np.arange(20_000), 0.5, KEY).backward(grad)
            grads.append(bias.grad)
    finally:
        numba.set_num_threads(threads)
    assert all(torch.equal(g, grads[0]) for g in grads)
