r"""A built-in GCN or GraphSAGE-gcn model run in panels and row chunks, its state on disk.

What a run under ``--memory-limit`` executes when the model's whole-graph tensors do not
fit in RAM.  The maths is :class:`~distgnn.nn.models.GNN`'s, forward and backward, for
:class:`~distgnn.nn.gcn_conv.GCNConv` and :class:`~distgnn.nn.sage_conv.SAGEConv` with the
``gcn`` aggregator (no residuals, no precomputed first aggregation): per layer ``l`` of
widths ``d_l -> d_{l+1}``, with ``S`` the layer's aggregation (its self-loop and
normalisation included, summed over clones by cd-0 on a partition),

.. math::
    \mathbf{Y}_l = \begin{cases} S(\mathbf{H}_l \mathbf{W}_l^\top) & d_{l+1} < d_l
        \text{ (project first)} \\ S(\mathbf{H}_l)\, \mathbf{W}_l^\top & \text{else}
        \end{cases}\qquad
    \mathbf{H}_{l+1} = \operatorname{dropout}_{l+1}\big(\operatorname{ReLU}(\mathbf{Y}_l +
        \mathbf{b}_l)\big),\qquad \mathbf{Z} = \mathbf{Y}_{L-1} + \mathbf{b}_{L-1}

with ``H_0 = dropout_0(X)``.  The execution differs from autograd's in where tensors live
and in what order it touches them:

- ``S`` is linear per column, so it runs as a *panel pass*: one panel of ``p`` columns
  ``[N, p]`` at a time, the whole graph in RAM (:meth:`StreamedGNN.aggregate`); its
  adjoint ``S^T`` the same way (:meth:`StreamedGNN.aggregate_adjoint`);
- the dense work (products, bias, ReLU, dropout and their gradients) is row-wise, so it
  runs as a *row pass* over chunks of ``R`` rows, and the work of two layers meets in one
  pass where it can (the epilogue of layer ``l`` and the projection of layer ``l + 1``;
  the backward of a project-first layer and the weight gradient of an aggregate-first one
  below it);
- every ``[N, d]`` matrix wider than ``resident_width`` lives in a panel-major file of the
  run's :class:`~distgnn.spill.SpillFolder`; the backward pass keeps only what it reads
  again: per aggregate-first layer its aggregate ``S(H_l)``, per project-first layer its
  input ``H_l`` (``X`` itself for the first layer, whose dropout is drawn again), and per
  hidden layer one bit per element, ``[H_{l+1} > 0]`` (``N d / 8`` bytes, in RAM).

Panels and row chunks are computed by the kernels the in-memory model calls (the layer's
own ``aggregate``, the SpMM backend, the keyed dropout and the fused bias-ReLU-dropout), so
the values are those of the in-memory run up to the order of floating-point sums (row
chunks split the weight gradients' sums; panels may take another SpMM plan).
"""
from __future__ import annotations

import copy
import dataclasses

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import DistGNNError
from ..kernels.dropout import dropout_key
from ..kernels.jit import readonly
from ..kernels.spmm import scale_rows
from ..spill import MemoryMatrix, SpillFolder, empty_aligned
from .aggregate import Neighbourhood
from .dropout import apply_dropout_mask, bias_relu_dropout_rows, relu_dropout_backward_rows
from .gcn_conv import GCNConv
from .sage_conv import SAGEConv


#: what the streamed execution runs, in the words of its refusals
STREAMABLE = ("the built-in GCN and GraphSAGE-gcn (--model gcn, or sage with --aggregator "
              "gcn; no --residual, no --precompute-first-aggregation)")


def streaming_problem(model: torch.nn.Module) -> str | None:
    """What of ``model`` the streamed execution cannot run (``None``: it can), in the words
    of a flag or a class: it runs :data:`STREAMABLE` only."""
    from .models import GNN  # deferred: models imports the layers this module imports

    if not isinstance(model, GNN):
        return f"a {type(model).__name__} model"
    sage = [c.aggr for c in model.convs if isinstance(c, SAGEConv) and c.aggr != "gcn"]
    if model.model not in ("gcn", "sage") or sage:
        return f"--model {model.model}" + (f" --aggregator {sage[0]}" if sage else "")
    for flag, on in (("--residual", model.residual),
                     ("--precompute-first-aggregation", model.precompute_first)):
        if on:
            return flag
    return None


@dataclasses.dataclass(frozen=True)
class StreamLayout:
    """How a streamed run cuts its work: panels of ``panel`` columns, row chunks of ``rows``
    rows, and matrices at most ``resident_width`` columns wide kept in RAM."""

    panel: int
    rows: int
    resident_width: int


@dataclasses.dataclass
class _Layer:
    conv: torch.nn.Module
    weight: torch.nn.Parameter  # [d_out, d_in]
    bias: torch.nn.Parameter | None
    dropout: torch.nn.Module  # the KeyedDropout before the layer

    @property
    def project_first(self) -> bool:
        return self.conv.project_first

    @property
    def d_in(self) -> int:
        return self.weight.shape[1]

    @property
    def d_out(self) -> int:
        return self.weight.shape[0]


def _layers(model) -> list[_Layer]:
    return [_Layer(conv, conv.lin.weight if isinstance(conv, GCNConv)
                   else conv.lin_neigh.weight, conv.bias, drop)
            for conv, drop in zip(model.convs, model.dropouts)]


def _tensor(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a))


class StreamedGNN:
    """``model`` run over ``nbr`` in panels and row chunks (the module docstring).

    Args:
        model: a :class:`~distgnn.nn.models.GNN` that :func:`streaming_problem` accepts.
        nbr (Neighbourhood): the graph; its ``epoch``, ``training`` and ``seed`` key the
            dropout masks, as the in-memory model's.
        features: ``X`` ``[N, F]`` in the run's type, a :class:`~distgnn.spill.DiskMatrix`
            or :class:`~distgnn.spill.MemoryMatrix`.
        folder (SpillFolder): where matrices wider than ``layout.resident_width`` go.
        layout (StreamLayout): panel width, row chunk and resident width.
    """

    def __init__(self, model, nbr: Neighbourhood, features, folder: SpillFolder,
                 layout: StreamLayout):
        problem = streaming_problem(model)
        if problem is not None:
            raise DistGNNError(f"the streamed execution runs {STREAMABLE} only, not {problem}")
        self.model, self.nbr, self.features = model, nbr, features
        self.folder, self.layout = folder, layout
        self.layers = _layers(model)
        self.dtype = features.dtype
        self.ids = nbr.global_ids
        self.names = 0

    # ---- storage -------------------------------------------------------------------------
    def matrix(self, name: str, cols: int):
        """A new ``[N, cols]`` matrix: in RAM when at most ``resident_width`` wide, else on
        disk."""
        self.names += 1
        if cols <= self.layout.resident_width:
            return MemoryMatrix(self.nbr.num_nodes, cols, self.dtype, self.layout.panel)
        return self.folder.matrix(f"{self.names:03d}-{name}", self.nbr.num_nodes, cols,
                                  self.dtype, self.layout.panel)

    def chunks(self) -> list[tuple[int, int]]:
        n, r = self.nbr.num_nodes, self.layout.rows
        return [(r0, min(n, r0 + r)) for r0 in range(0, n, r)] or [(0, 0)]

    def row_pass(self, inputs: list, work) -> None:
        """``work(r0, r1, *rows)`` for each row chunk, the rows of ``inputs`` read ahead."""
        chunks = self.chunks()
        folder = self.folder

        def load(r0, r1):
            return [m.read_rows(r0, r1) for m in inputs]

        pending = folder.read_ahead(lambda: load(*chunks[0]))
        for i, (r0, r1) in enumerate(chunks):
            rows = folder.wait(pending)
            if i + 1 < len(chunks):
                pending = folder.read_ahead(lambda c=chunks[i + 1]: load(*c))
            work(r0, r1, *rows)
        folder.flush()

    def write_rows(self, matrix, r0: int, values: np.ndarray) -> None:
        self.folder.write_behind(lambda: matrix.write_rows(r0, values))

    def panel_pass(self, source, out, transform) -> None:
        """``out``'s panel ``j`` = ``transform(j, source's panel j)`` for every panel, the
        next panel read while one is transformed, each written behind."""
        folder = self.folder
        pending = folder.read_ahead(lambda: source.read_panel(0))
        for j in range(source.panels):
            panel = folder.wait(pending)
            if j + 1 < source.panels:
                pending = folder.read_ahead(lambda j=j: source.read_panel(j + 1))
            result = transform(j, panel)
            folder.write_behind(lambda j=j, r=result: out.write_panel(j, r))
        folder.flush()

    # ---- the pieces ----------------------------------------------------------------------
    def dropout_key(self, layer: _Layer) -> tuple[float, int]:
        """``(p, key)`` of the dropout before ``layer`` in this pass (``p = 0``: none)."""
        p = layer.dropout.p if self.nbr.training else 0.0
        return p, (dropout_key(self.nbr.seed, self.nbr.epoch, layer.dropout.key) if p else 0)

    def view(self, layer: _Layer) -> Neighbourhood:
        """The neighbourhood a panel is aggregated through: sums over clones exact (cd-0)."""
        view = copy.copy(self.nbr)
        view.training, view.key = False, layer.conv.key if layer.conv.key is not None else 0
        return view

    def aggregate(self, layer: _Layer, source, out, dropout: tuple[float, int] = (0.0, 0)
                  ) -> None:
        """``out = S(dropout(source))``, one panel at a time (the layer's ``aggregate``)."""
        view, (p, key) = self.view(layer), dropout

        def transform(j, panel):
            if p:
                panel = apply_dropout_mask(panel, self.ids, p, key, source.cols,
                                           source.columns(j)[0])
            return layer.conv.aggregate(view, torch.from_numpy(panel)).numpy()

        self.panel_pass(source, out, transform)

    def aggregate_adjoint(self, layer: _Layer, grad, out) -> None:
        r"""``out = S^T grad``, one panel at a time.

        GCN's ``S z = c \odot (A (c \odot z) + c \odot z)`` with ``c = (d + 1)^{-1/2}``, and
        GraphSAGE-gcn's ``S z = (A z + z) / (d + 1)``: the adjoint scales the gradient's
        rows, sums them over clones, multiplies by ``A^T`` (the backend's transposed SpMM)
        and adds the self-loop's term, as autograd does through the same kernels."""
        nbr = self.nbr
        gcn = isinstance(layer.conv, GCNConv)
        c = ((nbr.degree + 1).rsqrt() if gcn else nbr.degree + 1).contiguous().view(-1)
        c = readonly(c.numpy())

        def transform(j, panel):
            u = empty_aligned(panel.shape, panel.dtype)
            scale_rows(readonly(panel), c, not gcn, u)
            t = empty_aligned(u.shape, u.dtype)  # the exchange sums in place; u stays
            t[...] = u
            t = nbr.exchange.exact(torch.from_numpy(t))
            with nbr.timer("aggregation_backward"):
                s = nbr.backend.spmm_backward(nbr.graph, t.contiguous(), "sum", None)
            s = s.numpy()
            np.add(s, u, out=s)
            if gcn:
                np.multiply(s, c[:, None], out=s)
            return s

        self.panel_pass(grad, out, transform)

    # ---- forward -------------------------------------------------------------------------
    def forward(self, keep: bool, embeddings: int | None = None):
        """``(logits [N, C] tensor, tape, embeddings)``.

        ``keep``: keep what the backward pass reads (the tape), else free each matrix once
        read; ``embeddings``: the index of the layer whose input to return as an
        ``[N, d]`` tensor (``None``: none)."""
        layers, n = self.layers, self.nbr.num_nodes
        tape: list[dict] = []
        h, z, captured = self.features, None, None
        for l, layer in enumerate(layers):
            saved: dict = {}
            last = l == len(layers) - 1
            if embeddings == l:
                captured = self.embedding(h)
            if layer.project_first:
                if z is None:  # the first layer: project the features in a row pass
                    z = self.matrix("z", layer.d_out)
                    p, key = self.dropout_key(layer)

                    def project(r0, r1, x, z=z, p=p, key=key, layer=layer):
                        if p:
                            x = apply_dropout_mask(x, self.ids[r0:r1], p, key)
                        self.write_rows(z, r0, F.linear(_tensor(x), layer.weight).numpy())

                    with torch.no_grad():
                        self.row_pass([h], project)
                saved["input"] = h
                y = self.matrix("y", layer.d_out)
                with torch.no_grad():
                    self.aggregate(layer, z, y)
                z.close()
                source = y
            else:
                source = self.matrix("a", layer.d_in)
                with torch.no_grad():
                    self.aggregate(layer, h, source,
                                   self.dropout_key(layer) if l == 0 else (0.0, 0))
                saved["aggregate"] = source
                if h is not self.features:
                    h.close()
            if last:
                logits = MemoryMatrix(n, layer.d_out, self.dtype, self.layout.panel)
                with torch.no_grad():
                    self.row_pass([source], lambda r0, r1, s: logits.write_rows(
                        r0, self.output_rows(layer, s).numpy()))
                if not keep or layer.project_first:
                    source.close()
                tape.append(saved)
                return torch.from_numpy(logits.array), tape, captured
            h, z = self.epilogue(l, source, saved, keep, embeddings == l + 1)
            if not keep or layer.project_first:
                source.close()
            tape.append(saved)

    def output_rows(self, layer: _Layer, s: np.ndarray) -> torch.Tensor:
        """The last layer's logits from rows of its aggregate (or of its projection's)."""
        if layer.project_first:
            out = _tensor(s)
            return out if layer.bias is None else out + layer.bias
        return F.linear(_tensor(s), layer.weight, layer.bias)

    def epilogue(self, l: int, source, saved: dict, keep: bool, capture: bool = False):
        """The row pass after hidden layer ``l``: ``H_{l+1}`` and the next projection.

        That is ``H_{l+1}`` and, when layer ``l + 1`` projects first, its projection ``Z``.
        ``H_{l+1}`` is written when layer ``l + 1`` aggregates it, and with ``keep`` when the
        backward pass cannot make it again; it can (and the ReLU's bits are not kept) when
        layer ``l + 1`` projects first and layer ``l`` aggregates first: the backward pass
        reads ``S(H_l)`` then anyway, and one product and the fused epilogue cost less
        than writing and reading ``H_{l+1}``.  Else the bits go into ``saved``.
        ``capture``: write ``H_{l+1}`` in any case (the embeddings asked for)."""
        layer, nxt = self.layers[l], self.layers[l + 1]
        remade = self.remade(l + 1)
        bits = (None if remade else
                np.empty((self.nbr.num_nodes, (layer.d_out + 7) // 8), np.uint8))
        h = (self.matrix("h", layer.d_out)
             if (keep and not remade) or not nxt.project_first or capture else None)
        z = self.matrix("z", nxt.d_out) if nxt.project_first else None

        def work(r0, r1, s):
            out, kept = self.hidden_rows(l, s, r0, r1)
            if bits is not None:
                bits[r0:r1] = kept
            if h is not None:
                self.write_rows(h, r0, out)
            if z is not None:
                self.write_rows(z, r0, F.linear(_tensor(out), nxt.weight).numpy())

        with torch.no_grad():
            self.row_pass([source], work)
        saved["bits"] = bits
        return h, z

    def remade(self, l: int) -> bool:
        """Whether the backward pass makes layer ``l``'s input again from the aggregate of
        the layer below (see :meth:`epilogue`) instead of reading it."""
        return 0 < l and self.layers[l].project_first and not self.layers[l - 1].project_first

    def hidden_rows(self, l: int, s: np.ndarray, r0: int, r1: int
                    ) -> tuple[np.ndarray, np.ndarray]:
        """``(H_{l+1}, bits)`` of rows ``[r0, r1)`` from rows ``s`` of hidden layer ``l``'s
        aggregate (or, projecting first, of its output): the product, then the bias, ReLU
        and next dropout in one pass."""
        layer = self.layers[l]
        p, key = self.dropout_key(self.layers[l + 1])
        bias = (np.zeros(layer.d_out, self.dtype) if layer.bias is None
                else layer.bias.detach().numpy())
        y = s if layer.project_first else F.linear(_tensor(s), layer.weight).numpy()
        return bias_relu_dropout_rows(np.ascontiguousarray(y), bias, self.ids[r0:r1], p, key)

    def embedding(self, h) -> torch.Tensor:
        """The whole matrix ``h`` as a tensor."""
        out = np.empty((h.rows, h.cols), self.dtype)

        def take(r0, r1, x):
            out[r0:r1] = x

        self.row_pass([h], take)
        return torch.from_numpy(out)

    # ---- backward ------------------------------------------------------------------------
    def backward(self, tape: list[dict], grad_logits: torch.Tensor) -> None:
        """Add to each weight's and bias's ``.grad`` the gradient of the loss whose gradient
        with respect to the logits is ``grad_logits`` ``[N, C]``; frees the tape's matrices."""
        layers = self.layers
        grads = {id(p): torch.zeros_like(p) for layer in layers
                 for p in (layer.weight, layer.bias) if p is not None}
        last = layers[-1]
        if last.bias is not None:
            grads[id(last.bias)] += grad_logits.sum(0)
        g = MemoryMatrix(self.nbr.num_nodes, last.d_out, self.dtype, self.layout.panel)
        g.array = grad_logits.detach().numpy()
        done = set()  # aggregate-first layers whose row work a pass above them did
        with torch.no_grad():
            for l in reversed(range(len(layers))):
                layer = layers[l]
                if layer.project_first:
                    gz = self.matrix("gz", layer.d_out)
                    self.aggregate_adjoint(layer, g, gz)
                    g.close()
                    g = self.project_first_rows(l, tape, gz, grads, done)
                    gz.close()
                    continue
                if l not in done:
                    ga = self.matrix("ga", layer.d_in) if l else None
                    self.row_pass([g, tape[l]["aggregate"]], lambda r0, r1, gy, a, l=l, ga=ga:
                                  self.aggregate_first_rows(l, r0, gy, a, ga, grads))
                    g.close()
                    g = ga
                tape[l]["aggregate"].close()
                if l == 0:
                    break
                gh = self.matrix("gh", layer.d_in)
                self.aggregate_adjoint(layer, g, gh)
                g.close()
                g = self.below_rows(l, tape, gh, grads, done)
                gh.close()
        for layer in layers:
            for p in (layer.weight, layer.bias):
                if p is not None:
                    p.grad = grads[id(p)] if p.grad is None else p.grad + grads[id(p)]

    def aggregate_first_rows(self, l: int, r0: int, gy: np.ndarray, a: np.ndarray, ga,
                             grads: dict) -> None:
        """Rows of an aggregate-first layer ``l``: ``dW += gy^T a``, and (``ga``: the layer
        has a layer below) ``ga = gy W``."""
        layer = self.layers[l]
        gy_t = _tensor(gy)
        grads[id(layer.weight)].addmm_(gy_t.t(), _tensor(a))
        if ga is not None:
            self.write_rows(ga, r0, (gy_t @ layer.weight).numpy())

    def into_layer_below(self, l: int, r0: int, gh: np.ndarray, bits: np.ndarray,
                         below_rows: list, out, grads: dict) -> None:
        """Rows of the gradient of layer ``l``'s input taken into layer ``l - 1``.

        Rows ``[r0, ..)`` of ``gh``, the gradient of layer ``l``'s input, go through the
        ReLU and dropout before it (``bits``: its rows' bits) to layer ``l - 1``'s output;
        then layer ``l - 1``'s row work when it aggregates first (``below_rows``: its
        aggregate's rows), else the rows are written to ``out``."""
        below = self.layers[l - 1]
        p = self.layers[l].dropout.p if self.nbr.training else 0.0
        gy, gb = relu_dropout_backward_rows(np.ascontiguousarray(gh), bits, p, self.dtype)
        if below.bias is not None:
            grads[id(below.bias)] += torch.from_numpy(gb)
        if below.project_first:
            self.write_rows(out, r0, gy)
        else:
            self.aggregate_first_rows(l - 1, r0, gy, below_rows[0], out, grads)

    def below_output(self, l: int):
        """What layer ``l``'s row pass writes for the layer below: its output's gradient
        (project-first below), the gradient of its aggregate (aggregate-first below with a
        layer under it), or nothing."""
        below = self.layers[l - 1]
        if below.project_first:
            return self.matrix("gy", below.d_out)
        return self.matrix("ga", below.d_in) if l - 1 else None

    def below_inputs(self, l: int, tape: list[dict]) -> list:
        below = self.layers[l - 1]
        return [] if below.project_first else [tape[l - 1]["aggregate"]]

    def project_first_rows(self, l: int, tape: list[dict], gz, grads: dict, done: set):
        """The backward row pass of project-first layer ``l``, and into the layer below.

        From ``gz = S^T g``: ``dW += gz^T H_l`` and, below it, the gradient taken into layer
        ``l - 1``; returns that layer's incoming gradient matrix (or ``None``).  ``H_l`` is
        read, or made again from the aggregate below (:meth:`remade`)."""
        layer = self.layers[l]
        h = tape[l]["input"]
        remade = self.remade(l)
        p, key = self.dropout_key(layer) if l == 0 else (0.0, 0)
        out = self.below_output(l) if l else None
        extra = self.below_inputs(l, tape) if l else []

        def work(r0, r1, gzr, *rows):
            if remade:
                x, bits = self.hidden_rows(l - 1, rows[0], r0, r1)
            else:
                x, rows = rows[0], rows[1:]
                bits = tape[l - 1]["bits"][r0:r1] if l else None
            if p:
                x = apply_dropout_mask(x, self.ids[r0:r1], p, key)
            gz_t = _tensor(gzr)
            grads[id(layer.weight)].addmm_(gz_t.t(), _tensor(x))
            if l:
                self.into_layer_below(l, r0, (gz_t @ layer.weight).numpy(), bits, list(rows),
                                      out, grads)

        self.row_pass([gz, *([] if remade else [h]), *extra], work)
        if h is not None and h is not self.features:
            h.close()
        if l and not self.layers[l - 1].project_first:
            done.add(l - 1)
        return out

    def below_rows(self, l: int, tape: list[dict], gh, grads: dict, done: set):
        """The row pass after aggregate-first layer ``l``'s adjoint: ``gh`` taken into layer
        ``l - 1``; returns that layer's incoming gradient matrix (or ``None``)."""
        out = self.below_output(l)
        extra = self.below_inputs(l, tape)
        bits = tape[l - 1]["bits"]
        self.row_pass([gh, *extra], lambda r0, r1, ghr, *below: self.into_layer_below(
            l, r0, ghr, bits[r0:r1], list(below), out, grads))
        if not self.layers[l - 1].project_first:
            done.add(l - 1)
        return out


def schedule_bytes(model, resident_width: int, dtype=np.float32) -> dict[str, int]:
    """Per vertex: the disk traffic, disk and RAM bits of one streamed training epoch.

    The bytes one training epoch of :class:`StreamedGNN` reads and writes on disk
    (``read``, ``written``), the most its files hold at once besides the features
    (``disk``) and the ReLU bits it keeps in RAM (``bits``), for ``model``'s widths with
    matrices at most ``resident_width`` wide in RAM.

    Every matrix is ``[N, d]`` and every pass reads or writes whole matrices, so these are
    exactly linear in ``N``: measured here by running the epoch on a graph of one vertex
    (the schedule itself, not a description of it)."""
    import tempfile

    from ..data.graph import CSRGraph
    from .backends import get_backend

    graph = CSRGraph(np.zeros(2, np.int64), np.zeros(0, np.int32), 1)
    nbr = Neighbourhood(graph, get_backend("numba", "fp32", False),
                        dtype=getattr(torch, np.dtype(dtype).name))
    nbr.set_epoch(0)
    width = _layers(model)[0].d_in
    with tempfile.TemporaryDirectory(prefix="distgnn-plan-") as where:
        folder = SpillFolder(where)
        try:
            features = folder.matrix("x", 1, width, dtype, 1)
            features.write_rows(0, np.zeros((1, width), dtype))
            base = folder.bytes_written
            run = StreamedGNN(model, nbr, features, folder, StreamLayout(1, 1, resident_width))
            logits, tape, _ = run.forward(True)
            bits = sum(t["bits"].nbytes for t in tape if t.get("bits") is not None)
            run.backward(tape, torch.zeros_like(logits))
            return {"read": folder.bytes_read, "written": folder.bytes_written - base,
                    "disk": folder.peak_bytes - features.nbytes, "bits": bits}
        finally:
            folder.close()
