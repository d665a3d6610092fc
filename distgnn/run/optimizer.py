"""The optimizer of a run: torch's Adam, without the 1.2-1.4 s torch._dynamo import.

:class:`Adam` is :class:`torch.optim.Adam` (same update, state and ``state_dict``; the
step hooks and profiler ranges of :class:`torch.optim.Optimizer` are kept).  torch's
optimizers import ``torch._dynamo`` on their first constructor, ``step`` and
``zero_grad`` call, only to mark those methods as not to be traced by ``torch.compile``;
that import is 1.2-1.4 s of CPU time in every rank's start-up (about a quarter of a small
job's, Intel Xeon, torch 2.13, ``python -X importtime``).  A run never compiles its
optimizer, so :class:`Adam` calls the undecorated methods (``inspect.unwrap``), under
the grad mode torch's ``step`` sets (``differentiable``: off, by default).
"""
from __future__ import annotations

import inspect

import torch

__all__ = ["Adam"]

_STEP = inspect.unwrap(torch.optim.Adam.step)
_ADD_PARAM_GROUP = inspect.unwrap(torch.optim.Optimizer.add_param_group)
_ZERO_GRAD = inspect.unwrap(torch.optim.Optimizer.zero_grad)
_STATE_DICT = inspect.unwrap(torch.optim.Optimizer.state_dict)
_LOAD_STATE_DICT = inspect.unwrap(torch.optim.Optimizer.load_state_dict)


class Adam(torch.optim.Adam):
    """:class:`torch.optim.Adam` whose methods do not import ``torch._dynamo``."""

    def step(self, closure=None):
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return _STEP(self, closure)

    def add_param_group(self, param_group: dict) -> None:
        _ADD_PARAM_GROUP(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        _ZERO_GRAD(self, set_to_none)

    def state_dict(self) -> dict:
        return _STATE_DICT(self)

    def load_state_dict(self, state_dict: dict) -> None:
        _LOAD_STATE_DICT(self, state_dict)
