"""The split-vertex exchange: how the clones of a vertex cut combine their partial aggregates.

Under a vertex-cut, vertex ``v`` has clones on the ranks ``R(v)``; rank ``p`` computes a
*partial* aggregate over its own edges, ``a^p_v = sum_{u in N_p(v)} x_u``, and the full
aggregate is ``a_v = sum_{p in R(v)} a^p_v``.  One clone is the root, the others leaves
(:mod:`.index`: the tables).  The algorithms (``--algo``):

- **cd-0** (:mod:`.exact`): every layer, every clone gets ``a_v`` exactly; max/min
  aggregators take the extreme over clones the same way, with the gradient routed to the
  clone that attained it.
- **cd-r** (:mod:`.delayed`): by default (no ``--delay``, ``--smoothing`` or
  ``--comm-budget``) each epoch exact (every split row, on a 4-bit wire) or stale (the last
  exact epoch's remote partials reused, nothing sent) as the controller of
  :mod:`.controller` decides; with ``--delay r``, bins of
  split vertices refreshed every ``r`` epochs, partials delayed and overlapped with compute,
  optionally smoothed; or, under ``--comm-budget``, the adaptive schedule of
  :mod:`.adaptive`, which sends the rows that moved most.
- **0c**: no exchange (:class:`~distgnn.nn.aggregate.NoExchange`, as on a whole graph);
  each rank normalises by its local degrees.

Partials travel as they are, or as bf16 or block-scaled integers with error feedback
(:mod:`.wire`); evaluation and
the sums that must be exact in every epoch (:meth:`Exchange.exact`) use cd-0 in the run's
type.  Message order follows :mod:`partition.layout`'s split tables (:mod:`.channel`).

Every per-layer exchange implements :class:`LayerExchange`; :class:`Exchange` is what a
partition's neighbourhood calls, and keeps one per layer and pass.
"""
from __future__ import annotations

import functools
from typing import Protocol

import torch

from ..comm import Communicator
from ..errors import DistGNNError
from ..timing import PhaseTimer
from .adaptive import AdaptiveSum
from .auto import MEASURED, WARMUP, choice, wire_seconds
from .channel import expect_kind
from .config import ALGORITHMS, DEFAULT_SCHEDULE_PRECISION, TOPOLOGIES
from .controller import DRIFT_WINDOW, EXACT_EVERY, Controller, mark_narrow
from .delayed import DelayedSum
from .exact import ExactSum, Extreme, RoundTrip
from .index import SplitIndex
from .nodes import NodeSum, NodeTree
from .wire import PRECISIONS

__all__ = ["ALGORITHMS", "DEFAULT_SCHEDULE_PRECISION", "EXACT_EVERY", "PRECISIONS", "TOPOLOGIES",
           "Exchange", "LayerExchange", "SplitIndex"]


class LayerExchange(Protocol):
    """The exchange of one aggregation, with the state it keeps between epochs.

    One aggregation is one layer and one pass: forward on its partial aggregates, backward
    on their gradients.

    Implementations: :class:`~.exact.ExactSum` (``kind`` ``"exact"``),
    :class:`~.delayed.DelayedSum` (``"delayed"``), :class:`~.adaptive.AdaptiveSum`
    (``"adaptive"``).
    """

    kind: str  # the tag of its state dict
    bytes_sent: int  # by this rank, since it was made

    def __call__(self, a: torch.Tensor, epoch: int) -> None:
        """``a`` ``[n, d]`` (this rank's partials of epoch ``epoch``, or their gradients)
        becomes, in place, each clone's partial plus the remote terms this exchange gives it
        in that epoch (cd-0: all of them, exactly)."""

    def finish(self) -> None:
        """Complete every request in flight (before the communicator goes away)."""

    def state_dict(self) -> dict:
        """What the exchange carries between epochs, requests in flight completed:
        ``{"kind": kind, "width": d, "dtype": name, ...}`` of tensors and plain values, so a
        restored exchange continues exactly as this one would."""

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s ``state``; a state of another kind, or of another
        shape, is refused with one line (:class:`~distgnn.errors.DistGNNError`)."""


class Exchange:
    """The split-vertex exchange of one rank for every layer of a model.

    Keyword-only arguments; those of the run are :class:`~distgnn.run.config.TrainConfig`'s
    fields of the same name.

    Args:
        index (SplitIndex): this rank's split tables.
        comm (Communicator): the transport.
        timer (PhaseTimer, optional): receives ``exchange_pre`` (gathers, sends started),
            ``exchange_wait`` (blocked in the transport) and ``exchange_post`` seconds.
        algo (str): ``"cd-0"``, ``"cd-r"`` or ``"auto"`` (:mod:`.auto`: cd-0 until
            :meth:`decide` takes cd-r's default schedule or keeps cd-0; 0c exchanges nothing:
            :class:`~distgnn.nn.aggregate.NoExchange`).
        delay (int): ``r`` of cd-r (``TrainConfig.delay_epochs``: ``--delay`` or its
            default; 1 under a ``comm_budget``).
        smoothing (float): cd-r's PipeGCN smoothing ``gamma`` in ``[0, 1)`` (0: none).
        comm_budget (float, optional): cd-r with the adaptive schedule at this fraction of
            cd-0's bytes, instead of bins.
        controlled (bool): cd-r's default schedule (:mod:`.controller`; ``delay`` 1, no
            smoothing or budget).
        exchange_precision (str): one of ``PRECISIONS``: ``"fp32"`` (the run's own type), or
            a compressed wire with error feedback, for the training exchanges of cd-0 and
            cd-r.
        exact_precision (str): under ``"auto"``, the wire of its cd-0 epochs
            (``exchange_precision`` is its cd-r's).
        backward_exchange (bool): exchange gradients in the backward pass.  ``False``
            reproduces DGL's cd-0, whose split-vertex gradients miss the other clones' parts;
            it exists to show that difference, not for training.
        topology (str): one of ``TOPOLOGIES``: ``"node"`` makes the exact sums (cd-0's
            training exchanges in the run's type, and every algorithm's evaluation and
            :meth:`exact` sums) in two levels, within each node first (:mod:`.nodes`);
            ``"flat"`` sends every clone's row to its root; ``"auto"``: ``"node"`` when the
            job spans several nodes and some node holds several ranks (collective: asks the
            communicator which ranks share a node).  cd-r's schedules and max/min are flat.

    Called as ``exchange(y, key, epoch, training)`` on the partial aggregates ``y`` ``[n, d]``
    of the layer under ``key`` (an integer: the exchange keeps state per key and pass);
    returns ``y`` updated in place (and differentiable).  Training takes the layer's
    :class:`LayerExchange` of kind :attr:`kind`; evaluation is exact.
    """

    def __init__(self, *, index: SplitIndex, comm: Communicator, timer: PhaseTimer | None = None,
                 algo: str = "cd-0", delay: int = 0, smoothing: float = 0.0,
                 comm_budget: float | None = None, controlled: bool = False,
                 exchange_precision: str = "fp32", backward_exchange: bool = True,
                 topology: str = "flat", exact_precision: str = "fp32"):
        self.index, self.comm, self.algo, self.delay = index, comm, algo, delay
        # what checkpoints record of the exchange (a resumed run must match it)
        self.fingerprint = algo + (f" delay {delay}" if algo == "cd-r" else "")
        self.backward_exchange = backward_exchange
        self.keeps_state = algo in ("cd-r", "auto")  # between epochs: what checkpoints carry
        # a training epoch that runs cd-0's exact sums whatever the algorithm (-1: none)
        self.exact_at = -1
        self.controller: Controller | None = None
        # what cd-0 in the run's type would have sent for the training exchanges made so far:
        # what the bytes sent are compared to
        self.exact_bytes = 0
        self.timer = timer if timer is not None else PhaseTimer()
        self.trip = RoundTrip(index, comm, self.timer)
        if topology not in TOPOLOGIES:
            raise ValueError(f"no exchange topology {topology!r}")
        # one rank has nothing to exchange (``__call__`` returns its input): no tables
        nodes = comm.node_ids() if topology != "flat" and comm.size > 1 else []
        spans = 1 < len(set(nodes)) < len(nodes)
        self.topology = "node" if nodes and (topology == "node" or spans) else "flat"
        self.tree = NodeTree(index, comm, nodes, self.timer) if self.topology == "node" \
            else None
        # what makes a training layer's exchange, given the width, type and device of its
        # first tensor (so one per layer key and pass, made on first use)
        # the wire of cd-0's epochs (under auto also those it goes back to: :meth:`observe`)
        self.exact_precision = exact_precision if algo == "auto" else exchange_precision
        exact_make = self.exact_make(self.exact_precision)
        if algo == "cd-0":
            self.make = exact_make
        elif algo == "cd-r" and comm_budget is not None:
            self.make = functools.partial(AdaptiveSum, index=index, comm=comm, timer=self.timer,
                                          comm_budget=comm_budget,
                                          exchange_precision=exchange_precision)
        elif algo in ("cd-r", "auto"):
            self.controller = Controller() if controlled or algo == "auto" else None
            self.make = functools.partial(DelayedSum, index=index, comm=comm, timer=self.timer,
                                          delay=delay, smoothing=smoothing,
                                          exchange_precision=exchange_precision,
                                          controller=self.controller)
        else:
            raise ValueError(f"no exchange for algo {algo!r}")
        # --algo auto: cd-0 until :meth:`decide` chooses (then the one chosen)
        self.delayed_make, self.chosen, self.choice_made = self.make, None, None
        if algo == "auto":
            self.make = exact_make
        self.layers: dict[tuple[int, str], LayerExchange] = {}
        # per width, type and device; no state
        self.exact_sums: dict[tuple, ExactSum | NodeSum] = {}
        self.extremes = Extreme(self.trip)

    combines_clones = True  # see distgnn.nn.aggregate.NoExchange

    @property
    def kind(self) -> str:
        """The kind of the training layers' exchanges (the tag of their state)."""
        return self.make.func.kind

    def exact_make(self, exchange_precision: str):
        """What makes cd-0's training exchange of a layer: within each node first where the
        topology is ``node`` and the wire fp32, else flat."""
        if self.tree is not None and exchange_precision == "fp32":
            return functools.partial(NodeSum, tree=self.tree)
        return functools.partial(ExactSum, trip=self.trip, exchange_precision=exchange_precision)

    def decide(self, history: list[dict]) -> str | None:
        """Under ``--algo auto``, choose once the measured epochs are in ``history``.

        ``history``: the run's epoch records.  Takes :func:`.auto.choice`'s algorithm from its
        epoch on and returns its line (once; ``None`` before, after, and under any other
        algorithm).  A resumed run calls
        this with its checkpoint's history, which holds the choice made (the record of the
        epoch that made it: ``exchange_choice``), so it continues with that one."""
        if self.algo != "auto" or self.chosen is not None:
            return None
        made = next((r for r in history if "exchange_choice" in r), None)
        if made is not None:
            found = (made["exchange_choice"]["algo"], made["epoch"], made["exchange_choice"])
        elif len(history) < WARMUP + MEASURED:
            return None
        else:
            found = choice(history, *self.wire_cost())
        self.chosen, epoch, self.choice_made = found
        if self.chosen == "cd-r":
            self.make, self.layers = self.delayed_make, {}
            self.controller.restart(epoch, self.controller.losses)
            if any(r.get("exchange_warning", {}).get("fallback") for r in history):
                self.make = self.exact_make(self.exact_precision)  # it went back to cd-0
        return self.choice_made["reason"]

    def wire_cost(self) -> tuple[float, float]:
        """:func:`.auto.wire_seconds` of cd-r's wire on this rank's rows, for the training
        exchanges made so far; the seconds of the slowest rank (collective)."""
        precision = self.delayed_make.keywords["exchange_precision"]
        layers = [(e.width, e.dtype) for e in self.layers.values()]
        seconds, ratio = wire_seconds(precision, layers,
                                      len(self.index.leaf_ids) + len(self.index.root_ids))
        every = torch.zeros(self.comm.size, dtype=torch.float64)
        every[self.comm.rank] = seconds
        self.comm.allreduce(every)
        return float(every.max()), ratio

    def describe(self, schedule: str) -> str:
        """``schedule`` (the run's words for the algorithm) with the topology, when the exact
        sums are made within each node first."""
        if self.chosen is not None:
            schedule = f"{schedule}: chose {self.chosen}"
        if self.tree is None:
            return schedule
        nodes = max(self.tree.nodes) + 1
        return f"{schedule}, exact sums within each node first ({nodes} node" + \
            ("s)" if nodes > 1 else ")")

    def __call__(self, y: torch.Tensor, key: int, epoch: int, training: bool) -> torch.Tensor:
        if self.comm.size == 1:
            return y
        exact = not training or epoch == self.exact_at
        return _SumOverClones.apply(y, self, None if exact else key, epoch,
                                    self.backward_exchange)

    def restart(self, epoch: int, history: list[dict]) -> None:
        """Continue training at ``epoch`` with nothing kept from earlier epochs.

        For a checkpoint resumed on another layout, whose state is not for these
        partitions: that epoch is exact, and cd-r's kept remote terms start from it (the
        default schedule's, refreshed by it) or from zero as at a run's start (bins, the
        adaptive schedule).  ``history``: the run's epoch records so far (their losses are
        what the default schedule decides by; one holding ``exchange_warning`` made every
        later epoch exact, and they stay so)."""
        if self.controller is not None:
            self.controller.restart(epoch, [r["loss"] for r in history])
            if any("exchange_warning" in r for r in history):
                self.controller.exact_from = epoch
        elif self.keeps_state:
            self.exact_at = epoch

    def exact(self, y: torch.Tensor) -> torch.Tensor:
        """cd-0's sum over clones, forward and backward, whatever the algorithm (what must
        be exact in every epoch, as attention's softmax normaliser)."""
        if self.comm.size == 1:
            return y
        return _SumOverClones.apply(y, self, None, 0, True)

    def extreme(self, y: torch.Tensor, reduce: str, empty: torch.Tensor) -> torch.Tensor:
        """The element-wise ``max`` (or ``min``) over clones (:class:`~.exact.Extreme`)."""
        if self.comm.size == 1:
            return y
        return self.extremes.apply(y, reduce, empty)

    def layer(self, key: int | None, direction: str, like: torch.Tensor) -> LayerExchange:
        """The exchange of layer ``key``'s ``direction`` pass for tensors ``like``, made on
        first use (``key`` ``None``: the exact fp32 sum, which keeps no state)."""
        if key is None:
            shape = (like.shape[1], like.dtype, like.device)
            if shape not in self.exact_sums:
                self.exact_sums[shape] = (
                    NodeSum(tree=self.tree, width=like.shape[1], dtype=like.dtype,
                            device=like.device) if self.tree is not None
                    else ExactSum(trip=self.trip, exchange_precision="fp32",
                                  width=like.shape[1], dtype=like.dtype, device=like.device))
            return self.exact_sums[shape]
        if (key, direction) not in self.layers:
            self.layers[(key, direction)] = self.make(width=like.shape[1], dtype=like.dtype,
                                                      device=like.device)
            if self.make is self.delayed_make and self.controller is not None:
                mark_narrow(list(self.layers.values()))
        return self.layers[(key, direction)]

    def count_exact_bytes(self, y: torch.Tensor) -> None:
        """Add to :attr:`exact_bytes` what cd-0 in the run's type sends for a training
        exchange of ``y`` ``[n, d]``: a row per leaf and per leaf entry."""
        rows = len(self.index.leaf_ids) + len(self.index.root_ids)
        self.exact_bytes += rows * y.shape[1] * y.element_size()

    @property
    def total_bytes_sent(self) -> int:
        """Bytes this rank has sent, every exchange together."""
        return sum(e.bytes_sent for e in (*self.layers.values(), *self.exact_sums.values(),
                                          self.extremes))

    def finish(self) -> None:
        """Complete the requests still in flight."""
        for e in self.layers.values():
            e.finish()

    def drift(self) -> dict[str, dict[str, tuple[float, float]]]:
        """The layers' :attr:`DelayedSum.drift` of this epoch: ``{"stale_drift": forward,
        "stale_drift_grad": backward}``, each ``{layer key (a string): (moved, total)}``;
        each measurement is taken once, and ``{}`` comes of epochs with none."""
        out: dict[str, dict[str, tuple[float, float]]] = {}
        for (key, direction), layer in self.layers.items():
            if getattr(layer, "drift", None) is not None:
                field = "stale_drift" if direction == "forward" else "stale_drift_grad"
                out.setdefault(field, {})[str(key)] = tuple(float(v) for v in layer.drift)
                layer.drift = None
        return out

    def observe(self, epoch: int, loss: float, drift: dict[str, float] | None = None
                ) -> dict | None:
        """Take an epoch's training loss and forward drift: what the controller decides by.

        ``loss``: epoch ``epoch``'s global training loss; ``drift``: on an exact epoch of the
        default schedule that measured it, the epoch record's ``stale_drift`` (per layer).
        Returns, once, the finding that the stale epochs were costing accuracy (the
        controller's drift limit, :mod:`.controller`): ``{"epoch", "drift", "fallback",
        "reason"}``, ``reason`` the one line that says so.  From the next epoch on every
        epoch is exact; under ``--algo auto`` cd-0 takes over (``fallback``)."""
        if self.controller is None:
            return None
        if not self.controller.observe(epoch, loss, max(drift.values()) if drift else None):
            return None
        fallback = self.algo == "auto"
        if fallback:
            self.make, self.layers = self.exact_make(self.exact_precision), {}
        median = self.controller.median_drift
        return {"epoch": epoch + 1, "drift": median, "fallback": fallback, "reason": (
            f"cd-r: over the last {DRIFT_WINDOW} exact epochs the stale remote terms moved "
            f"{median:.2f}x as far as the sums they add to (median), so stale epochs were "
            f"costing accuracy; from epoch {epoch + 2} on "
            + ("--algo auto goes back to cd-0" if fallback else
               "every epoch is exact (--algo cd-0 trains exactly from the start)"))}

    def exact_epoch(self, epoch: int) -> bool | None:
        """Whether the controller ran epoch ``epoch`` exact (``None``: no controller decides
        the epochs, as under ``--algo auto`` before it chose cd-r)."""
        if self.controller is None or self.make is not self.delayed_make:
            return None
        return self.controller.exact(epoch)

    def state_dict(self) -> dict:
        """``{"kind": kind, "layers": {"key/direction": that LayerExchange's state}}``, and
        ``"controller"``: its state, under cd-r's default schedule."""
        state = {"kind": self.kind,
                 "layers": {f"{key}/{direction}": e.state_dict()
                            for (key, direction), e in self.layers.items()}}
        if self.controller is not None:
            state["controller"] = self.controller.state_dict()
        return state

    def load_state_dict(self, state: dict, device: torch.device | str = "cpu") -> None:
        """Restore :meth:`state_dict`'s ``state`` onto ``device``; a state of another kind
        (another algorithm or schedule) is refused with one line."""
        expect_kind(state, self.kind, "split-vertex exchange")
        saved_default = "controller" in state
        if saved_default != (self.controller is not None):
            def schedule(default: bool) -> str:
                return "the default schedule" if default else "not the default schedule"
            raise DistGNNError(f"the checkpoint's cd-r exchange ran {schedule(saved_default)} "
                               f"(no --delay, --smoothing or --comm-budget); this run's is "
                               f"{schedule(not saved_default)}")
        if self.controller is not None:
            self.controller.load_state_dict(state["controller"])
        for name, layer_state in state["layers"].items():
            expect_kind(layer_state, self.kind, f"exchange {name}")
            key, direction = name.split("/")
            like = torch.empty(0, layer_state["width"], device=device,
                               dtype=getattr(torch, layer_state["dtype"]))
            self.layer(int(key), direction, like).load_state_dict(layer_state)


class _SumOverClones(torch.autograd.Function):
    """``y <-`` the sum over clones as ``exchange``'s layer ``key`` makes it (``None``: exact)
    in place; the gradient goes through the same layer's backward exchange (made on first
    use), or is kept as it is without ``backward``."""

    @staticmethod
    def forward(ctx, y, exchange, key, epoch, backward):
        ctx.exchange, ctx.key, ctx.epoch, ctx.backward = exchange, key, epoch, backward
        ctx.mark_dirty(y)
        exchange.layer(key, "forward", y)(y, epoch)
        if key is not None:
            exchange.count_exact_bytes(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()  # grad may be shared with other consumers: never edit it in place
        if ctx.backward:
            ctx.exchange.layer(ctx.key, "backward", grad)(grad, ctx.epoch)
            if ctx.key is not None:
                ctx.exchange.count_exact_bytes(grad)
        return grad, None, None, None, None
