"""How this project's autograd functions meet torch's CPU autocast (``--precision bf16-mixed``).

Under autocast a matrix product hands on bf16 activations, and a function whose
Numba kernels compute in float32 takes them widened to float32 (its forward decorated with
:data:`float32_inputs`, its backward with :data:`autocast_backward`); outside autocast both
do nothing.  The SpMM takes bf16 rows as they are (:class:`~distgnn.nn.backends.NumbaBackend`)."""
from __future__ import annotations

import torch

#: a forward that receives its floating inputs as float32 under CPU autocast, and runs with
#: autocast off (its own kernels decide their precision)
float32_inputs = torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
#: the matching backward: it runs in the autocast state of its forward
autocast_backward = torch.amp.custom_bwd(device_type="cpu")


def product_operand(x: torch.Tensor) -> torch.Tensor:
    """``x`` as a matrix product under CPU autocast takes it.

    That is ``x`` cast to the autocast type (bf16) where autocast is on, else ``x``.  Cast
    before the product, so that a float32 ``x`` that nothing else holds is freed before the
    product's output is allocated (the product keeps the cast copy for its backward pass
    either way)."""
    if (torch.is_autocast_enabled("cpu") and x.device.type == "cpu"
            and x.dtype == torch.float32):
        return x.to(torch.get_autocast_dtype("cpu"))
    return x
