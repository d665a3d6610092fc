r"""PyTorch Geometric models trained on partitions as they are: :func:`distribute`.

A model written with ``torch_geometric.nn`` is called as ``model(x, edge_index, ...)``.
:func:`distribute` wraps it as a :class:`PyGModel`, which distgnn's training, evaluation and
prediction call as ``model(g, x)``, as they call the built-in models: it hands the wrapped
model this rank's local ``x`` ``[N, F]`` and ``edge_index`` ``[2, E]`` (local ids, rows
``(source, destination)``), and the graph's edge weights ``[E]`` as ``edge_weight`` when
the graph has them and ``forward`` takes that argument.

A vertex cut keeps every edge in one partition with both of its ends (as clones), so each
message :math:`\phi(\mathbf{x}_i, \mathbf{x}_j, \mathbf{e}_{j,i})` is computed where the
edge is, by the layer's own ``message``.  What the wrapper adds, inside the forward pass
only (the model is unchanged outside it), is what makes each vertex's result the whole
graph's:

- **aggregation** over in-edges (``MessagePassing.aggregate``): the partial sums of this
  rank's edges are combined over the clones of each split vertex through the run's
  exchange (cd-0, cd-r or none, as configured), the mean divides by the global number of
  in-edges, and max/min take the extreme over clones (rows without in-edges anywhere stay
  0, as in PyG);
- **self-loops** that a layer adds (``add_self_loops`` and ``add_remaining_self_loops``
  append one edge ``v -> v`` per vertex) are counted once per vertex, not once per clone:
  their messages are added after the combination;
- **degrees and attention** read the whole graph: ``gcn_norm``, ``degree`` and the edge
  ``softmax`` (GAT, GATv2, the graph transformer) use degrees and softmax denominators
  summed over clones and maxima taken over clones,

.. math::
    \alpha_{j,i} = \frac{\exp(s_{j,i} - m_i)}{\sum_{p} \sum_{k \in \mathcal{N}_p(i)}
        \exp(s_{k,i} - m_i)}, \qquad m_i = \max_p \max_{k \in \mathcal{N}_p(i)} s_{k,i};

- **dropout**: ``F.dropout`` (and ``torch.nn.Dropout``) on vertex rows ``[N, ...]`` draws
  its mask from the global vertex id, and on a message-passing call's edge rows
  ``[E', ...]`` from the global ids of both ends, so every clone drops alike
  (:mod:`distgnn.nn.dropout`).

Where a layer's messages are its neighbours' rows, optionally scaled by an edge weight
that needs no gradient (GCN, GraphSAGE with ``mean``/``sum``, GIN, GraphConv and a
``MessagePassing`` whose ``message`` is PyG's), the sum runs on distgnn's SpMM kernels
(the rank's backend) instead of gathering ``[E, d]`` messages; GraphSAGE with ``mean`` or
``sum`` projects before aggregating when that narrows the rows,
:math:`\mathbf{W}(\operatorname{mean}_j \mathbf{x}_j) = \operatorname{mean}_j \mathbf{W}
\mathbf{x}_j`, and GCN aggregates before projecting when that does.

What cannot be made exact is refused by :func:`distribute`, in one line naming the module:
layers whose statistics run over all vertices (batch, instance and graph normalisation,
pooling), aggregations other than sum, mean, max and min, a layer that overrides
``aggregate``, and the PyG layers not listed in :data:`LAYERS` (a user's own
``MessagePassing`` subclass is taken under the rules above); a normalisation over all
vertices is refused with what to use instead (a per-vertex one).  Other dropout functions
than ``F.dropout`` are refused where they are called, and, at the end of the first training
pass on partitions, any other draw from torch's generator and buffers that differ between
ranks (:func:`distgnn.nn.prepare.prepare`, as for every model).

The weights are the wrapped model's: ``PyGModel.state_dict()`` is the plain model's (its
keys and tensors), so a model file or checkpoint of a trained :class:`PyGModel` loads into
the undistributed model.
"""
from __future__ import annotations

import copy
import inspect
import sys
import threading

import torch
import torch.fx
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .data.graph import CSRGraph
from .errors import DistGNNError
from .kernels.dropout import dropout_key
from .nn.aggregate import Neighbourhood, SpMM
from .nn.dropout import vertex_dropout

try:
    import torch_geometric  # noqa: F401 -- the error below names the package
    from torch_geometric.nn import aggr as pyg_aggr
    from torch_geometric.nn import conv as pyg_conv
    from torch_geometric.nn.conv import MessagePassing
    from torch_geometric.nn.conv.gcn_conv import gcn_norm as pyg_gcn_norm
    from torch_geometric.utils import (
        add_remaining_self_loops,
        remove_self_loops,
        scatter,
    )
    from torch_geometric.utils import add_self_loops as pyg_add_self_loops
    from torch_geometric.utils import degree as pyg_degree
    from torch_geometric.utils import softmax as pyg_softmax
except ImportError as e:  # pragma: no cover -- the test environment has PyG
    raise ImportError("distgnn.pyg needs PyTorch Geometric: pip install torch_geometric"
                      ) from e

# PyG's layers that distribute() takes: each aggregates through MessagePassing.aggregate
# and reads degrees or softmax only through the functions replaced below
LAYERS = ("GCNConv", "SAGEConv", "GINConv", "GINEConv", "GATConv", "GATv2Conv", "GraphConv",
          "TransformerConv", "ResGatedGraphConv", "SGConv", "TAGConv", "APPNP", "LGConv",
          "GCN2Conv", "FAConv", "SSGConv", "MixHopConv", "ClusterGCNConv", "EdgeConv",
          "LEConv", "GeneralConv", "MFConv", "FiLMConv", "AGNNConv", "NNConv", "CGConv",
          "GatedGraphConv", "PDNConv", "SimpleConv", "AntiSymmetricConv", "DirGNNConv")

# PyG's other modules taken as they are: per-vertex or per-layer computations and containers
# (their graph layers are checked one by one)
MODULES = ("Linear", "Sequential", "MLP", "JumpingKnowledge", "GCN", "GraphSAGE", "GIN",
           "GAT", "EdgeCNN", "TrimToLayer")

# what a refused normalisation can be replaced with: one that reads each vertex's own row
PER_VERTEX_NORM = ("normalise each vertex alone instead (torch.nn.LayerNorm, or "
                   "torch_geometric.nn.LayerNorm with mode='node')")

REDUCTIONS = {pyg_aggr.SumAggregation: "sum", pyg_aggr.MeanAggregation: "mean",
              pyg_aggr.MaxAggregation: "max", pyg_aggr.MinAggregation: "min"}

# messages that are the source rows, scaled by ``edge_weight`` when it is given
ROW_MESSAGES = {MessagePassing.message, pyg_conv.GCNConv.message, pyg_conv.SAGEConv.message,
                pyg_conv.GINConv.message, pyg_conv.GraphConv.message}

_HOOKS = ("_propagate_forward_pre_hooks", "_propagate_forward_hooks",
          "_message_forward_pre_hooks", "_message_forward_hooks",
          "_aggregate_forward_pre_hooks", "_aggregate_forward_hooks")

_active = threading.local()  # .pass_: the _Pass of this thread's distributed forward


def distribute(model: torch.nn.Module, *, edge_weight: str | None = "edge_weight"
               ) -> "PyGModel":
    """``model`` (built from ``torch_geometric.nn`` layers) made to train on partitions.

    Args:
        model (torch.nn.Module): called as ``model(x, edge_index, ...)``, returning logits
            ``[N, C]``.  Checked at once: a module that cannot be made exact is refused with
            :class:`~distgnn.errors.DistGNNError` naming it (see the module docstring).
        edge_weight (str, optional): the keyword of ``model.forward`` that receives the
            graph's edge weights ``[E]`` (when the graph has them); ``None``: never passed.
            The default is passed only to a ``forward`` that names it; another name that
            ``forward`` does not take is refused, as are other arguments ``forward`` needs
            (only ``x``, ``edge_index`` and the weights are passed).

    A model distributed already, or made heterogeneous by PyG's ``to_hetero``, is refused.

    Returns the :class:`PyGModel` to give :func:`distgnn.train` (from ``make_model``),
    ``run.place`` or :func:`distgnn.load_model`; it shares ``model``'s parameters.
    """
    if not isinstance(model, torch.nn.Module):
        raise DistGNNError(f"distribute takes a torch.nn.Module, got {type(model).__name__}")
    if isinstance(model, PyGModel):
        raise DistGNNError("distribute: the model is distributed already (a "
                           "distgnn.pyg.PyGModel); give it to distgnn as it is")
    if isinstance(model, torch.fx.GraphModule) and "to_hetero" in model.code:
        raise DistGNNError("distribute: the model is heterogeneous (made by PyG's to_hetero), "
                           "and distgnn trains graphs of one vertex and edge type: give it the "
                           "homogeneous model, on data converted by HeteroData.to_homogeneous()")
    check_model(model)
    return PyGModel(model, edge_weight)


def check_model(model: torch.nn.Module) -> None:
    """Refuse, naming the module, what a partitioned run could not compute exactly."""
    aggregations = {id(m.aggr_module) for m in model.modules()
                    if isinstance(m, MessagePassing) and m.aggr_module is not None}
    for name, m in model.named_modules():
        where = f"{name or 'the model'} ({type(m).__name__})"
        problem = _problem(m, aggregations)
        if problem:
            raise DistGNNError(f"{where}: {problem}")


def _problem(m: torch.nn.Module, aggregations: set[int]) -> str | None:
    module = type(m).__module__
    if isinstance(m, MessagePassing):
        if type(m).aggregate is not MessagePassing.aggregate:
            return "overrides aggregate(), whose partial results distgnn cannot combine"
        if type(m.aggr_module) not in REDUCTIONS:
            return (f"aggregation {type(m.aggr_module).__name__}: only sum, mean, max and "
                    "min combine over a split vertex's clones")
        if m.decomposed_layers != 1:
            return "decomposed_layers > 1 is not supported"
        if (getattr(m, "edge_dim", None) and getattr(m, "add_self_loops", False)
                and isinstance(getattr(m, "fill_value", None), str)):
            return (f"self-loops with fill_value={m.fill_value!r} take a vertex's local "
                    "in-edges' attributes; pass a number as fill_value")
        pyg_base = next(c for c in type(m).__mro__ if c.__module__.startswith("torch_geometric"))
        if pyg_base is not MessagePassing and pyg_base.__name__ not in LAYERS:
            return (f"PyG's {pyg_base.__name__} is not among the layers distgnn distributes "
                    f"({', '.join(LAYERS)}, and MessagePassing subclasses of your own)")
        return None
    if isinstance(m, pyg_aggr.Aggregation):
        return (None if id(m) in aggregations
                else "pooling over all vertices: a partition holds only some of them")
    if isinstance(m, torch.nn.MultiheadAttention):
        return "attention over all vertices: a partition holds only some of them"
    if isinstance(m, (torch.nn.modules.batchnorm._BatchNorm,
                      torch.nn.modules.instancenorm._InstanceNorm)):
        return f"its statistics run over all vertices, which no rank holds: {PER_VERTEX_NORM}"
    if module.startswith("torch_geometric.nn.norm"):
        if type(m).__name__ == "MessageNorm" or getattr(m, "mode", None) == "node":
            return None
        return ("its statistics run over all vertices (or a graph), which no rank holds: "
                f"{PER_VERTEX_NORM}")
    if module.startswith("torch_geometric.nn.pool"):
        return "pooling over vertices: a partition holds only some of them"
    if module.startswith("torch_geometric") and type(m).__name__ not in MODULES + LAYERS:
        return (f"PyG's {type(m).__name__} is not among the modules distgnn distributes "
                f"({', '.join(LAYERS + MODULES)}, and your own)")
    if isinstance(m, (torch.nn.AlphaDropout, torch.nn.FeatureAlphaDropout, torch.nn.Dropout1d,
                      torch.nn.Dropout2d, torch.nn.Dropout3d)):
        return "only torch.nn.Dropout and F.dropout are keyed by vertex; use one of them"
    return None


class PyGModel(torch.nn.Module):
    """A PyTorch Geometric model called as distgnn calls models, ``model(g, x)``.

    Made by :func:`distribute`; ``module`` is the wrapped model.  ``state_dict`` and
    ``load_state_dict`` are the wrapped model's (the plain PyG keys).

    Shapes:
        - **input:** graph ``g`` (:class:`~distgnn.nn.aggregate.Neighbourhood`) over ``N``
          vertices, ``x`` ``[N, F]``
        - **output:** what ``module(x, edge_index)`` returns, ``[N, C]``
    """

    keys_torch_dropout = True  # distgnn.nn.prepare: F.dropout is keyed here, not refused

    def __init__(self, module: torch.nn.Module, edge_weight: str | None = "edge_weight"):
        super().__init__()
        self.module = module
        self.edge_weight, self.needs_weights = _weight_argument(module, edge_weight)
        # asked for (the default) but taken by no argument: said when the graph has weights
        self.unused_weights = edge_weight is not None and self.edge_weight is None

    def forward(self, g: Neighbourhood, x: torch.Tensor):
        edge_index = _local_edge_index(g, x.device)
        kwargs = {}
        if self.edge_weight and g.graph.edge_weight is not None:
            kwargs[self.edge_weight] = _local_edge_weight(g, x)
        elif self.needs_weights:
            raise DistGNNError(f"{type(self.module).__name__}.forward needs "
                               f"{self.edge_weight}, and the graph has no edge weights: give "
                               f"{self.edge_weight} a default (None) or train on a weighted "
                               "graph")
        with _Pass(self, g, edge_index):
            return self.module(x, edge_index, **kwargs)

    def state_dict(self, *args, **kwargs):
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)


def _weight_argument(module: torch.nn.Module, edge_weight: str | None
                     ) -> tuple[str | None, bool]:
    """``(argument, required)``: where ``module.forward`` takes the graph's edge weights.

    ``argument`` is the argument that receives them (``None``: none; a ``forward`` without
    ``edge_weight`` takes none when it is the default name; another name is passed to a
    ``forward`` taking ``**kwargs``), ``required`` whether ``forward`` cannot run without it.

    Refuses, in one line, a ``forward`` that is not ``forward(x, edge_index, ...)``, a name
    ``edge_weight`` that ``forward`` does not take, and any other argument ``forward`` needs
    (distgnn passes only ``x``, ``edge_index`` and the weights)."""
    name = type(module).__name__
    params = list(inspect.signature(module.forward).parameters.values())
    flexible = any(p.kind == p.VAR_KEYWORD for p in params)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2 and not any(p.kind == p.VAR_POSITIONAL for p in params):
        raise DistGNNError(f"distribute: {name}.forward takes "
                           f"({', '.join(p.name for p in params)}); a PyG model takes "
                           "(x, edge_index, ...)")
    named = [p for p in params[2:] if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    choices = ", ".join(repr(p.name) for p in named) or "none"
    if edge_weight is not None and edge_weight not in {p.name for p in named}:
        if edge_weight == "edge_weight":  # the default: passed only where forward names it
            edge_weight = None
        elif not flexible:
            raise DistGNNError(f"distribute(edge_weight={edge_weight!r}): {name}.forward has "
                               f"no such argument after x and edge_index (it has {choices}); "
                               "name one of them, or pass edge_weight=None")
    needed = [p.name for p in named if p.default is p.empty and p.name != edge_weight]
    if needed:
        raise DistGNNError(f"distribute: {name}.forward needs {', '.join(needed)}, which "
                           "distgnn does not pass (it passes x, edge_index and the graph's "
                           "edge weights [E] as distribute's edge_weight names): give "
                           f"{needed[0]} a default (None), or edge_weight={needed[0]!r} to "
                           "receive the weights there")
    required = edge_weight is not None and any(
        p.name == edge_weight and p.default is p.empty for p in named)
    return edge_weight, required


def _local_edge_index(g: Neighbourhood, device) -> torch.Tensor:
    """int64 ``[2, E]`` ``(source, destination)`` local ids in CSR order, made once."""
    key = ("pyg_edge_index", str(device))
    if key not in g.graph.cache:
        g.graph.cache[key] = torch.stack(g.edge_index()).to(device)
    return g.graph.cache[key]


def _local_edge_weight(g: Neighbourhood, x: torch.Tensor) -> torch.Tensor:
    key = ("pyg_edge_weight", str(x.device), x.dtype)
    if key not in g.graph.cache:
        # a copy: partitions memory-map the weights read-only
        g.graph.cache[key] = torch.tensor(g.graph.edge_weight).to(x.device, x.dtype)
    return g.graph.cache[key]


class _Edges:
    """The edges of one message-passing call: ``edge_index`` ``[2, E']``, of which the last
    ``tail`` (0 or ``N``) are the self-loops ``v -> v`` a layer appended, in vertex order;
    per-vertex counts over clones are computed on first use."""

    def __init__(self, edge_index: torch.Tensor, n: int, local: torch.Tensor):
        self.edge_index, self.n = edge_index, n
        e = edge_index.shape[1]
        self.tail = 0
        if edge_index is not local and e >= n > 0:
            loops = torch.arange(n, device=edge_index.device)
            if torch.equal(edge_index[0, e - n:], loops) and \
                    torch.equal(edge_index[1, e - n:], loops):
                self.tail = n
        self.body = e - self.tail
        self.is_local = (self.body == local.shape[1]
                         and (edge_index is local or torch.equal(edge_index[:, :self.body], local)))
        self.counts: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.keys: torch.Tensor | None = None
        self.graphs: list[tuple[torch.Tensor, CSRGraph]] = []  # weighted CSR, by weights



class _Pass:
    """One distributed forward pass of a :class:`PyGModel`: the context in which its
    message-passing layers, PyG's degree, normalisation and softmax functions and torch's
    dropout act over clones (see the module docstring)."""

    def __init__(self, model: PyGModel, g: Neighbourhood, edge_index: torch.Tensor):
        self.model, self.g, self.local = model, g, edge_index
        self.calls = 0  # message-passing calls so far: their exchange keys
        self.dropouts = 0  # dropout calls so far: their mask keys
        self.functions = 0  # memoised function calls so far: their sites
        self.stack: list[tuple[_Edges, int, torch.nn.Module]] = []  # calls in progress
        self.memo = model.__dict__.setdefault("_pyg_memo", {})  # call site -> cached state
        self.saved: list[tuple[object, str, object]] = []
        self.seen: dict[int, _Edges] = {}  # id of an edge_index -> its state, in this pass

    def __enter__(self):
        if getattr(_active, "pass_", None) is not None:
            raise DistGNNError("a distributed PyG model called inside another one's forward")
        _install_functions(self.model.module)
        for m in self.model.module.modules():
            if isinstance(m, MessagePassing):
                self._patch(m, "propagate", _Call(self, m, m.propagate, aggregates=True))
                self._patch(m, "edge_updater", _Call(self, m, m.edge_updater, aggregates=False))
                self._patch(m, "aggregate", lambda *a, m=m, **k: self.aggregate(m, *a, **k))
                if isinstance(m, pyg_conv.SAGEConv) and REDUCTIONS[type(m.aggr_module)] in (
                        "sum", "mean") and not m.project:
                    self._patch(m, "forward", _NarrowSAGE(m, m.forward))
                if type(m) is pyg_conv.GCNConv:
                    self._patch(m, "forward", _NarrowGCN(m, m.forward))
        self.mode = _KeyedDropout(self)
        self.mode.__enter__()
        _active.pass_ = self
        return self

    def __exit__(self, *exc):
        _active.pass_ = None
        self.mode.__exit__(*exc)
        for obj, name, value in reversed(self.saved):
            if value is None:
                del obj.__dict__[name]
            else:
                obj.__dict__[name] = value

    def _patch(self, obj, name: str, value) -> None:
        self.saved.append((obj, name, obj.__dict__.get(name)))
        obj.__dict__[name] = value

    # -- the state of each call site, kept across passes while its edges stay the same
    def edges(self, site, edge_index: torch.Tensor) -> _Edges:
        """The state of ``edge_index`` at call site ``site``: one per tensor in a pass, kept
        across passes while the site's edges stay equal (checked once per tensor)."""
        state = self.seen.get(id(edge_index))
        if state is None or state.edge_index is not edge_index:
            state = self.memo.get(site)
            if state is None or state.n != self.g.num_nodes or not _same(state.edge_index,
                                                                          edge_index):
                state = _Edges(edge_index, self.g.num_nodes, self.local)
            state.edge_index = edge_index
            self.seen[id(edge_index)] = state
        self.memo[site] = state
        return state

    def counts(self, edges: _Edges, module, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(local, total)`` ``[N, 1]``: the edges each vertex aggregates over among
        ``edges``' own (not the appended loops), on this rank and over all clones."""
        row = 1 if module.flow == "source_to_target" else 0
        if row not in edges.counts:
            index = edges.edge_index[row, :edges.body]
            local = scatter(torch.ones(edges.body, dtype=torch.float64, device=index.device),
                            index, 0, edges.n, reduce="sum").view(-1, 1)
            edges.counts[row] = (local, self.g.exchange.exact(local.clone()))
        local, total = edges.counts[row]
        return local.to(dtype), total.to(dtype)

    def view(self, module, key: int) -> Neighbourhood:
        view = copy.copy(self.g)
        view.key = self.g.claim("layer", module, key)
        return view

    # -- aggregation: MessagePassing.aggregate of every layer in the pass
    def aggregate(self, module, inputs: torch.Tensor, index: torch.Tensor, ptr=None,
                  dim_size: int | None = None) -> torch.Tensor:
        edges, key, _ = self.stack[-1]
        reduce = REDUCTIONS[type(module.aggr_module)]
        if module.node_dim % inputs.dim() != 0:
            raise DistGNNError(f"{type(module).__name__}: messages must have the edges "
                               f"first (node_dim {module.node_dim} of {inputs.dim()} dims)")
        n, body = edges.n, edges.body
        y = scatter(inputs[:body], index[:body], 0, n,
                    reduce="sum" if reduce == "mean" else reduce)
        loop = inputs[body:] if edges.tail else None
        return self.complete(module, key, edges, y, loop, reduce)

    def complete(self, module, key: int, edges: _Edges, y: torch.Tensor,
                 loop: torch.Tensor | None, reduce: str,
                 loop_weight: torch.Tensor | None = None) -> torch.Tensor:
        """This rank's partial aggregate ``y`` ``[N, ...]`` over ``edges``' own edges made the
        whole graph's: combined over clones, the appended loops' messages ``loop`` (times
        ``loop_weight`` ``[N, 1]``, when given) added."""
        shape = y.shape
        flat = y.reshape(shape[0], -1)
        if reduce in ("sum", "mean"):
            y = self.view(module, key).combine(flat.contiguous()).view(shape)
            if reduce == "mean" and loop is not None and loop_weight is not None:
                loop, loop_weight = loop_weight * loop, None
            if reduce == "mean":
                count = self.counts(edges, module, y.dtype)[1] + (1 if loop is not None else 0)
                if loop is not None and y.dim() == 2:  # (y + loop) / count in one pass
                    return self.g.self_loop(y, loop, count.clamp(min=1), divide=True)
            # in place: y is this call's own sum, which no backward pass reads
            if loop is not None and loop_weight is not None:
                y = y.addcmul_(loop_weight, loop)
            elif loop is not None:
                y = y.add_(loop)
            if reduce == "mean":
                y = y / count.clamp(min=1).view(-1, *[1] * (y.dim() - 1))
            return y
        local, total = self.counts(edges, module, y.dtype)
        # a copy: the local scatter's backward reads its own output, which this overwrites
        y = self.g.exchange.extreme(flat.clone(), reduce, (local == 0).view(-1)).view(shape)
        if loop is None:
            return y
        pick = torch.maximum if reduce == "max" else torch.minimum
        some = (total > 0).view(-1, *[1] * (y.dim() - 1))
        return torch.where(some, pick(y, loop), loop)

    def rows_sum(self, module, key: int, edges: _Edges, kwargs: dict) -> torch.Tensor | None:
        """The aggregation of row messages on the SpMM kernels (see the module docstring),
        or ``None`` where this call is not one."""
        reduce = REDUCTIONS[type(module.aggr_module)]
        x = kwargs.get("x")
        x = x[0] if isinstance(x, (tuple, list)) else x
        weight = kwargs.get("edge_weight")
        if (reduce not in ("sum", "mean") or not edges.is_local
                or type(module).message not in ROW_MESSAGES
                or type(module).update is not MessagePassing.update
                or module.explain or any(getattr(module, h) for h in _HOOKS)
                or set(kwargs) - {"x", "edge_weight"} or not isinstance(x, torch.Tensor)
                or x.dim() != 2 or x.shape[0] != edges.n or module.flow != "source_to_target"):
            return None
        if weight is None:
            graph = self.unweighted()
        elif (weight.requires_grad or weight.dim() != 1
              or x.dtype not in (torch.float32, torch.bfloat16)):
            return None  # the kernels' edge weights are float32 constants
        else:
            graph = self.weighted(edges, weight)
        y = SpMM.apply(x, graph, self.g.backend, "sum", self.g.timer)
        loop = x if edges.tail else None
        loop_weight = (weight[edges.body:].view(-1, 1).to(x.dtype)
                       if edges.tail and weight is not None else None)
        return self.complete(module, key, edges, y, loop, reduce, loop_weight)

    def unweighted(self) -> CSRGraph:
        """The local CSR without the graph's edge weights (made once)."""
        g = self.g.graph
        if g.edge_weight is None:
            return g
        if "pyg_unweighted" not in g.cache:
            g.cache["pyg_unweighted"] = CSRGraph(g.indptr, g.indices, g.num_nodes)
        return g.cache["pyg_unweighted"]

    def weighted(self, edges: _Edges, weight: torch.Tensor) -> CSRGraph:
        """The local CSR with ``weight``'s first ``E`` values, kept while they stay."""
        for w, graph in edges.graphs:
            if _same(w, weight):
                return graph
        g = self.g.graph
        graph = CSRGraph(g.indptr, g.indices, g.num_nodes,
                         weight[:edges.body].detach().float().cpu().numpy())
        edges.graphs[:] = [(weight, graph), *edges.graphs[:3]]  # the layers' weights
        return graph

    def memoised(self, original, *args, **kwargs):
        """``original(*args, **kwargs)``, or its result at this call site in an earlier pass
        if every argument is the same (tensors: the same objects)."""
        site = ("memo", original.__name__, self.functions)
        self.functions += 1
        given = (args, kwargs)
        kept = self.memo.get(site)
        if kept is not None and _same_arguments(kept[0], given):
            return kept[1]
        out = original(*args, **kwargs)
        self.memo[site] = (given, out)
        return out

    # -- PyG's functions that read every in-edge of a vertex
    def gcn_norm(self, edge_index, edge_weight=None, num_nodes=None, improved=False,
                 add_self_loops=True, flow="source_to_target", dtype=None):
        """PyG's ``gcn_norm`` with the degrees of the whole graph, memoised per call site
        while its inputs stay the same."""
        if not isinstance(edge_index, torch.Tensor) or flow != "source_to_target":
            raise DistGNNError("gcn_norm on a partition takes an edge_index tensor and "
                               "flow='source_to_target'")
        site = ("gcn_norm", self.calls, num_nodes, improved, add_self_loops, dtype)
        memo = self.memo.get(site)
        if memo is not None and _same(memo[0], edge_index) and _same(memo[1], edge_weight):
            return memo[2]
        n = num_nodes if num_nodes is not None else self.g.num_nodes
        if add_self_loops and (improved or edge_weight is not None) and bool(
                (edge_index[0] == edge_index[1]).any()):
            raise DistGNNError("gcn_norm on a partition: the graph has self-loops and the "
                               "layer weighs them (improved=True or edge weights); remove "
                               "them first (torch_geometric.utils.remove_self_loops)")
        w = edge_weight
        if w is None:
            w = torch.ones(edge_index.shape[1], dtype=dtype, device=edge_index.device)
        ei = edge_index
        if add_self_loops:
            ei, w = add_remaining_self_loops(ei, w, 2.0 if improved else 1.0, n)
        edges = _Edges(ei, n, self.local)
        col = ei[1]
        deg = scatter(w[:edges.body], col[:edges.body], 0, n, reduce="sum").view(-1, 1)
        deg = self.g.exchange.exact(deg.contiguous()).view(-1)
        if edges.tail:
            deg = deg + w[edges.body:]
        dinv = deg.pow(-0.5)
        dinv = dinv.masked_fill(dinv == float("inf"), 0)
        out = (ei, dinv[ei[0]] * w * dinv[col])
        self.memo[site] = (edge_index, edge_weight, out)
        return out

    def degree(self, index, num_nodes=None, dtype=None):
        """PyG's ``degree`` over all clones; appended loops (``index`` ending in
        ``0..N-1``) count once."""
        n = self.g.num_nodes
        if num_nodes not in (None, n) or index.dim() != 1:
            return pyg_degree(index, num_nodes, dtype)
        e = index.shape[0]
        tail = n if e >= n > 0 and torch.equal(index[e - n:], torch.arange(
            n, device=index.device)) and index.data_ptr() != self.local[1].data_ptr() else 0
        local = pyg_degree(index[:e - tail], n, dtype)  # of PyG's type for dtype
        total = self.g.exchange.exact(local.to(torch.float64).view(-1, 1).contiguous())
        return (total.view(-1) + (1 if tail else 0)).to(local.dtype)

    def softmax(self, src, index=None, ptr=None, num_nodes=None, dim=0):
        """PyG's edge ``softmax`` over all clones' in-edges (see the module docstring)."""
        if not self.stack or index is None or dim != 0:
            raise DistGNNError("softmax on a partition: only over the edges of a "
                               "message-passing call, grouped by index along dim 0")
        edges, _, module = self.stack[-1]
        n, body = edges.n, edges.body
        local, total = self.counts(edges, module, src.dtype)
        fill = [1] * (src.dim() - 1)
        peak = scatter(src[:body].detach(), index[:body], 0, n, reduce="max")
        shape = peak.shape
        peak = self.g.exchange.extreme(peak.reshape(n, -1).contiguous(), "max",
                                       (local == 0).view(-1)).view(shape)
        if edges.tail:
            peak = torch.where((total > 0).view(-1, *fill),
                               torch.maximum(peak, src[body:].detach()), src[body:].detach())
        out = (src - peak[index]).exp()
        den = scatter(out[:body], index[:body], 0, n, reduce="sum")
        den = self.g.exchange.exact(den.reshape(n, -1).contiguous()).view(shape)
        if edges.tail:
            den = den + out[body:]
        return out / (den[index] + 1e-16)

    # -- dropout
    def dropout(self, x: torch.Tensor, p: float, training: bool, what: str) -> torch.Tensor:
        if not training or not p:
            return x
        if not 0 < p < 1:
            raise DistGNNError(f"{what}: dropout probability must be in [0, 1), got {p}")
        if self.stack and x.dim() >= 1 and x.shape[0] == self.stack[-1][0].edge_index.shape[1]:
            ids = self.edge_keys(self.stack[-1][0], x.device)
        elif x.dim() >= 1 and x.shape[0] == self.g.num_nodes:
            ids = self.g.vertex_ids(x.device)
        else:
            raise DistGNNError(f"{what} on a tensor of shape {list(x.shape)}: on a partition "
                               f"dropout is keyed by vertex ({self.g.num_nodes} rows) or by "
                               "the edges of a message-passing call")
        key = dropout_key(self.g.seed, self.g.epoch, self.dropouts)
        self.dropouts += 1
        return vertex_dropout(x.reshape(x.shape[0], -1), ids, float(p), key).view_as(x)

    def edge_keys(self, edges: _Edges, device):
        if edges.keys is None:  # as Neighbourhood.edge_keys: (g_u << 32) | g_v
            gid = self.g.global_ids
            src, dst = (gid[i] for i in edges.edge_index.cpu().numpy())
            edges.keys = (src << 32) | dst
        return edges.keys if torch.device(device).type == "cpu" else \
            torch.from_numpy(edges.keys).to(device)


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Whether ``a`` and ``b`` are the same tensor, or both ``None``, or equal."""
    if a is None or b is None:
        return a is b
    return a is b or (a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b))


def _same_arguments(a: tuple[tuple, dict], b: tuple[tuple, dict]) -> bool:
    """Whether two ``(args, kwargs)`` are the same: tensors the same objects, the rest
    equal."""
    (args_a, kw_a), (args_b, kw_b) = a, b
    if len(args_a) != len(args_b) or kw_a.keys() != kw_b.keys():
        return False
    pairs = [*zip(args_a, args_b), *((kw_a[k], kw_b[k]) for k in kw_a)]
    return all(x is y if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor)
               else type(x) is type(y) and x == y for x, y in pairs)


class _Call:
    """A layer's ``propagate`` or ``edge_updater`` inside a :class:`_Pass`: the call's edges
    and exchange key pushed for its aggregation, softmax and dropouts to read."""

    def __init__(self, pass_: _Pass, module, original, aggregates: bool):
        self.pass_, self.module, self.original = pass_, module, original
        self.aggregates = aggregates

    def __call__(self, edge_index, size=None, **kwargs):
        p = self.pass_
        if not isinstance(edge_index, torch.Tensor) or edge_index.layout != torch.strided \
                or edge_index.dim() != 2:
            raise DistGNNError(f"{type(self.module).__name__}: on a partition message "
                               "passing takes an edge_index tensor [2, E]")
        key = p.calls
        p.calls += 1
        edges = p.edges(("edges", key), edge_index)
        p.stack.append((edges, key, self.module))
        try:
            if self.aggregates:
                out = p.rows_sum(self.module, key, edges, kwargs)
                if out is not None:
                    return out
            return self.original(edge_index, size=size, **kwargs)
        finally:
            p.stack.pop()


class _NarrowSAGE:
    """``SAGEConv.forward`` with the projection before a linear aggregation when it narrows
    the rows: ``lin_l(aggr(x)) = aggr(x W_l^T) + b_l`` (the same maths; fewer columns to
    gather and exchange)."""

    def __init__(self, module, original):
        self.module, self.original = module, original

    def __call__(self, x, edge_index, size=None):
        m = self.module
        if (not isinstance(x, torch.Tensor) or size is not None
                or torch.nn.parameter.is_lazy(m.lin_l.weight)
                or m.lin_l.weight.shape[0] >= m.lin_l.weight.shape[1]):
            return self.original(x, edge_index, size)
        h = F.linear(x, m.lin_l.weight)
        out = m.propagate(edge_index, x=(h, h), size=None)
        if m.lin_l.bias is not None:
            out = out + m.lin_l.bias
        if m.root_weight:
            out = out + m.lin_r(x)
        return F.normalize(out, p=2.0, dim=-1) if m.normalize else out


class _NarrowGCN:
    r"""``GCNConv.forward`` aggregating before the projection when that narrows the rows,
    ``\hat{A} (X W^T) + b = (\hat{A} X) W^T + b`` (the same maths): the layer's own forward
    runs with its ``lin`` and ``bias`` set aside, which are applied after it."""

    def __init__(self, module, original):
        self.module, self.original = module, original

    def __call__(self, x, edge_index, edge_weight=None):
        m = self.module
        w = m.lin.weight
        if torch.nn.parameter.is_lazy(w) or w.shape[0] <= w.shape[1]:
            return self.original(x, edge_index, edge_weight)
        lin, bias = m._modules["lin"], m._parameters["bias"]
        m._modules["lin"], m._parameters["bias"] = torch.nn.Identity(), None
        try:
            out = self.original(x, edge_index, edge_weight)
        finally:
            m._modules["lin"], m._parameters["bias"] = lin, bias
        if getattr(lin, "bias", None) is None:  # the bias in the product: one pass fewer
            return F.linear(out, lin.weight, bias)
        out = lin(out)
        return out if bias is None else out + bias


class _KeyedDropout(TorchFunctionMode):
    """torch's dropout in a distributed forward pass: keyed by global ids, or refused."""

    def __init__(self, pass_: _Pass):
        super().__init__()
        self.pass_ = pass_

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.dropout:
            p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
            on = args[2] if len(args) > 2 else kwargs.get("training", True)
            return self.pass_.dropout(args[0], p, on, "F.dropout")
        if func is torch.dropout:
            p = args[1] if len(args) > 1 else kwargs["p"]
            on = args[2] if len(args) > 2 else kwargs["train"]
            return self.pass_.dropout(args[0], p, on, "torch.dropout")
        if func in _OTHER_DROPOUTS:
            raise DistGNNError(f"the model calls torch's {func.__name__}: on a partition only "
                               "F.dropout is keyed by vertex; use it")
        return func(*args, **kwargs)


_OTHER_DROPOUTS = {F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout,
                   F.feature_alpha_dropout, torch.alpha_dropout, torch.feature_dropout,
                   torch.feature_alpha_dropout}


def _dispatch(original, inside):
    """``original`` outside a distributed forward pass, ``inside(pass_, ...)`` inside one."""

    def function(*args, **kwargs):
        pass_ = getattr(_active, "pass_", None)
        if pass_ is None:
            return original(*args, **kwargs)
        return inside(pass_, *args, **kwargs)

    function.__name__ = function.__qualname__ = original.__name__
    function.__doc__ = original.__doc__
    function.__wrapped__ = original
    return function


def _memoised(original):
    """``original`` (a pure function of edges) with its results kept in a distributed pass.

    A result is returned again while a call's tensors are the same objects, so that a model
    adding self-loops in every forward pass hands its layers the same edges, whose checks
    and derived graphs are then kept (:meth:`_Pass.edges`)."""
    return _dispatch(original, lambda pass_, *a, **k: pass_.memoised(original, *a, **k))


_FUNCTIONS = {pyg_gcn_norm: _dispatch(pyg_gcn_norm, _Pass.gcn_norm),
              pyg_degree: _dispatch(pyg_degree, _Pass.degree),
              pyg_softmax: _dispatch(pyg_softmax, _Pass.softmax),
              **{f: _memoised(f) for f in (pyg_add_self_loops, add_remaining_self_loops,
                                           remove_self_loops)}}


def _install_functions(model: torch.nn.Module) -> None:
    """Put the dispatching versions of :data:`_FUNCTIONS` where the model's code finds them:
    in the namespaces of its modules' classes (and their bases) and in
    ``torch_geometric.utils``.  Idempotent; outside a distributed pass they are PyG's."""
    names = {"torch_geometric.utils", "torch_geometric.nn.conv.gcn_conv"}
    for m in model.modules():
        names.update(c.__module__ for c in type(m).__mro__)
    for name in names:
        namespace = getattr(sys.modules.get(name), "__dict__", None)
        if namespace is None:
            continue
        for attr, value in list(namespace.items()):
            if callable(value) and not isinstance(value, type):
                try:
                    replacement = _FUNCTIONS.get(value)
                except TypeError:  # an unhashable callable
                    continue
                if replacement is not None:
                    namespace[attr] = replacement
