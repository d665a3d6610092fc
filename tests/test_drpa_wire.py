"""The bf16 wire of the split-vertex exchange (:class:`distgnn.drpa.Wire`): what a receiver
decodes, summed over sends, trails what was meant by no more than the sender's residual."""
import numpy as np
import pytest
import torch

from distgnn.drpa import Wire


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_error_feedback_carries_the_rounding_into_later_sends(dtype):
    """``sum decode(encode(x_k)) + residual == sum x_k`` for a run of sends (exactly, up to the
    run's own rounding), and the residual stays within a bf16 step of the values."""
    rng = np.random.default_rng(0)
    wire = Wire("bf16", dtype)
    values = [torch.from_numpy(rng.standard_normal((50, 4)) * 3).to(dtype) for _ in range(40)]
    residual = torch.zeros(50, 4, dtype=dtype)
    out = wire.buffer(50, 4, "cpu")
    assert out.dtype == torch.int16 and out.element_size() == 2
    received = torch.zeros(50, 4, dtype=dtype)
    for x in values:
        wire.encode(x, out, residual)
        received += wire.decode(out)
        assert torch.all(residual.abs() <= 2.0 ** -8 * (x.abs() + residual.abs()).max() + 1e-30)
    meant = sum(values)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(received + residual, meant, rtol=0, atol=tol)


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
