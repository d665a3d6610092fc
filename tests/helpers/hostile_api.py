"""Hostile uses of the Python API (class 14) and of ``examples/own_model.py`` (class 15).

Each API case runs a snippet in a process of its own (a kernel that reads out of bounds may
end it): the snippet builds a small graph through the public API, makes one call, and
turns only the library's own error (:class:`~distgnn.errors.DistGNNError`) into one line
and exit status 2.  A call that returns, NaNs included, exits 0; a crash, an ``IndexError``
or a Numba error shows as itself: each fails a case that expects status 2.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.hostile import (
    Case,
    Outcome,
    both,
    data,
    partition,
    tool,
    user_file,
    write_npz,
)

PRELUDE = """\
import sys
import numpy as np
import torch
from distgnn.nn.aggregate import Neighbourhood
from distgnn.nn.backends import get_backend
from distgnn.errors import DistGNNError
from distgnn.data.graph import CSRGraph
from distgnn.nn import MLP, GATConv, GCN2Conv, GCNConv, GINConv, KeyedDropout

rng = np.random.default_rng(0)


def graph(n):
    return CSRGraph.from_edges(rng.integers(0, n, 4 * n), rng.integers(0, n, 4 * n), n)


g = graph(30)
nbr = Neighbourhood(g, get_backend("numba"))
nbr.set_epoch(0)
"""


def api(body: str):
    """The snippet ``body`` (which sets ``out``) after :data:`PRELUDE`: exit 2 with the
    library's one line, or exit 0 saying what came back."""
    code = (PRELUDE + "try:\n" + textwrap.indent(textwrap.dedent(body), "    ")
            + "except DistGNNError as e:\n    print(e, file=sys.stderr)\n    sys.exit(2)\n"
            + "print('returned', tuple(out.shape), 'with NaN' if torch.isnan(out).any() "
              "else 'without NaN')\n")
    return lambda tmp, run: run.python(code)


def on_ranks(ranks: int, code: str, *argv):
    """``code`` (``"{root}"``: the tree under test) run by ``ranks`` MPI ranks with ``argv``
    (``"{tmp}"``: the case directory)."""
    return lambda tmp, run: run.mpi_python(ranks, code.replace("{root}", str(run.root)),
                                           [str(a).replace("{tmp}", str(tmp)) for a in argv])


CASES: list[Case] = []
add = CASES.append

# 14. the Python API fed the wrong shapes or graph
for name, body, says in [
        ("Neighbourhood.reduce on 20 rows of 30 vertices (numba)",
         "out = nbr.reduce(torch.rand(20, 8), 'sum')\n", "expected [30, d]"),
        ("Neighbourhood.reduce on 20 rows of 30 vertices (torch)",
         "out = Neighbourhood(g, get_backend('torch')).reduce(torch.rand(20, 8), 'max')\n",
         "expected [30, d]"),
        ("GINConv on 20 rows of 30 vertices",
         "out = GINConv(MLP(8, 4, 4))(nbr, torch.rand(20, 8))\n", "expected [30, 8]"),
        ("GATConv on 20 rows of 30 vertices",
         "out = GATConv(8, 4, heads=2)(nbr, torch.rand(20, 8))\n",
         "expected [30, 8]"),
        ("GATConv on another graph's neighbourhood",
         "other = Neighbourhood(graph(3000), get_backend('numba'))\n"
         "out = GATConv(8, 4, heads=2)(other, torch.rand(30, 8))\n",
         "expected [3000, 8]"),
        ("GCNConv on features 5 wide for in_channels 8",
         "out = GCNConv(8, 4)(nbr, torch.rand(30, 5))\n", "expected [30, 8]"),
        ("GCNConv on float64 features with float32 weights",
         "out = GCNConv(8, 4)(nbr, torch.rand(30, 8, dtype=torch.float64))\n",
         "dtype torch.float64"),
        ("three-dimensional features", "out = nbr.reduce(torch.rand(30, 2, 4), 'sum')\n",
         "expected [30, d]"),
        ("integer features through the numba kernels",
         "out = nbr.reduce(torch.ones(30, 8, dtype=torch.int64), 'sum')\n",
         "dtype torch.int64"),
        ("edge weights shorter than the edges",
         "g.edge_weight = np.ones(5, np.float32)\nout = nbr.reduce(torch.rand(30, 8), 'sum')\n",
         "edge_weight"),
        ("GATConv with one head's attention vector for two heads",
         "conv = GATConv(8, 4, heads=2)\n"
         "conv.att_src = torch.nn.Parameter(torch.rand(1, 1, 4))\n"
         "out = conv(nbr, torch.rand(30, 8))\n", "att_src"),
        ("KeyedDropout on 3000 rows of 30 vertices",
         "out = KeyedDropout(0.5)(nbr, torch.rand(3000, 8), key=0)\n",
         "expected [30, d]"),
        ("KeyedDropout with p 1.5",
         "out = KeyedDropout(1.5)(nbr, torch.rand(30, 8))\n", "[0, 1)"),
        ("global ids shorter than the graph",
         "short = Neighbourhood(g, get_backend('numba'), global_ids=np.arange(10))\n"
         "out = KeyedDropout(0.5)(short, torch.rand(30, 8), key=0)\n",
         "global_ids")]:
    add(Case(14, name, api(body), says=says))

SHARED_INDEX = """\
import sys
from torch import nn
import distgnn
from distgnn.run.distributed import run_rank
from distgnn.nn import GCNConv


class SharedKey(nn.Module):
    \"\"\"Two layers aggregating as wide (so one delayed state fits both) on key 0.\"\"\"

    def __init__(self, features, classes):
        super().__init__()
        self.first, self.second = GCNConv(features, features), GCNConv(features, features)
        self.readout = nn.Linear(features, classes)

    def forward(self, g, x):
        return self.readout(self.second(g, self.first(g, x, key=0).relu(), key=0))


config = distgnn.TrainConfig(algo="cd-r", delay=2, epochs=3, threads=1, progress=False)
sys.exit(run_rank("shared", lambda: distgnn.train(sys.argv[1], config, SharedKey) and 0))
"""
add(Case(14, "two layers on one key under cd-r (2 ranks)", on_ranks(2, SHARED_INDEX, "{tmp}/p"),
         both(data(n=200), lambda t, r: partition(r, t / "d.npz", 2, t / "p")),
         says="both use key 0", lines=2))

TORCH_DROPOUT = """\
import sys
import torch.nn.functional as F
from torch import nn
import distgnn
from distgnn.run.distributed import run_rank
from distgnn.nn import GCNConv


class PlainDropout(nn.Module):
    def __init__(self, features, classes):
        super().__init__()
        self.conv = GCNConv(features, classes)

    def forward(self, g, x):
        return self.conv(g, F.dropout(x, 0.5, self.training))


config = distgnn.TrainConfig(epochs=3, threads=1, progress=False)
sys.exit(run_rank("plain", lambda: distgnn.train(sys.argv[1], config, PlainDropout) and 0))
"""
add(Case(14, "F.dropout in a model trained on partitions under cd-0 (2 ranks)",
         on_ranks(2, TORCH_DROPOUT, "{tmp}/p"),
         both(data(n=200), lambda t, r: partition(r, t / "d.npz", 2, t / "p")),
         says="KeyedDropout", lines=2))


# 15. a traceback or crash on bad input: examples/own_model.py
def example(*argv):
    return lambda tmp, run: run.example("own_model.py", [str(a).replace("{tmp}", str(tmp))
                                                         for a in argv])


for name, argv, says in [
        ("--epochs 0", ("--dataset", "{tmp}/d.npz", "--epochs", 0), "--epochs"),
        ("--dropout 1.5", ("--dataset", "{tmp}/d.npz", "--dropout", 1.5), "--dropout"),
        ("--dropout nan", ("--dataset", "{tmp}/d.npz", "--dropout", "nan"), "--dropout"),
        ("--epochs abc", ("--dataset", "{tmp}/d.npz", "--epochs", "abc"), "--epochs"),
        ("neither --dataset nor --partitions", ("--epochs", 2), "--dataset"),
        ("a missing dataset", ("--dataset", "{tmp}/absent.npz", "--epochs", 2), "absent.npz"),
        ("--metrics-out in a missing folder",
         ("--dataset", "{tmp}/d.npz", "--metrics-out", "{tmp}/no/m.jsonl"), "does not exist")]:
    add(Case(15, f"own_model.py {name}", example(*argv), data(), says=says))
add(Case(15, "own_model.py --metrics-out onto a user's notes",
         example("--dataset", "{tmp}/d.npz", "--epochs", 2, "--metrics-out", "{tmp}/notes.txt"),
         both(data(), user_file("notes.txt")), says="notes.txt", keep=("notes.txt",)))
add(Case(15, "own_model.py on a file that is not a dataset",
         example("--dataset", "{tmp}/notes.txt", "--epochs", 2), user_file("notes.txt"),
         says="notes.txt", keep=("notes.txt",)))
for split in ("val", "test"):  # trains, then reports what there is
    add(Case(15, f"own_model.py on data without {split} vertices",
             example("--dataset", "{tmp}/d.npz", "--epochs", 2),
             data(**{f"{split}_mask": np.zeros(60, bool)}), status=0))
add(Case(15, "own_model.py --dropout 1.5 on 2 ranks",
         on_ranks(2, "import runpy, sys; sys.argv[0] = 'own_model.py'; "
                     "runpy.run_path('{root}/examples/own_model.py', run_name='__main__')",
                  "--partitions", "{tmp}/p", "--dropout", 1.5),
         both(data(n=200), lambda t, r: partition(r, t / "d.npz", 2, t / "p")),
         says="--dropout"))


# 21. the memory check refuses a run that fits: the default cd-r's state, predicted per rank
# on real graphs with wide features, must not count widths that no exchange carries
MEMORY = """\
import sys
from distgnn.run import memory
from distgnn.run.config import TrainConfig
from distgnn.exchange import SplitIndex
from distgnn.data.partitions import load
parts = lambda cfg: (cfg.network, cfg.exchange, cfg.execution)
for p in range(4):
    part = load(sys.argv[1], p)
    index = SplitIndex.from_partition(part)
    sizes = (part.num_nodes, part.graph.num_edges, part.x.shape[1],
             int(part.meta["num_classes"]), len(index.leaf_ids) + len(index.root_ids))
    exact = memory.predict(*parts(TrainConfig()), *sizes)["total"]
    delayed = memory.predict(*parts(TrainConfig(algo="cd-r")), *sizes)["total"]
    if delayed > 1.05 * exact:
        print(f"rank {p}: the default cd-r is predicted at {delayed / exact:.2f}x cd-0's "
              f"{exact / 2**20:.0f} MiB", file=sys.stderr)
        sys.exit(2)
print("within 5 % of cd-0 on every rank")
"""
# the real datasets beside the checkout (tests/test_datasets.py reads them too)
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"


def real_partitions(name: str):
    def setup(tmp, run):
        path = SHARED / f"{name}.npz"
        if not path.exists():
            pytest.skip(f"{path} not found (the real datasets beside the checkout)")
        partition(run, path, 4, tmp / "p")
    return setup


for name in ("citeseer", "cora_ml", "squirrel_filtered", "chameleon_filtered", "actor"):
    add(Case(21, f"the default cd-r on 4 partitions of {name}",
             lambda tmp, run: run.python("import sys; sys.argv = ['m', " + repr(str(tmp / 'p'))
                                         + "]\n" + MEMORY),
             real_partitions(name), status=0))
add(Case(21, "the default cd-r on 4 partitions of 4,735 features",
         lambda tmp, run: run.python("import sys; sys.argv = ['m', " + repr(str(tmp / 'p'))
                                     + "]\n" + MEMORY),
         both(data(n=1500, features=4735), lambda t, r: partition(r, t / "d.npz", 4, t / "p")),
         status=0))


# 23. inference from Python and for one's own models
def wrote(rel: str):
    def check(tmp, outcome):
        assert (tmp / rel).is_file(), f"no {rel}"
    return check


def own_model_saved(tmp, run):
    got = run.example("own_model.py", ["--dataset", "cora", "--epochs", 2, "--save-model",
                                       tmp / "own.pt"])
    assert got.status == 0, got.stderr


add(Case(23, "distgnn-predict on a model of one's own with --model-factory",
         lambda tmp, run: run("predict", [tmp / "own.pt", "--dataset", "cora",
                                          "--predictions-out", tmp / "p.csv",
                                          "--model-factory",
                                          f"{run.root}/examples/own_model.py:make_model"]),
         own_model_saved, status=0, check=wrote("p.csv")))
for name, factory, says in [
        ("--model-factory without a function", "own_model", "MODULE:FUNCTION"),
        ("--model-factory naming no module", "no_such_module:make", "cannot import"),
        ("--model-factory naming no function", "{root}/examples/own_model.py:nothing",
         "has no function nothing"),
        ("--model-factory naming a class attribute that is not callable",
         "{root}/examples/own_model.py:PROG", "has no function PROG")]:
    add(Case(23, name, lambda tmp, run, factory=factory: run(
        "predict", [tmp / "own.pt", "--dataset", "cora", "--model-factory",
                    factory.replace("{root}", str(run.root))]),
        own_model_saved, says=says))

TRAINED = """\
import sys
import numpy as np
import distgnn
quiet = lambda line: None
cfg = distgnn.TrainConfig(epochs=2, progress=False, save_model=sys.argv[1])
"""


def python_api(body: str):
    """``body`` after :data:`TRAINED`, the library's errors as one line and exit 2."""
    code = (TRAINED + "try:\n" + textwrap.indent(textwrap.dedent(body), "    ")
            + "except distgnn.DistGNNError as e:\n    print(e, file=sys.stderr)\n"
              "    sys.exit(2)\n")
    return lambda tmp, run: run.python("import sys; sys.argv = ['t', "
                                       + repr(str(tmp / "m.pt")) + "]\n" + code)


add(Case(23, "distgnn.predict returns ids, probabilities, classes and embeddings",
         python_api("""
             distgnn.train("cora", cfg, log=quiet)
             p = distgnn.predict(sys.argv[1], "cora", with_embeddings=True, log=quiet)
             assert p.vertex.tolist() == list(range(2708)), p.vertex[:5]
             assert p.probabilities.shape == (2708, 7)
             assert np.allclose(p.probabilities.sum(1), 1, atol=1e-5)
             assert (p.predicted_class == p.probabilities.argmax(1)).all()
             assert p.embeddings.shape == (2708, 16)
             """), status=0))
for name, make, says in [
        ("make_model with one class too many",
         "lambda f, c: distgnn.nn.gcn_conv.GCNConv(f, c + 1)", "expected [2708, 7]"),
        ("make_model returning a tuple",
         "lambda f, c: Pair(f, c)", "returned a tuple"),
        ("make_model returning a row too few",
         "lambda f, c: Short(f, c)", "expected [2708, 7]")]:
    add(Case(23, name, python_api(f"""
             import torch
             import distgnn.nn
             class Pair(torch.nn.Module):
                 def __init__(self, f, c):
                     super().__init__(); self.conv = distgnn.nn.gcn_conv.GCNConv(f, c)
                 def forward(self, g, x):
                     out = self.conv(g, x)
                     return out, out
             class Short(Pair):
                 def forward(self, g, x):
                     return self.conv(g, x)[:-1]
             distgnn.train("cora", cfg, {make}, log=quiet)
             """), says=says))
add(Case(23, "distgnn.train given a PyTorch Geometric Data", python_api("""
             from torch_geometric.data import Data
             import torch
             distgnn.train(Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2), cfg)
             """), says="distgnn.from_pyg(data)"))
add(Case(23, "distgnn.from_pyg given a list", python_api("""
             distgnn.from_pyg([[0, 1], [1, 0]])
             """), says="is not a graph"))
add(Case(23, "distgnn.train given a numpy array", python_api("""
             distgnn.train(np.zeros((4, 4)), cfg)
             """), says="source must be a dataset name"))

PREDICT_ON_RANKS = """\
import sys
sys.path.insert(0, "{root}")
import numpy as np
from mpi4py import MPI
import distgnn
p = distgnn.predict(sys.argv[1], sys.argv[2], with_embeddings=True, log=lambda line: None)
every = MPI.COMM_WORLD.gather(p.vertex, root=0)
if MPI.COMM_WORLD.rank == 0:
    ids = np.concatenate(every)
    assert sorted(ids.tolist()) == list(range(60)), "not every vertex exactly once"
    print("each vertex on one rank")
assert len(p.vertex) == len(p.probabilities) == len(p.embeddings)
"""


def model_and_partitions(tmp, run):
    write_npz(tmp / "d.npz")
    got = run("train", ["--dataset", tmp / "d.npz", "--save-model", tmp / "m.pt",
                        "--epochs", 2, "--no-progress", "--threads", 1])
    assert got.status == 0, got.stderr
    partition(run, tmp / "d.npz", 2, tmp / "p")


add(Case(23, "distgnn.predict on partitions returns each vertex on one rank",
         on_ranks(2, PREDICT_ON_RANKS, "{tmp}/m.pt", "{tmp}/p"), model_and_partitions,
         status=0))


# 25. silently wrong: a model trained on partitions whose ranks compute differently, an
# argument dropped, edge weights unread without a word
PYG_ON_RANKS = """\
import sys
import torch
import torch.nn.functional as F
from torch import nn
import torch_geometric.nn as gnn
from torch_geometric.utils import dropout_edge
import distgnn
import distgnn.pyg
from distgnn.run.distributed import run_rank
from distgnn.nn import GCNConv


class Noisy(nn.Module):
    def __init__(self, features, classes):
        super().__init__()
        self.conv = gnn.GCNConv(features, classes)

    def forward(self, x, edge_index):
        if self.training:
            x = x + 0.1 * torch.randn_like(x)
        return self.conv(x, edge_index)


class DropEdge(Noisy):
    def forward(self, x, edge_index):
        edge_index, _ = dropout_edge(edge_index, p=0.3, training=self.training)
        return self.conv(x, edge_index)


class Centred(Noisy):
    def __init__(self, features, classes):
        super().__init__(features, classes)
        self.register_buffer("centre", torch.zeros(features))

    def forward(self, x, edge_index):
        if self.training:
            self.centre = x.mean(0)  # of this rank's vertices only
        return self.conv(x - self.centre, edge_index)


class RowMask(nn.Module):
    def __init__(self, features, classes):
        super().__init__()
        self.conv = GCNConv(features, classes)

    def forward(self, g, x):
        keep = (torch.rand(x.shape[0], 1) > 0.2).to(x.dtype)
        return self.conv(g, x * keep)


model = {"Noisy": Noisy, "DropEdge": DropEdge, "Centred": Centred}.get(sys.argv[2])
make = (lambda f, c: distgnn.pyg.distribute(model(f, c))) if model else RowMask
config = distgnn.TrainConfig(epochs=2, threads=1, progress=False)
sys.exit(run_rank("pyg", lambda: distgnn.train(sys.argv[1], config, make) and 0))
"""
for name, model, says in [
        ("a PyG model adding torch.randn_like noise", "Noisy", "random number generator"),
        ("a PyG model calling dropout_edge", "DropEdge", "in place of dropout_edge"),
        ("a model of one's own masking rows with torch.rand", "RowMask", "KeyedDropout"),
        ("a PyG model keeping its rank's mean features in a buffer", "Centred",
         "buffer centre differs between ranks")]:
    add(Case(25, f"{name}, on 2 ranks", on_ranks(2, PYG_ON_RANKS, "{tmp}/p", model),
             both(data(n=200), lambda t, r: partition(r, t / "d.npz", 2, t / "p")),
             says=says, lines=2))

PYG_MODELS = """
import torch
import torch.nn.functional as F
from torch import nn
import torch_geometric.nn as gnn
import distgnn.pyg


class Net(nn.Module):
    def __init__(self, f=8, c=3):
        super().__init__()
        self.conv = gnn.GCNConv(f, c)

    def forward(self, x, edge_index, edge_weight=None):
        return self.conv(x, edge_index, edge_weight)


class NeedsAttr(nn.Module):
    def __init__(self, f=8, c=3):
        super().__init__()
        self.conv = gnn.GINEConv(nn.Linear(f, c), edge_dim=1)

    def forward(self, x, edge_index, edge_attr):
        return self.conv(x, edge_index, edge_attr)
"""


def pyg_api(body: str):
    """``body`` after :data:`PYG_MODELS`, in :func:`python_api`'s program."""
    return python_api(PYG_MODELS + textwrap.dedent(body).strip() + "\n")


add(Case(25, "distribute(edge_weight=) naming no argument of forward", pyg_api("""
             distgnn.pyg.distribute(Net(), edge_weight="nonexistent")
             """), says="edge_weight='nonexistent'"))


def says_once(text: str):
    def check(tmp, outcome):
        said = (outcome.stdout + outcome.stderr).count(text)
        assert said == 1, f"{text!r} said {said} times"
    return check


add(Case(25, "model gat on a graph with edge weights", python_api("""
             import torch
             from torch_geometric.data import Data
             from tests.helpers.pyg_models import weighted_graph
             gat = distgnn.TrainConfig(model="gat", epochs=1, progress=False, threads=1)
             distgnn.train(weighted_graph(n=60, e=300), gat, log=quiet)
             """), status=0, check=says_once("GAT has no edge-weight term")))
add(Case(25, "GCN2Conv with alpha NaN",
         api("out = GCN2Conv(8, alpha=float('nan'), theta=0.5, layer=1)(nbr, torch.rand(30, 8), "
             "torch.rand(30, 8))\n"), says="alpha must be in [0, 1]"))
add(Case(25, "GCN2Conv with theta 0 (beta 0: weights that never act)",
         api("out = GCN2Conv(8, alpha=0.1, theta=0.0, layer=1)(nbr, torch.rand(30, 8), "
             "torch.rand(30, 8))\n"), says="theta must be a finite number > 0"))


# 26. a traceback or an unclear line: the Python API and PyG models
for name, body, says in [
        ("distribute(distribute(model))", "distgnn.pyg.distribute(distgnn.pyg.distribute(Net()))",
         "distributed already"),
        ("a to_hetero model", """
         from torch_geometric.nn import SAGEConv, to_hetero
         class Plain(nn.Module):
             def __init__(self):
                 super().__init__()
                 self.conv = SAGEConv((-1, -1), 4)
             def forward(self, x, edge_index):
                 return self.conv(x, edge_index)
         distgnn.pyg.distribute(to_hetero(Plain(), (["a"], [("a", "to", "a")])))
         """, "to_hetero"),
        ("a PyG model whose forward needs edge_attr", "distgnn.pyg.distribute(NeedsAttr())",
         "edge_weight='edge_attr'"),
        ("a plain PyG model given to distgnn.train",
         "distgnn.train('cora', cfg, lambda f, c: Net(f, c), log=quiet)",
         "distribute(model)"),
        ("a plain PyG model given to run.place", """
         run = distgnn.setup('cora', cfg, log=quiet)
         run.place(Net(run.num_features, run.num_classes))
         """, "distribute(model)"),
        ("make_model giving int logits", """
         class Rounded(nn.Module):
             def __init__(self, f, c):
                 super().__init__()
                 self.conv = distgnn.nn.GCNConv(f, c)
             def forward(self, g, x):
                 return self.conv(g, x).round().long()
         import distgnn.nn
         distgnn.train('cora', cfg, Rounded, log=quiet)
         """, "logits of type torch.int64"),
        ("make_model giving a model without parameters", """
         class Slice(nn.Module):
             def __init__(self, f, c):
                 super().__init__()
                 self.c = c
             def forward(self, g, x):
                 return x[:, :self.c]
         distgnn.train('cora', cfg, Slice, log=quiet)
         """, "nothing to train")]:
    add(Case(26, name, pyg_api(body), says=says))

for name, body, says in [
        ("num_nodes a dict", "distgnn.from_pyg(Data(edge_index=ei, num_nodes={'a': 2}))",
         "num_nodes is a dict"),
        ("x on the meta device",
         "distgnn.from_pyg(Data(edge_index=ei, x=torch.ones(2, 3, device='meta')))",
         "meta device"),
        ("a sparse x", "distgnn.from_pyg(Data(edge_index=ei, x=torch.ones(2, 3).to_sparse()))",
         "x.to_dense()")]:
    add(Case(26, f"distgnn.from_pyg with {name}", python_api(f"""
             import torch
             from torch_geometric.data import Data
             ei = torch.tensor([[0, 1], [1, 0]])
             {body}
             """), says=says))
add(Case(26, "GCNConv called with None for the graph",
         api("out = GCNConv(8, 4)(None, torch.rand(30, 8))\n"), says="conv(g, h, ...)"))

BATCH_NORM = """\
import sys
from torch import nn
import torch_geometric.nn as gnn
import distgnn
import distgnn.pyg


class Normed(nn.Module):
    def __init__(self, features, classes):
        super().__init__()
        self.conv, self.norm = gnn.GCNConv(features, classes), nn.BatchNorm1d(classes)

    def forward(self, x, edge_index):
        return self.norm(self.conv(x, edge_index))


config = distgnn.TrainConfig(epochs=2, threads=1, progress=False)
distgnn.train(sys.argv[1], config, lambda f, c: distgnn.pyg.distribute(Normed(f, c)))
"""


def script(tmp: Path, run, code: str, *argv) -> list[str]:
    """``code`` written as ``tmp/script.py``; the command that runs it with ``argv``."""
    path = tmp / "script.py"
    path.write_text(run.prelude + code)
    return [sys.executable, str(path), *map(str, argv)]


def as_process(tmp, run, command) -> Outcome:
    proc = subprocess.run(command, env=run.env(), capture_output=True, text=True, timeout=300,
                          cwd=run.root)
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


# a user's script ending in the library's refusal: one line, in one process and on 2 ranks
# under mpi4py's runner (which aborts the job on any exception)
add(Case(26, "a PyG model with BatchNorm, a script in one process",
         lambda tmp, run: as_process(tmp, run, script(tmp, run, BATCH_NORM, tmp / "d.npz")),
         data(n=200), status=1, says="script.py: error: norm (BatchNorm1d)", slow=True))
add(Case(26, "a PyG model with BatchNorm, a script on 2 ranks under python -m mpi4py",
         lambda tmp, run: run.mpi_command(2, [
             sys.executable, "-m", "mpi4py", *script(tmp, run, BATCH_NORM, tmp / "p")[1:]]),
         both(data(n=200), lambda t, r: partition(r, t / "d.npz", 2, t / "p")),
         status=1, says="torch.nn.LayerNorm"))
add(Case(26, "help(distgnn.TrainConfig) names no option", python_api("""
             import inspect
             signature = inspect.signature(distgnn.TrainConfig)
             for name in ("hidden", "lr", "algo", "save_model", "network"):
                 assert name in signature.parameters, name
             assert signature.parameters["epochs"].default == 200
             assert "epochs=200" in distgnn.TrainConfig.__doc__
             """), status=0))
def nothing_trained(tmp, outcome):
    """A check that the refusal came before training: no epoch said, no model file."""
    assert "epoch" not in outcome.stdout and not (tmp / "m.pt").exists(), outcome.stdout


add(Case(26, "distgnn.load_model(None)", python_api("""
             distgnn.load_model(None)
             """), says="the model file must be a path (a str or pathlib.Path), got None"))
add(Case(26, "distgnn.train with make_model an int", python_api("""
             distgnn.train("cora", cfg, make_model=5, log=quiet)
             """), says="make_model must be a function make_model(in_channels, num_classes)",
         check=nothing_trained))
add(Case(26, "distgnn.train with make_model a module, not its factory", python_api("""
             from distgnn.nn import GCNConv
             distgnn.train("cora", cfg, make_model=GCNConv(1433, 7), log=quiet)
             """), says="make_model is a GCNConv module; give the function that builds it",
         check=nothing_trained))
add(Case(26, "distgnn.predict with make_model a string", python_api("""
             distgnn.predict(sys.argv[1], "cora", make_model="my_models:make", log=quiet)
             """), says="make_model must be a function"))
