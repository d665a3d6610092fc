"""What layers aggregate through: the SpMM and self-loop functions, and the :class:`Neighbourhood`.

:class:`SpMM` is the one autograd function that calls an aggregation backend's
(:mod:`distgnn.nn.backends`) ``spmm`` forward and ``spmm_backward`` backward; a layer holds
a :class:`Neighbourhood`.  A distributed run wraps the same ``Neighbourhood`` around a
partition and adds the split-vertex exchange (:mod:`distgnn.exchange`) to every sum; a
whole graph (or a partition under 0c) combines through :class:`NoExchange`, which does
nothing.
"""
from __future__ import annotations

import copy

import numpy as np
import torch

from ..data.graph import CSRGraph, GraphError, check_count
from ..errors import DistGNNError
from ..kernels.jit import readonly
from ..kernels.spmm import add_rows_scaled, scale_rows
from ..timing import PhaseTimer
from . import buffers
from .backends import KernelBackend, check_tensor
from .dropout import rows


class SpMM(torch.autograd.Function):
    """Differentiable ``y = reduce_{u in N(v)} w_uv x_u`` through a kernel backend."""

    @staticmethod
    def forward(ctx, x, graph, backend, reduce, timer):
        if x.dtype == torch.bfloat16 and backend.name != "numba":
            x = x.float()  # a product's output under autocast; only Numba gathers bf16 rows
        with timer("aggregation_forward"):
            y, arg = backend.spmm(graph, x.contiguous(), reduce)
        ctx.graph, ctx.backend, ctx.reduce, ctx.timer = graph, backend, reduce, timer
        ctx.has_arg = arg is not None  # not arg.numel(): a [0, d] or [N, 0] arg is still one
        ctx.save_for_backward(arg if arg is not None else torch.empty(0))
        return y

    @staticmethod
    def backward(ctx, grad_y):
        (arg,) = ctx.saved_tensors
        with ctx.timer("aggregation_backward"):
            grad_x = ctx.backend.spmm_backward(ctx.graph, grad_y.contiguous(), ctx.reduce,
                                               arg if ctx.has_arg else None)
        return grad_x, None, None, None, None


class Propagate(torch.autograd.Function):
    """Differentiable ``o = r * ((A + I) (q * x))`` in one kernel pass each way.

    The backward pass is the same kernel on ``A^T`` with the scales swapped:
    ``grad_x = q * ((A^T + I) (r * grad_o))`` (``A`` itself on a symmetric graph).
    """

    @staticmethod
    def forward(ctx, x, graph, backend, q, r, timer):
        with timer("aggregation_forward"):
            y = backend.propagate(graph, x.detach(), q, r)
        ctx.graph, ctx.backend, ctx.scales, ctx.timer = graph, backend, (q, r), timer
        return y

    @staticmethod
    def backward(ctx, grad):
        q, r = ctx.scales
        with ctx.timer("aggregation_backward"):
            grad_x = ctx.backend.propagate(ctx.graph, grad.contiguous(), r, q, transposed=True)
        return grad_x, None, None, None, None, None


class SelfLoopNorm(torch.autograd.Function):
    """``y <- (y + z) / c`` or ``(y + z) * c`` (``divide``) in place, in one Numba pass each
    way (``z`` float as ``y``, or bf16 rows beside a float32 ``y``)."""

    @staticmethod
    def forward(ctx, y, z, c, divide):
        sums = y.detach().numpy()
        scale = c.detach().contiguous().view(-1).numpy()
        add_rows_scaled(sums, readonly(rows(z.detach().contiguous())), readonly(scale),
                        divide, sums)
        ctx.c, ctx.divide, ctx.z_dtype = scale, divide, z.dtype
        ctx.mark_dirty(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().numpy()
        out = buffers.empty_like(grad)
        scale_rows(readonly(grad), readonly(ctx.c), ctx.divide, out)
        grad_yz = torch.from_numpy(out)
        return grad_yz, grad_yz.to(ctx.z_dtype), None, None


# the self-loop term in bf16 (a product's output under autocast) added to float32 sums
BF16_ROWS_BESIDE_FLOAT32 = (torch.bfloat16, torch.float32)
# what the fused loop sum (Propagate) computes in: the Numba kernels' types and bf16 rows
FUSED_DTYPES = (torch.float32, torch.float64, torch.bfloat16)


class NoExchange:
    """The exchange of a graph whose aggregates are complete where they are computed.

    That is a whole graph in one process, or partitions under 0c (each rank keeps its partial
    sums).  It has the members of :class:`distgnn.exchange.Exchange` that a neighbourhood and a
    run read, each doing nothing: ``exchange(y, key, epoch, training)``, :meth:`exact`
    and :meth:`extreme` return ``y``; nothing is sent (``total_bytes_sent`` and
    ``exact_bytes`` stay 0); no state is kept.  ``combines_clones`` is ``False``: layers may
    run unkeyed and torch's own dropout is allowed (no clone's mask has to agree with
    another's).
    """

    combines_clones = False
    fingerprint = "none"  # what checkpoints record of the exchange
    keeps_state = False
    total_bytes_sent = 0
    exact_bytes = 0

    def __call__(self, y: torch.Tensor, key: int | None, epoch: int, training: bool
                 ) -> torch.Tensor:
        return y

    def exact(self, y: torch.Tensor) -> torch.Tensor:
        return y

    def extreme(self, y: torch.Tensor, reduce: str, empty: torch.Tensor) -> torch.Tensor:
        return y

    def exact_epoch(self, epoch: int) -> None:
        """No controller decides epochs here."""
        return None

    def drift(self) -> dict:
        """Nothing is kept stale here: no drift to measure."""
        return {}

    def observe(self, epoch: int, loss: float, drift: dict | None = None) -> None:
        """Nothing is stale here: nothing decides by the loss, nothing to warn of."""
        return None

    def describe(self, schedule: str) -> str:
        return schedule

    def finish(self) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def restart(self, epoch: int, history: list[dict]) -> None:
        """Nothing is kept between epochs: nothing to start again."""

    def decide(self, history: list[dict]) -> None:
        """No exchange to choose (``--algo auto`` on one process or under 0c)."""
        return None

    def load_state_dict(self, state: dict, device: torch.device | str = "cpu") -> None:
        """Take the empty state :meth:`state_dict` gives; another exchange's is refused."""
        if state:
            raise DistGNNError("the checkpoint holds a split-vertex exchange's state; this "
                               "run exchanges nothing")


class Neighbourhood:
    """The graph a model is called with (``model(g, x)``, ``conv(g, h)``).

    It holds reductions over in-neighbours, in-degrees, and the epoch the layers run in.

    Args:
        graph (CSRGraph): adjacency, rows = destinations.
        backend (KernelBackend): the kernels that do the work.
        in_degree (np.ndarray, optional): ``[N]`` degrees used for normalisation; defaults to
            the graph's own in-degrees (a partition passes the global ones).
        timer (PhaseTimer, optional): receives ``aggregation_forward``/``_backward`` seconds.
        global_ids (np.ndarray, optional): int64 ``[N]`` global id of each vertex (a
            partition's local -> global map); defaults to ``0..N-1``.
        exchange (optional): on a partition, the split-vertex exchange
            (:mod:`distgnn.exchange`) applied to every sum: ``exchange(y, key, epoch,
            training) -> y``; defaults to :class:`NoExchange`.
        dtype (torch.dtype, optional): floating type of ``degree`` (the features' type).
        seed (int, optional): the run's seed, which keys dropout masks with the epoch.

    ``epoch`` and ``training`` are what the trainer sets once per epoch
    (:meth:`set_epoch`); layers and :class:`~distgnn.nn.keyed_dropout.KeyedDropout` read them.

    Shapes: ``h`` is ``[N, d]``; every reduction returns ``[N, d]``; ``degree`` is ``[N, 1]``.
    Inputs of another shape (another graph's rows), and per-vertex arrays of another length,
    are refused with :class:`~distgnn.data.graph.GraphError` before any kernel reads them.
    """

    def __init__(self, graph: CSRGraph, backend: KernelBackend, in_degree=None,
                 timer: PhaseTimer | None = None, device="cpu", global_ids=None,
                 exchange=None, dtype: torch.dtype = torch.float32, seed: int = 0):
        self.graph = graph
        self.exchange = exchange if exchange is not None else NoExchange()
        self.seed = seed
        self.epoch, self.training = 0, False
        self.key = None  # the exchange key of a layer's view (see enter)
        self.global_ids = (np.arange(graph.num_nodes, dtype=np.int64) if global_ids is None
                           else np.asarray(global_ids, dtype=np.int64))
        self.backend = backend
        self.timer = timer if timer is not None else PhaseTimer()
        deg = graph.in_degrees() if in_degree is None else np.asarray(in_degree)
        for name, a in (("in_degree", deg), ("global_ids", self.global_ids)):
            if a.shape != (graph.num_nodes,):
                raise GraphError(f"{name} has shape {list(a.shape)}, expected "
                                 f"[{graph.num_nodes}] (one per vertex of the graph)")
        self.degree = torch.from_numpy(deg.astype(np.float64)).to(device, dtype).unsqueeze(1)
        # (kind, key) -> (epoch, module) of its training use in this pass; shared by views
        self.users: dict[tuple[str, int], tuple[int, object]] = {}

    def set_epoch(self, epoch: int, training: bool = True) -> None:
        """Set the epoch and mode of every layer and dropout in the next forward pass.

        Epoch ``epoch`` (an integer >= 0: it keys the dropout masks and cd-r's schedule),
        training or not (evaluation exchanges exactly and drops nothing).  Starts a new
        forward pass: the keys used so far (see :meth:`claim`) are free again.
        """
        self.epoch, self.training = check_count(epoch, "epoch"), bool(training)
        self.users.clear()

    def claim(self, kind: str, module, key: int | None) -> int:
        """The key ``module`` runs under now, in O(1).

        ``module`` is a layer (``kind="layer"``) or a dropout; its key is the explicit ``key``,
        else the one its model gave it (:func:`distgnn.nn.prepare.assign_keys`).

        While training, a key is one module's per pass (:meth:`set_epoch` starts one): two
        modules on one key, or one module called twice in a pass (a layer reused with
        shared weights), would share an exchange's state (cd-r's delayed partials, a bf16 wire's
        error feedback) or a dropout mask, so that is refused; an explicit ``key`` gives the
        second call its own.  The same module again inside the backward pass (activation
        checkpointing runs it again there) is allowed.
        """
        if key is None:
            key = getattr(module, "key", None)
        else:
            key = check_count(key, "key")
        name = type(module).__name__
        if key is None:
            raise GraphError(f"{name} has no key: train it inside a model given to "
                             "distgnn.train or run.place (which number every layer and "
                             f"dropout), or pass key= when calling it")
        if self.training:
            epoch, user = self.users.get((kind, key), (None, None))
            if epoch == self.epoch and torch._C._current_graph_task_id() == -1:
                what = (f"{name} ran twice in epoch {self.epoch} under key {key}"
                        if user is module else f"{type(user).__name__} and {name} both "
                        f"use key {key} in epoch {self.epoch}")
                raise GraphError(f"{what}: each call site needs its own key (a module "
                                 "called at two places: pass key= at the second)")
            self.users[(kind, key)] = (self.epoch, module)
        return key

    @property
    def num_nodes(self) -> int:
        """``N``: the rows of every ``h`` this neighbourhood takes."""
        return self.graph.num_nodes

    def enter(self, layer, weight: torch.Tensor, key: int | None = None,
              **inputs: torch.Tensor | None) -> "Neighbourhood":
        """The view a layer aggregates through, carrying the layer's exchange key.

        Every layer of :mod:`distgnn.nn` calls it first, with its input weight ``[d_out, d_in]``:
        each of ``inputs`` (``None``: absent) must be ``[N, d_in]`` of the weight's dtype (or,
        under CPU autocast, of the autocast dtype: a product's output).  The key is
        :meth:`claim`'s (on a whole graph, where nothing is exchanged, an unkeyed layer runs
        under key 0).
        """
        dtypes = (weight.dtype,)
        if torch.is_autocast_enabled("cpu"):
            dtypes += (torch.get_autocast_dtype("cpu"),)
        for name, h in inputs.items():
            if h is not None:
                check_tensor(f"{type(layer).__name__} input {name}", h,
                             (self.num_nodes, weight.shape[1]), dtypes)
        view = copy.copy(self)
        if (not self.exchange.combines_clones and key is None
                and getattr(layer, "key", None) is None):
            view.key = 0
        else:
            view.key = self.claim("layer", layer, key)
        return view

    def reduce(self, h: torch.Tensor, reduce: str) -> torch.Tensor:
        """``reduce`` over in-neighbours (``sum``, ``max`` or ``min``; ``mean`` uses ``degree``)."""
        if reduce == "mean":
            return self.reduce(h, "sum") / self.degree.clamp(min=1)
        return self.combine(SpMM.apply(h, self.graph, self.backend, reduce, self.timer), reduce)

    def self_loop(self, y: torch.Tensor, z: torch.Tensor, c: torch.Tensor, divide: bool
                  ) -> torch.Tensor:
        r"""An aggregate ``y`` with the self-loop's term ``z`` added and each row normalised.

        .. math::
            \mathbf{o}_v = (\mathbf{y}_v + \mathbf{z}_v) / c_v \;\;(\texttt{divide})
            \quad\text{or}\quad (\mathbf{y}_v + \mathbf{z}_v)\, c_v

        ``y`` is a sum that nothing else reads (a :meth:`reduce`'s output): on the CPU
        (float32 or float64 ``y``; ``z`` of its type, or bf16 rows beside float32 sums
        under ``--precision bf16-mixed``) the output is written over it in one pass forward
        and one backward (:func:`~distgnn.kernels.spmm.add_rows_scaled`), the values of
        ``torch.add`` followed by ``div_``/``mul_`` bit for bit; elsewhere those operations.

        Shapes: ``y``, ``z`` ``[N, d]``, ``c`` ``[N, 1]`` (as ``degree``); returns ``[N, d]``.
        """
        if (y.device.type == "cpu" and y.dtype in (torch.float32, torch.float64)
                and y.is_contiguous() and z.device.type == "cpu" and c.device.type == "cpu"
                and c.dtype == y.dtype
                and (z.dtype == y.dtype or (z.dtype, y.dtype) == BF16_ROWS_BESIDE_FLOAT32)):
            check_tensor("z", z, tuple(y.shape))
            check_tensor("c", c, (y.shape[0], 1))
            return SelfLoopNorm.apply(y, z, c, divide)
        out = torch.add(y, z)  # in place on the new sum: a pass and a tensor fewer
        return out.div_(c) if divide else out.mul_(c)

    def loop_sum(self, z: torch.Tensor, source_scale: torch.Tensor | None = None,
                 row_scale: torch.Tensor | None = None) -> torch.Tensor:
        r"""The sum over each vertex's in-neighbours and itself, scaled on both sides.

        .. math::
            \mathbf{o}_v = r_v \Big( q_v \mathbf{z}_v + \sum_{u \in N(v)} q_u
                \mathbf{z}_u \Big)

        with the sum over every clone's in-edges (:meth:`combine`); ``q`` =
        ``source_scale``, ``r`` = ``row_scale`` (``[N, 1]`` as ``degree``, or ``None``: 1):
        GraphSAGE-gcn's ``r = 1 / (d + 1)``, GCN's ``q = r = (d + 1)^{-1/2}``.  Where
        nothing combines clones (a whole graph, 0c) and the backend has the fused kernel
        (:meth:`~distgnn.nn.backends.NumbaBackend.propagate`), one pass over the edges
        each way (:class:`Propagate`), in ``z``'s dtype (bf16 rows stay bf16); elsewhere the
        scaling, the sum and :meth:`self_loop` in turn.

        Shapes: ``z`` ``[N, d]``; returns ``[N, d]``.
        """
        if (not self.exchange.combines_clones and hasattr(self.backend, "propagate")
                and z.device.type == "cpu" and z.dtype in FUSED_DTYPES):
            check_tensor("z", z, (self.num_nodes, None))
            return Propagate.apply(z, self.graph, self.backend, source_scale, row_scale,
                                   self.timer)
        zq = z if source_scale is None else source_scale * z
        y = self.reduce(zq, "sum")
        if row_scale is None:
            return y + zq
        return self.self_loop(y, zq, row_scale, divide=False)

    def combine(self, y: torch.Tensor, reduce: str = "sum", exact: bool = False,
                empty_rows: bool = True) -> torch.Tensor:
        """Partial per-vertex results ``y`` ``[N, d]`` combined over each vertex's clones.

        ``y`` holds results over this rank's in-edges, which are combined over every clone of
        each vertex: summed (through cd-0 or cd-r as configured; always cd-0 when ``exact``) or,
        for ``max``/``min``, the extreme (cd-0; with ``empty_rows``, rows without local in-edges
        take no part, and rows without any stay 0).  The identity on a whole graph or under 0c
        (:class:`NoExchange`).
        """
        check_tensor("y", y, (self.num_nodes, None))
        if reduce != "sum":
            key = ("local_empty", empty_rows)
            if key not in self.graph.cache:
                empty = self.graph.in_degrees() == 0
                self.graph.cache[key] = torch.from_numpy(empty & empty_rows)
            return self.exchange.extreme(y, reduce, self.graph.cache[key].to(y.device))
        if exact:
            return self.exchange.exact(y)
        if self.key is None and self.training:
            raise GraphError("a training aggregation on a partition outside a layer: the "
                             "exchange keeps its state per layer, so aggregate through the "
                             "view a layer's g.enter(...) returns (see "
                             "distgnn.nn.graph_layer.GraphLayer)")
        return self.exchange(y, self.key, self.epoch, self.training)

    def edge_index(self) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 ``(src, dst)`` ``[E]`` local ids of every in-edge, in CSR order."""
        key = ("edge_index", str(self.degree.device))
        if key not in self.graph.cache:
            src, dst = self.graph.edges()
            device = self.degree.device
            self.graph.cache[key] = tuple(torch.from_numpy(a.astype(np.int64)).to(device)
                                          for a in (src, dst))
        return self.graph.cache[key]

    def loop_edges(self) -> torch.Tensor | None:
        """bool ``[E]``: which stored edges are self-loops ``v -> v`` (``None`` when none is)."""
        key = ("loop_edges", str(self.degree.device))
        if key not in self.graph.cache:
            src, dst = self.edge_index()
            loops = src == dst
            self.graph.cache[key] = loops if bool(loops.any()) else None
        return self.graph.cache[key]

    def placed(self, name: str, arrays, device):
        """``arrays`` (numpy) as they are on the CPU, where the Numba kernels read them, or as
        int64 tensors on ``device``, copied there once and kept in the graph's cache."""
        if device is None or torch.device(device).type == "cpu":
            return arrays
        key = (name, str(device))
        if key not in self.graph.cache:
            self.graph.cache[key] = tuple(torch.from_numpy(a).to(device) for a in arrays)
        return self.graph.cache[key]

    def vertex_ids(self, device=None):
        """int64 ``[N]``: the global ids that key vertex dropout (:meth:`placed` on
        ``device``)."""
        return self.placed("global_ids", (self.global_ids,), device)[0]

    def edge_keys(self, device=None):
        """int64 ``[E]`` and ``[N]``: a key per edge (in CSR order) and per self-loop.

        The keys come from the global ids of both ends, ``(g_u << 32) | g_v``, so a partition
        keys each edge as the whole graph does (edge dropout draws the same masks); :meth:`placed`
        on ``device``.
        """
        if "edge_keys" not in self.graph.cache:
            src, dst = self.graph.edges()
            g = self.global_ids
            self.graph.cache["edge_keys"] = ((g[src] << 32) | g[dst], (g << 32) | g)
        return self.placed("edge_keys", self.graph.cache["edge_keys"], device)

    def attend(self, loop: torch.Tensor, s: torch.Tensor, t: torch.Tensor, z: torch.Tensor,
               slope: float, p: float, key: int) -> tuple[torch.Tensor, torch.Tensor]:
        """GAT's softmax over in-edges and aggregation through the backend.

        Runs :meth:`~distgnn.nn.backends.KernelBackend.attend`: for loop logits ``loop``, source
        and destination scores ``s``, ``t`` ``[N, H]`` and ``z`` ``[N, H, C]``, returns
        ``sum_{e=(u,v)} alpha_e k_e z_u`` over all clones (:meth:`combine`; ``k``: dropout
        ``p`` keyed by ``key`` and the edge keys) and the undropped loop coefficients ``[N, H]``.
        """
        y, loop_alpha = self.backend.attend(self, loop, s, t, z, slope, p, key)
        return self.combine(y).view_as(z), loop_alpha
