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
