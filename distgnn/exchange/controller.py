r"""cd-r's default schedule: each epoch either *exact* or *stale*, as a controller decides.

An exact epoch makes one blocking round trip of every split row, as cd-0; in a stale one
each clone adds the remote terms of the last exact epoch, and nothing is sent.  The choice
is made per epoch by a controller that every rank runs on the same inputs.

Epoch ``e`` is exact when

.. math::
    e = 0 \quad\lor\quad e \bmod T = 0 \quad\lor\quad L_{e-1} > L_{e-2}

(``T`` = ``EXACT_EVERY``; ``L``: the training loss, the same on every rank; ``0`` stands
for the first epoch of the run, or of a resume on another layout, :meth:`Controller.restart`):
nothing is kept before the first epoch, at most ``T - 1`` stale epochs follow each other (with
``T = 2`` a remote term is never more than one epoch old), and an epoch after one whose
loss went up is exact, so staleness cannot feed a run of rising losses.  Nothing here
looks at labels or accuracy.  A stale epoch sends nothing: what it sent would arrive after
the next exact epoch had replaced it.  So the bytes are those of the exact epochs (at least
one in ``T``), and a stale epoch waits for no one.
"""
from __future__ import annotations

import math

from ..errors import DistGNNError

EXACT_EVERY = 2


class Controller:
    """The per-epoch decision of the module docstring, and what it remembers.

    ``exact(epoch)`` is asked by every layer's exchange (the same answer within an epoch);
    ``observe(epoch, loss)`` is told each epoch's global training loss after its step.
    """

    kind = "controller"

    def __init__(self, exact_every: int = EXACT_EVERY):
        self.exact_every = exact_every
        self.losses: list[float] = []  # the last two observed, oldest first
        self.decisions: dict[int, bool] = {}  # epoch -> exact, for the epoch record
        self.first = 0  # the epoch before which nothing is kept

    def exact(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` runs exact."""
        if epoch not in self.decisions:
            rose = len(self.losses) == 2 and self.losses[1] > self.losses[0]
            self.decisions = {epoch: epoch == self.first or epoch % self.exact_every == 0
                              or rose}
        return self.decisions[epoch]

    def observe(self, epoch: int, loss: float) -> None:
        """Take epoch ``epoch``'s training loss (non-finite losses count as a rise)."""
        value = loss if math.isfinite(loss) else math.inf
        self.losses = [*self.losses, value][-2:]

    def restart(self, epoch: int, losses: list[float]) -> None:
        """Continue at ``epoch`` with nothing kept (a resume on another layout): that epoch
        is exact; ``losses`` are the training losses of the epochs before it."""
        self.first, self.decisions = epoch, {}
        self.losses = []
        for e, loss in enumerate(losses[-2:]):
            self.observe(e, loss)

    def state_dict(self) -> dict:
        return {"kind": self.kind, "exact_every": self.exact_every, "losses": self.losses}

    def load_state_dict(self, state: dict) -> None:
        if (not isinstance(state, dict) or state.get("kind") != self.kind
                or state.get("exact_every") != self.exact_every):
            raise DistGNNError("the checkpoint's cd-r controller state does not fit this run's "
                               "schedule")
        self.losses = [float(v) for v in state["losses"]][-2:]
        self.decisions = {}
