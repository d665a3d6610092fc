"""A model made ready to train on a graph: its layers and dropouts keyed, what a partition
cannot train refused (torch's own dropout and random draws, buffers that differ between
ranks), activations optionally stored in bf16."""
from __future__ import annotations

import sys
import threading

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from ..errors import DistGNNError
from .aggregate import Neighbourhood
from .gat_conv import GATConv
from .graph_layer import GraphLayer
from .keyed_dropout import KeyedDropout
from .saved_activations import store_in_bf16


def assign_keys(model: nn.Module) -> None:
    """Number ``model``'s graph layers and :class:`KeyedDropout` modules (their keys).

    They are numbered by their positions in ``model.modules()`` (layers and dropouts counted
    apart, each from 0): the keys their exchange state and dropout masks are kept under, the
    same on every rank.  Idempotent; a module that appears twice in the model gets one key.
    """
    for kind in (GraphLayer, KeyedDropout):
        for key, module in enumerate(m for m in model.modules() if isinstance(m, kind)):
            module.key = key


TORCH_DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
                  nn.FeatureAlphaDropout)


DROPOUT_FUNCTIONS = {F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout,
                     F.feature_alpha_dropout, torch.dropout, torch.alpha_dropout,
                     torch.feature_dropout, torch.feature_alpha_dropout}


TORCH_DROPOUT_PROBLEM = ("its masks differ between a vertex's clones on different ranks, so a "
                         "partitioned run would train another model: use "
                         "distgnn.nn.KeyedDropout")


class _FunctionalDropoutCheck(TorchFunctionMode):
    """Refuses a torch dropout function that drops something (``training`` true, ``p > 0``)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in DROPOUT_FUNCTIONS:
            p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
            on = args[2] if len(args) > 2 else kwargs.get("training", kwargs.get("train", True))
            if on and p:
                raise DistGNNError(f"the model calls torch's {func.__name__}: "
                                   f"{TORCH_DROPOUT_PROBLEM}")
        return func(*args, **kwargs)


RANDOM_DRAWS_PROBLEM = ("the model draws from torch's random number generator in its "
                        "training forward pass (torch.rand, torch.randn_like, torch.bernoulli, "
                        "PyG's dropout_edge, ...): the draws differ between a vertex's clones "
                        "on different ranks, so a partitioned run would train another model")


def prepare(model: nn.Module, g: Neighbourhood, bf16_activations: bool = False) -> None:
    """Make ``model`` ready to train on ``g``.

    It runs :func:`assign_keys`; refuses a model with nothing to train
    (:func:`check_trainable`); says, in one line, when the graph's edge weights reach no
    layer (:func:`unused_weights`); with ``bf16_activations``, stores what its training
    passes keep for the backward pass in bf16 (:mod:`distgnn.nn.saved_activations`).
    On a partition it refuses, with one line naming
    what to use instead, what would make the ranks' replicas differ: torch's own dropout, as
    a module at once and as a function (``F.dropout``) in the first training forward pass
    (unless the model keys torch's dropout itself, ``keys_torch_dropout``:
    :class:`distgnn.pyg.PyGModel`), and, at the end of that pass
    (:class:`_FirstTrainingPass`), draws from torch's generator and buffers that differ
    between ranks.
    """
    assign_keys(model)
    check_trainable(model)
    note = unused_weights(model, g)
    comm = getattr(g.exchange, "comm", None)
    if note and getattr(comm, "rank", 0) == 0:
        print(f"warning: {note}", file=sys.stderr, flush=True)
    if bf16_activations:
        store_in_bf16(model, lambda: g.training)
    if not g.exchange.combines_clones:
        return
    keyed = getattr(model, "keys_torch_dropout", False)
    if not keyed:
        for name, module in model.named_modules():
            if isinstance(module, TORCH_DROPOUTS) and module.p:
                raise DistGNNError(f"{name or 'the model'} is a torch.nn.{type(module).__name__}"
                                   f": {TORCH_DROPOUT_PROBLEM}")
    _FirstTrainingPass(model, g, comm, keyed)


def check_trainable(model: nn.Module) -> None:
    """Refuse, in one line, a model with no parameter to train (the optimizer and the
    gradient allreduce would have nothing to work on)."""
    if not any(p.requires_grad for p in model.parameters()):
        raise DistGNNError(f"the model ({type(model).__name__}) has no parameters that "
                           "require a gradient: there is nothing to train; give it at least "
                           "one layer with weights")


def unused_weights(model: nn.Module, g: Neighbourhood) -> str | None:
    """Why the graph's edge weights reach none of ``model``'s layers (``None``: they do).

    Known cases only: every graph layer is a :class:`GATConv` (attention has no edge-weight
    term), or a PyG model's ``forward`` takes no argument for them.

    A note rather than a refusal: training GAT on a weighted graph is a fair choice of
    model (its attention learns what the weights would say), but the user should know the
    weights are not read."""
    if g.graph.edge_weight is None:
        return None
    if getattr(model, "unused_weights", False):
        return (f"the graph has edge weights and {type(model.module).__name__}.forward takes "
                "no edge_weight argument, so they are not used (distgnn.pyg.distribute(model,"
                " edge_weight=NAME) passes them to the argument NAME)")
    layers = [m for m in model.modules() if isinstance(m, GraphLayer)]
    if layers and all(isinstance(m, GATConv) for m in layers):
        return ("the graph has edge weights, and GAT has no edge-weight term: they are not "
                "used (GCN, GraphSAGE, GIN and GCNII read them)")
    return None


class _FirstTrainingPass:
    """The checks of a model's first training forward pass on a partition.

    Inside the pass, torch's dropout functions are refused (unless the model keys them).
    At its end every rank says, in one allreduce, whether the pass drew from torch's
    generator (CPU, and the model's GPU), and the ranks compare the model's buffers
    (their number, sizes and values: a max of ``[v, -v]`` gives the maximum and minimum
    over ranks at once); a draw anywhere, or a buffer that differs (a statistic of a rank's
    own vertices, ``x.mean(0)`` kept with ``register_buffer``), is refused on every rank
    with the same line.  The hooks are removed after the first pass that completes.
    """

    def __init__(self, model: nn.Module, g: Neighbourhood, comm, keyed: bool):
        self.model, self.g, self.comm = model, g, comm
        self.dropouts = None if keyed else _FunctionalDropoutCheck()
        self.instead = "draw no random numbers in the forward pass; for dropout use " + (
            "F.dropout or torch.nn.Dropout (on vertex rows, or on a layer's edge rows in place "
            "of dropout_edge), which distgnn.pyg keys by global ids" if keyed else
            "distgnn.nn.KeyedDropout, whose masks are keyed by global vertex id")
        # the buffers by the names the user gave them (a PyG model's, not its wrapper's)
        self.named = getattr(model, "module", model) if keyed else model
        self.state = None
        self.hooks = [model.register_forward_pre_hook(self.enter),
                      model.register_forward_hook(self.leave, always_call=True)]

    def enter(self, module, inputs) -> None:
        if not self.g.training:
            return
        if self.dropouts is not None:
            self.dropouts.__enter__()
        self.state = _generator_states(self.model)

    def leave(self, module, inputs, output) -> None:
        if not self.g.training or self.state is None:
            return
        if self.dropouts is not None:
            self.dropouts.__exit__(None, None, None)
        drew = any(not torch.equal(a, b) for a, b in zip(self.state,
                                                         _generator_states(self.model)))
        self.state = None
        if output is None:  # the pass raised (always_call): the next pass checks again
            return
        for hook in self.hooks:
            hook.remove()
        buffers = list(self.named.named_buffers())
        head = torch.tensor([float(drew), len(buffers), -len(buffers)], dtype=torch.float64)
        self.agree(head)
        if head[0]:
            raise DistGNNError(f"{RANDOM_DRAWS_PROBLEM}: {self.instead}")
        if head[1] != -head[2]:
            raise DistGNNError("the model registers buffers in its forward pass, a different "
                               "number on each rank: keep per-rank values out of buffers")
        if not buffers:
            return
        n = len(buffers)
        sizes = torch.tensor([b.numel() for _, b in buffers], dtype=torch.float64)
        both = self.agree(torch.cat([sizes, -sizes]))
        bad = both[:n] != -both[n:]
        if not bad.any():
            flat = torch.cat([b.detach().double().flatten().cpu() for _, b in buffers])
            flat = flat.nan_to_num(nan=torch.inf)
            both = self.agree(torch.cat([flat, -flat]))
            differs = both[:len(flat)] != -both[len(flat):]
            bad = torch.stack([d.any() for d in torch.split(differs, sizes.long().tolist())])
        if bad.any():
            name = buffers[int(bad.nonzero()[0])][0]
            raise DistGNNError(f"the model's buffer {name} differs between ranks after the "
                               "first training pass (a statistic of each rank's own vertices?"
                               "): every replica would be another model, and rank 0's would "
                               "be saved; compute it over the whole graph before training (the "
                               "same on every rank), or normalise each vertex alone")

    def agree(self, t: torch.Tensor) -> torch.Tensor:
        """``t``, maximum over ranks (as it is without a communicator)."""
        if self.comm is not None and self.comm.size > 1:
            self.comm.allreduce(t, op="max")
        return t


# ranks run as threads of one process (in-process tests) read the generators one at a time:
# two threads in torch.get_rng_state at once were seen to deadlock, each waiting in it
_GENERATOR_READS = threading.Lock()


def _generator_states(model: nn.Module) -> list[torch.Tensor]:
    """The states of torch's default generators a forward pass of ``model`` can draw from:
    the CPU's, and the GPU's the model's first parameter lives on."""
    device = next(model.parameters()).device
    with _GENERATOR_READS:
        states = [torch.get_rng_state()]
        if device.type == "cuda":
            states.append(torch.cuda.get_rng_state(device))
    return states
