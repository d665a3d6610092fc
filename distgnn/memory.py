r"""What a training run needs in memory, estimated before anything is allocated.

A run that cannot fit is refused with one line at start-up instead of being killed by the
kernel minutes later.  For ``N`` vertices, ``E`` edges, layer widths
``d_0 = F, d_1 .. d_{L-1} = H, d_L = C`` (``L`` layers) and ``s``-byte floats (4, or 8
under ``--dtype float64``):

.. math::
    \text{model} = 5 s \sum_{l=1}^{L} w_l
        \qquad\text{(weights, gradients, two Adam moments, best weights)}

    \text{activations} = s\,N \sum_{l=1}^{L} \big(2 d_{l-1} + 3 d_l + 3 m\big) + 3 s\,N C

    \text{graph copies} = 24\,E + 16\,N \qquad \text{features} = c\,s\,N F

    \text{attention} = 6\, s\, E\, H L \qquad \text{(GAT only)}

    \text{delayed exchange} = X \big(B\, r + 5\, s\, S \max_l d_l\big)
        \qquad \text{(cd-r only)}

with ``w_l = k (d_{l-1} + 1) d_l`` parameters per layer (``k = 2`` for GraphSAGE's
mean/sum/max aggregators, a root and a neighbour weight, else 1), except GIN, whose MLP of
width ``m = H`` has ``w_l = d_{l-1} m + m + (m + 1) d_l`` (``m = 0`` for the other models).
Per layer autograd keeps about two input-wide tensors (the dropout output and the
aggregated or projected input) and three output-wide ones (the projection, the sum, the
activation), and GIN three ``m``-wide ones inside its MLP; the logits, their softmax and
their gradient add ``3 N C``.  The graph copies
are the transpose the backward pass uses and the per-edge arrays of the kernels; the
features are the normalised copy the model reads (``c = 2`` with
``--precompute-first-aggregation``, which also keeps their aggregate; else 1).  The
features and the graph as loaded are already in memory when this is checked.  The estimate
is meant to be within a factor of two of the peak.  GAT keeps about six ``[E, H]`` per-edge
tensors per layer (logits, their exponentials, the coefficients, the dropped coefficients
and two gradients; ``H`` heads); GCNII counts as ``L + 1`` layers of width ``H`` (its
propagation layers and the input projection).  cd-r keeps, for each of its ``X``
exchanges (one per layer and pass: ``2 L`` with the backward exchange, else ``L``),
``r`` bins (``--delay``) of ``B`` = 6 KiB of index tensors and bookkeeping each (measured),
and about five rows per split-vertex entry (``S``: the rank's leaves plus its leaf entries)
at the widest layer width (the kept partials and replies, and the bins' send and receive
buffers).  The estimate: it catches a ``--hidden``, ``--layers`` or ``--delay`` that cannot
fit, not a run at the edge.
"""
from __future__ import annotations

import os

from partition.stats import layer_widths

from .errors import DistGNNError
from .graph import format_bytes


# bytes of one cd-r bin's index tensors and bookkeeping (measured: 4.3 to 6.3 KiB)
BIN_BYTES = 6 * 1024


def estimate(num_nodes: int, num_edges: int, num_features: int, num_classes: int,
             hidden: int, layers: int, two_weights: bool = False,
             value_bytes: int = 4, precompute_first: bool = False,
             heads: int = 0, mlp: int = 0, exchanges: int = 0, delay: int = 0,
             split_entries: int = 0) -> dict[str, int]:
    """Bytes of ``model``, ``activations``, ``graph`` copies, ``features`` and the
    ``delayed exchange`` (see the module docstring), and their ``total``; ``value_bytes``
    is ``s``, ``precompute_first`` makes ``c = 2``, ``heads`` is GAT's ``H`` (0: no
    attention), ``mlp`` GIN's ``m`` (0: no MLP), ``exchanges`` cd-r's ``X``, ``delay`` its
    ``r`` and ``split_entries`` ``S``.  Python ints: no overflow for absurd sizes."""
    d = layer_widths(num_features, hidden, num_classes, layers)
    k = 2 if two_weights else 1
    s = value_bytes
    weights = (a * mlp + mlp + (mlp + 1) * b if mlp else k * (a + 1) * b
               for a, b in zip(d[:-1], d[1:]))
    model = s * 5 * sum(weights)
    activations = s * num_nodes * (sum(2 * a + 3 * b + 3 * mlp for a, b in zip(d[:-1], d[1:]))
                                   + 3 * num_classes) + 6 * s * num_edges * heads * layers
    graph = 24 * num_edges + 16 * num_nodes
    features = (2 if precompute_first else 1) * s * num_nodes * num_features
    delayed = exchanges * (BIN_BYTES * delay + 5 * s * split_entries * max(d))
    parts = {"model": model, "activations": activations, "graph copies": graph,
             "features": features, "delayed exchange": delayed}
    return {**parts, "total": sum(parts.values())}


def process_mib(field: str = "VmHWM") -> float:
    """``VmHWM`` (the peak resident memory so far) or ``VmRSS`` (now) of this process in MiB.
    Not ``ru_maxrss``: that keeps the parent's peak across fork and exec, so a process
    started by a large one would report its parent's."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def available_bytes(device) -> int:
    """Memory a new allocation can take on ``device``: ``MemAvailable`` of the host, or the
    GPU's free memory."""
    if getattr(device, "type", device) == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def require(cfg, num_nodes: int, num_edges: int, num_features: int, num_classes: int,
            device, where: str, split_entries: int = 0) -> None:
    """Refuse a run of ``cfg`` (a TrainConfig) on this data that cannot start (no features)
    or whose estimated memory exceeds what ``device`` has available; ``split_entries``:
    the rank's leaves plus leaf entries (its share of a partitioned graph's exchange)."""
    if num_features < 1:
        raise DistGNNError(f"{where}: the features have width 0; a model needs at least one "
                           "input feature per vertex")
    layers = cfg.layers + (cfg.model == "gcnii")
    delayed = cfg.algo == "cd-r" and cfg.comm_budget is None
    need = estimate(num_nodes, num_edges, num_features, num_classes, cfg.hidden, layers,
                    cfg.model == "sage" and cfg.aggregator != "gcn",
                    8 if cfg.dtype == "float64" else 4, cfg.precompute_first,
                    cfg.heads if cfg.model == "gat" else 0,
                    cfg.hidden if cfg.model == "gin" else 0,
                    layers * (1 + cfg.backward_exchange) if delayed else 0,
                    cfg.delay_epochs if delayed else 0, split_entries)
    have = available_bytes(device)
    if need["total"] > have:
        parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in need.items()
                          if k != "total" and v)
        raise DistGNNError(f"{where}: the run needs about {format_bytes(need['total'])} "
                           f"({parts}) but {device} has {format_bytes(have)} available; "
                           "reduce --hidden, --layers or --delay, or partition the graph over "
                           "more ranks")
