r"""cd-r's default schedule: each epoch either *exact* or *stale*, as a controller decides.

An exact epoch makes one blocking round trip of every split row, as cd-0; in a stale one
each clone adds the remote terms of the last exact epoch, and nothing is sent.  The choice
is made per epoch by a controller that every rank runs on the same inputs.

Epoch ``e`` is exact when

.. math::
    e = 0 \quad\lor\quad e \bmod T = 0 \quad\lor\quad L_{e-1} > L_{e-2}
    \quad\lor\quad e > e_d

(``T`` = ``EXACT_EVERY``; ``L``: the training loss, the same on every rank; ``0`` stands
for the first epoch of the run, or of a resume on another layout, :meth:`Controller.restart`):
nothing is kept before the first epoch, at most ``T - 1`` stale epochs follow each other (with
``T = 2`` a remote term is never more than one epoch old), and an epoch after one whose
loss went up is exact, so staleness cannot feed a run of rising losses.

``e_d`` is the first epoch at which the remote terms were seen to move as far as the sums
they belong to: each exact epoch after another measures the *drift* ``d`` of every forward
layer, how far the other clones' partials moved since the last exact epoch relative to the
split clones' exact sums (:attr:`~distgnn.exchange.delayed.DelayedSum.drift`, the epoch
record's ``stale_drift``), and ``e_d`` is the epoch after which the median over the last
``DRIFT_WINDOW`` exact epochs of the largest layer's ``d`` reached ``DRIFT_LIMIT``.  A stale
epoch then adds an error as large as what it computes, so from there on every epoch is
exact (the run says so once: :meth:`Controller.observe`).  This happens when the sums stay
near zero while the weights move, as the logits of a model that separates weak classes
slowly (``docs/results/cdr-default.md``); nothing here looks at labels or accuracy.

A layer whose rows take at most ``1 / NARROW`` of the widest layer's bytes on the wire is
exact in every epoch (:func:`mark_narrow`).  In GCN that is the output layer when the
classes are few (it projects first, so its rows are the class scores): a stale remote term
there is an error in the logits with no layer after it, and on a dense two-class graph
whose logits stay near zero it cost 1.7-3.3 points, which exact output rows took back
(``docs/results/cdr-default.md``).

Otherwise a stale epoch sends nothing: what it sent would arrive after the next exact
epoch had replaced it.  So the bytes are those of the exact epochs (at least one in ``T``)
and of the narrow layers in the others, and a stale epoch waits only for the narrow layers.
"""
from __future__ import annotations

import math
import statistics

from ..errors import DistGNNError

EXACT_EVERY = 2
# the drift at which a stale epoch's error is as large as the sums it adds to, and the
# exact epochs over which its median is taken (a few: a single epoch's drift is noisy,
# larger at the start, when the sums are still near zero)
DRIFT_LIMIT = 1.0
DRIFT_WINDOW = 5
# a layer whose rows take at most 1 / NARROW of the widest's bytes is exact every epoch
NARROW = 4


def mark_narrow(layers: list) -> None:
    """Mark the narrow layers exact every epoch, the others not.

    ``layers``: :class:`~distgnn.exchange.delayed.DelayedSum`, one per layer key and pass;
    ``every_epoch`` is set on those whose wire rows take at most ``1 / NARROW`` of the
    widest one's bytes and cleared on the others.  Called whenever a layer is made, so the
    choice holds once every layer exists (in the first epoch, which is exact)."""
    widest = max(layer.wire.row_bytes for layer in layers)
    for layer in layers:
        layer.every_epoch = NARROW * layer.wire.row_bytes <= widest


class Controller:
    """The per-epoch decision of the module docstring, and what it remembers.

    ``exact(epoch)`` is asked by every layer's exchange (the same answer within an epoch);
    ``observe(epoch, loss, drift)`` is told each epoch's global training loss after its step
    and, on an exact epoch that measured it, the largest forward layer's drift.
    """

    kind = "controller"

    def __init__(self, exact_every: int = EXACT_EVERY):
        self.exact_every = exact_every
        self.losses: list[float] = []  # the last two observed, oldest first
        self.decisions: dict[int, bool] = {}  # epoch -> exact, for the epoch record
        self.first = 0  # the epoch before which nothing is kept
        self.drifts: list[float] = []  # the last DRIFT_WINDOW measured, oldest first
        # e_d + 1 of the module docstring, once reached (then every epoch is exact)
        self.exact_from: int | None = None

    def exact(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` runs exact."""
        if epoch not in self.decisions:
            rose = len(self.losses) == 2 and self.losses[1] > self.losses[0]
            late = self.exact_from is not None and epoch >= self.exact_from
            self.decisions = {epoch: epoch == self.first or epoch % self.exact_every == 0
                              or rose or late}
        return self.decisions[epoch]

    def observe(self, epoch: int, loss: float, drift: float | None = None) -> bool:
        """Take epoch ``epoch``'s training loss (non-finite losses count as a rise) and the
        largest forward layer's drift, when the epoch measured one; ``True`` when this made
        every later epoch exact (once: :attr:`exact_from` is then ``epoch + 1``)."""
        value = loss if math.isfinite(loss) else math.inf
        self.losses = [*self.losses, value][-2:]
        if drift is None or self.exact_from is not None:
            return False
        self.drifts = [*self.drifts, drift][-DRIFT_WINDOW:]
        if len(self.drifts) < DRIFT_WINDOW or self.median_drift < DRIFT_LIMIT:
            return False
        self.exact_from = epoch + 1
        return True

    @property
    def median_drift(self) -> float:
        """The median of the drifts kept (of the last ``DRIFT_WINDOW`` measured)."""
        return statistics.median(self.drifts)

    def restart(self, epoch: int, losses: list[float]) -> None:
        """Continue at ``epoch`` with nothing kept (a resume on another layout): that epoch
        is exact; ``losses`` are the training losses of the epochs before it.  Drifts are
        measured anew (the layout changed them); a run made exact stays exact."""
        self.first, self.decisions, self.drifts = epoch, {}, []
        self.losses = [loss if math.isfinite(loss) else math.inf for loss in losses[-2:]]

    def state_dict(self) -> dict:
        return {"kind": self.kind, "exact_every": self.exact_every, "losses": self.losses,
                "drifts": self.drifts, "exact_from": self.exact_from}

    def load_state_dict(self, state: dict) -> None:
        if (not isinstance(state, dict) or state.get("kind") != self.kind
                or state.get("exact_every") != self.exact_every):
            raise DistGNNError("the checkpoint's cd-r controller state does not fit this run's "
                               "schedule")
        self.losses = [float(v) for v in state["losses"]][-2:]
        # checkpoints written before the drift was watched hold neither: nothing seen yet
        self.drifts = [float(v) for v in state.get("drifts", [])][-DRIFT_WINDOW:]
        self.exact_from = state.get("exact_from")
        self.decisions = {}
