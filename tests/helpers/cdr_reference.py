"""An independent reference for training under cd-r: all ranks of a partitioned run
simulated one after another in one process, with the delayed exchange written from its
definition (a history of every clone's partials) rather than from :mod:`distgnn.exchange`'s
bins, buffers and messages.

With delay ``r >= 1`` no clone ever uses a value of the current epoch from another rank,
so the ranks of one epoch can run in any order.  For split vertex ``v`` (global id ``g``,
root ``rho``, clones ``R``) at epoch ``e``, let ``e1`` be the last epoch ``<= e`` with
``e1 = g (mod r)`` (the last refresh of ``v``'s bin) and ``H_q(s)`` clone ``q``'s fresh
partial at epoch ``s``.  Every refresh ``e1`` delivers what was sent at ``e1 - r`` (nothing
when ``e1 < r``), and a clone keeps what arrived, smoothed with ``gamma``
(``K <- m`` on the first arrival, then ``K <- gamma K + (1 - gamma) m``):

- the root keeps, per leaf ``q``, ``K_q(e1)`` from the arrivals ``m = H_q(e1 - r)``;
- at ``e1`` it replies to leaf ``q`` with ``D_q(e1) = H_rho(e1) + sum_{q'} K_q'(e1) - K_q(e1)``;
- leaf ``q`` keeps ``L_q(e1)`` from the arrivals ``m = D_q(e1 - r)``.

A clone aggregates its fresh partial plus ``sum_q K_q(e1)`` (root) or ``L_q(e1)`` (leaf).
With ``gamma = 0`` that is ``sum_{q != rho} H_q(e1 - r)`` at the root and
``H_rho(e1 - r) + sum_{q not in {rho, p}} H_q(e1 - 2 r)`` at leaf ``p``.  The backward pass
applies the same rule to the gradients arriving at each clone's aggregate.  Replicas are
one model: the loss is counted at root clones and divided by the global training count,
and the gradients of all ranks are summed before the Adam step.

On a rounding wire (``wire``: bf16 with error feedback) each entry's send at ``s`` of
value ``x(s)`` delivers ``W(s) = round(x(s) + E(s - r))`` and carries
``E(s) = x(s) + E(s - r) - W(s)`` to the entry's next send (``E = 0`` before its first);
``W`` is the arrival ``m`` above.

``subtract_own=False`` describes a wrong schedule (a reply that also carries the leaf's own
partial back), which the tests use to show that the comparison can fail.

:class:`AdaptiveSimulation` is the same kind of reference for the adaptive schedule of
:mod:`distgnn.exchange.adaptive`.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from distgnn.nn.aggregate import Neighbourhood
from distgnn.nn.backends import get_backend
from distgnn.nn.config import build_model
from distgnn.run.config import TrainConfig
from distgnn.run.shard import node_tensors


class History:
    """``H[(layer, direction, epoch, rank)]``: the fresh partials (forward) or incoming
    gradients (backward) of every vertex of a rank, as float64 numpy ``[n_p, d]``."""

    def __init__(self):
        self.values: dict[tuple, np.ndarray] = {}

    def get(self, layer, direction, epoch, rank, local):
        if epoch < 0:
            return 0.0
        return self.values[(layer, direction, epoch, rank)][local]


class Clones:
    """Where every global vertex has clones: ``local[p][g]`` (-1 if none) and its root."""

    def __init__(self, parts, num_nodes):
        self.local = np.full((len(parts), num_nodes), -1, np.int64)
        self.root = np.full(num_nodes, -1, np.int64)
        for p, part in enumerate(parts):
            gids = np.asarray(part.global_ids)
            self.local[p, gids] = np.arange(len(gids))
            rr = np.asarray(part.root_rank)
            self.root[gids[rr == p]] = p
        self.split = np.flatnonzero((self.local >= 0).sum(0) > 1)
        # per rank: (local id, global id, root rank, [(other clone's rank, its local id)])
        self.entries = [[] for _ in parts]
        for g in self.split:
            holders = np.flatnonzero(self.local[:, g] >= 0)
            for p in holders:
                self.entries[p].append((self.local[p, g], g, self.root[g],
                                        [(q, self.local[q, g]) for q in holders if q != p]))


class Kept:
    """The kept values ``K`` and ``L`` of the module docstring, computed on demand (memoised)
    from the history of fresh values.  ``wire``: the rounding of what travels (``None``:
    exact), with error feedback."""

    def __init__(self, hist, clones, r, gamma, subtract_own, wire=None):
        self.hist, self.clones, self.r, self.gamma = hist, clones, r, gamma
        self.subtract_own, self.wire = subtract_own, wire
        self.memo = {}

    def delivered(self, key, s, sent):
        """What arrives of entry ``key``'s send at epoch ``s``, whose value is ``sent(s)``."""
        return sent(s) if self.wire is None else self.carried(key, s, sent)[0]

    def carried(self, key, s, sent):
        """``(W(s), E(s))`` of the module docstring for entry ``key``."""
        if ("W", key, s) not in self.memo:
            before = self.carried(key, s - self.r, sent)[1] if s >= self.r else 0.0
            total = before + sent(s)
            arrives = self.wire(total)
            self.memo[("W", key, s)] = (arrives, total - arrives)
        return self.memo[("W", key, s)]

    def smoothed(self, key, e1, arrival):
        """``K`` after the arrival at refresh ``e1`` (``arrival(s)``: what was sent at s)."""
        if e1 < self.r:
            return 0.0
        if (key, e1) not in self.memo:
            m = arrival(e1 - self.r)
            first = e1 < 2 * self.r
            self.memo[(key, e1)] = m if first else (
                self.gamma * self.smoothed(key, e1 - self.r, arrival) + (1 - self.gamma) * m)
        return self.memo[(key, e1)]

    def root(self, layer, direction, g, q, e1):
        """``K_q(e1)``: the root's kept partial of leaf ``q`` of vertex ``g``."""
        j = self.clones.local[q, g]
        key = ("K", layer, direction, g, q)
        return self.smoothed(key, e1, lambda s: self.delivered(
            key, s, lambda t: self.hist.get(layer, direction, t, q, j)))

    def reply(self, layer, direction, g, q, e1):
        """``D_q(e1)``: what the root sends leaf ``q`` at refresh ``e1``."""
        rho = self.clones.root[g]
        leaves = [p for p in np.flatnonzero(self.clones.local[:, g] >= 0) if p != rho]
        value = self.hist.get(layer, direction, e1, rho, self.clones.local[rho, g])
        value = value + sum((self.root(layer, direction, g, p, e1) for p in leaves), 0.0)
        return value - self.root(layer, direction, g, q, e1) if self.subtract_own else value

    def leaf(self, layer, direction, g, q, e1):
        """``L_q(e1)``: leaf ``q``'s kept complement of vertex ``g``."""
        key = ("L", layer, direction, g, q)
        return self.smoothed(key, e1, lambda s: self.delivered(
            key, s, lambda t: self.reply(layer, direction, g, q, t)))

    def complement(self, layer, direction, epoch, rank):
        """The remote term added at each split clone on ``rank``: ``{local id: [d] or 0}``."""
        out = {}
        for i, g, rho, others in self.clones.entries[rank]:
            e1 = epoch - ((epoch - g) % self.r)
            if rank == rho:
                out[i] = sum((self.root(layer, direction, g, q, e1) for q, _ in others), 0.0)
            else:
                out[i] = self.leaf(layer, direction, g, rank, e1)
        return out


class ReferenceExchange:
    """The exchange of one simulated rank: adds the complement, records the fresh values."""

    combines_clones = True

    def __init__(self, sim, rank):
        self.sim, self.rank = sim, rank

    def __call__(self, y, layer, step, training):
        assert training, "the reference simulates training epochs only"
        sim, rank = self.sim, self.rank

        class Delayed(torch.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return sim.apply(a, layer, "forward", step, rank)

            @staticmethod
            def backward(ctx, grad):
                return sim.apply(grad, layer, "backward", step, rank)

        return Delayed.apply(y)


class Simulation:
    """cd-r training of ``cfg`` on the partitions ``parts`` of a ``num_nodes`` graph."""

    def __init__(self, parts, num_nodes, cfg: TrainConfig, subtract_own: bool = True):
        self.cfg = cfg
        self.clones = Clones(parts, num_nodes)
        self.hist = History()
        self.kept = Kept(self.hist, self.clones, cfg.delay_epochs, cfg.smoothing, subtract_own)
        self.ranks = []
        for p, part in enumerate(parts):
            x, y, masks = node_tensors(part.x, part.y, {"train": part.train_mask},
                                       cfg.feature_norm)
            roots = np.asarray(part.root_rank) == p
            assert not np.any(np.asarray(part.train_mask) & ~roots), "train mask off a root"
            nbr = Neighbourhood(part.graph, get_backend("torch"), in_degree=part.in_degree,
                                global_ids=part.global_ids, exchange=ReferenceExchange(self, p),
                                dtype=torch.float64, seed=cfg.seed)
            self.ranks.append((nbr, x.double(), y, masks["train"]))
        self.num_train = sum(int(m.sum()) for *_, m in self.ranks)
        torch.manual_seed(cfg.seed)
        self.model = build_model(cfg.network, parts[0].x.shape[1],
                                 int(parts[0].meta["num_classes"]), cfg.recompute)
        self.model = self.model.double()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr,
                                          weight_decay=cfg.weight_decay)

    def apply(self, a, layer, direction, epoch, rank):
        fresh = a.detach().numpy().copy()
        self.hist.values[(layer, direction, epoch, rank)] = fresh
        extra = self.kept.complement(layer, direction, epoch, rank)
        out = fresh.copy()
        for i, value in extra.items():
            out[i] += value
        return torch.from_numpy(out)

    def train(self, epochs):
        """The global training loss of each epoch."""
        losses = []
        self.model.train()
        for epoch in range(epochs):
            self.optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for nbr, x, y, train in self.ranks:
                nbr.set_epoch(epoch)
                logits = self.model(nbr, x)
                loss = F.cross_entropy(logits[train], y[train], reduction="sum") / self.num_train
                loss.backward()
                total += loss.item()
            self.optimizer.step()
            losses.append(total)
        return losses


class AdaptiveSimulation:
    """The adaptive schedule from its definition (:mod:`distgnn.exchange.adaptive`'s module
    docstring), every rank in one process, for one aggregation (one layer, one pass).

    Entries are keyed by global id.  Per direction (``up``: a leaf to its root, ``down``: a
    root's reply to a leaf) and ordered pair of ranks, a block lists the sender's entries in
    the order of the partition's split tables (leaves by increasing local id; a root's
    entries as ``leaf_root_local`` lists them for that leaf rank); per block of ``n`` the
    sender sends the ``k = min(n, max(1, floor(F n u / (u + 4))))`` entries whose value moved
    most (squared distance) from what it last sent, ties to the earlier entry.  What is sent
    in one :meth:`epoch` (rounded by ``wire``, no error feedback: the sender remembers what
    it delivered) is kept by the receiver from the next.
    """

    def __init__(self, parts, budget: float, row_bytes: int, wire=None):
        self.budget, self.row_bytes, self.wire = budget, row_bytes, wire
        self.blocks = {}  # (direction, sender, receiver) -> [(local id, global id)]
        for p, part in enumerate(parts):
            gids, root_rank = np.asarray(part.global_ids), np.asarray(part.root_rank)
            ptr, roots = np.asarray(part.leaf_ptr), np.asarray(part.leaf_root_local)
            for q in range(len(parts)):
                if q != p:
                    self.blocks[("up", p, q)] = [(i, gids[i]) for i in
                                                 np.flatnonzero(root_rank == q)]
                    self.blocks[("down", p, q)] = [(i, gids[i]) for i in roots[ptr[q]:ptr[q + 1]]]
        self.ranks = len(parts)
        self.sent, self.kept, self.pending = {}, {}, []

    def rows(self, n: int) -> int:
        return 0 if n == 0 else min(n, max(1, int(np.floor(
            self.budget * n * self.row_bytes / (self.row_bytes + 4)))))

    def send(self, direction, p, q, values) -> int:
        """Send block ``(direction, p, q)``'s ``values`` (``[(global id, [d])]`` in block
        order); returns the bytes."""
        keys = [(direction, p, q, g) for g, _ in values]
        change = [float(((x - self.sent.get(key, 0.0)) ** 2).sum())
                  for key, (_, x) in zip(keys, values)]
        chosen = np.argsort(-np.array(change), kind="stable")[:self.rows(len(values))]
        for c in chosen:
            x = values[c][1].copy()  # a row of the sender's array, which it goes on to edit
            self.sent[keys[c]] = x if self.wire is None else self.wire(x)
            self.pending.append((keys[c], self.sent[keys[c]]))
        return len(chosen) * (self.row_bytes + 4)

    def epoch(self, fresh: list[np.ndarray]) -> tuple[list[np.ndarray], list[int]]:
        """Each rank's output for its fresh ``[n_p, d]`` values, and the bytes it sent."""
        for key, value in self.pending:
            self.kept[key] = value
        self.pending = []
        outs, sent = [], []
        for p, a in enumerate(fresh):
            a, nbytes = a.copy(), 0
            others = [q for q in range(self.ranks) if q != p]
            for q in others:
                nbytes += self.send("up", p, q, [(g, a[i]) for i, g in self.blocks[("up", p, q)]])
            for q in others:
                for i, g in self.blocks[("down", p, q)]:
                    a[i] += self.kept.get(("up", q, p, g), 0.0)
            for q in others:
                nbytes += self.send("down", p, q, [
                    (g, a[i] - self.kept.get(("up", q, p, g), 0.0))
                    for i, g in self.blocks[("down", p, q)]])
            for q in others:
                for i, g in self.blocks[("up", p, q)]:
                    a[i] += self.kept.get(("down", q, p, g), 0.0)
            outs.append(a)
            sent.append(nbytes)
        return outs, sent
