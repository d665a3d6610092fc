"""The memory estimate that refuses runs which cannot fit."""
import pytest

from distgnn.config import TrainConfig
from distgnn.errors import DistGNNError
from distgnn.memory import estimate, require


def test_float64_doubles_every_float_but_not_the_graph():
    single = estimate(1000, 5000, 32, 4, 16, 2)
    double = estimate(1000, 5000, 32, 4, 16, 2, value_bytes=8)
    for part in ("model", "activations", "features"):
        assert double[part] == 2 * single[part]
    assert double["graph copies"] == single["graph copies"] == 24 * 5000 + 16 * 1000
    # model: 5 copies of (F + 1) H + (H + 1) C floats
    assert single["model"] == 4 * 5 * (33 * 16 + 17 * 4)
    # a precomputed first aggregation keeps an aggregate as large as the features
    pre = estimate(1000, 5000, 32, 4, 16, 2, precompute_first=True)
    assert pre["features"] == 2 * single["features"] == 2 * 4 * 1000 * 32


def test_a_run_that_cannot_fit_is_refused_with_its_parts():
    cfg = TrainConfig(hidden=10 ** 7, layers=3, dtype="float64")
    with pytest.raises(DistGNNError, match="needs about .*activations"):
        require(cfg, 10 ** 6, 10 ** 7, 100, 4, "cpu", "data")
    require(TrainConfig(hidden=16), 1000, 5000, 32, 4, "cpu", "data")  # fits: no error


def test_attention_adds_its_per_edge_tensors():
    """GAT keeps six [E, H] tensors per layer; an edge-heavy GAT run is refused where the same
    GCN fits."""
    plain = estimate(1000, 5000, 32, 4, 16, 2)
    gat = estimate(1000, 5000, 32, 4, 16, 2, heads=8)
    assert gat["activations"] - plain["activations"] == 6 * 4 * 5000 * 8 * 2
    edges = 10 ** 8  # 2.4 GB of graph copies; GAT's 8 heads x 2 layers add 38 GB
    require(TrainConfig(model="gcn"), 10 ** 4, edges, 8, 2, "cpu", "data")
    with pytest.raises(DistGNNError, match="needs about"):
        require(TrainConfig(model="gat", heads=8, hidden=64), 10 ** 4, edges, 8, 2, "cpu",
                "data")
