"""What cd-r's default schedule measures on its exact epochs: how far the remote terms moved
since the last exact epoch (the epoch record's ``stale_drift`` and ``stale_drift_grad``)."""
import pytest

from distgnn.run.config import TrainConfig
from tests.helpers.training import fit_on_threads
from tests.test_distributed import write_parts


@pytest.fixture(scope="module")
def parts(cora_ds, tmp_path_factory):
    return write_parts(cora_ds, tmp_path_factory.mktemp("drift") / "p4", 4)


def options(**extra):
    return TrainConfig(model="gcn", hidden=16, seed=1, progress=False, threads=1,
                       algo="cd-r", exchange_precision="fp32", **extra)


def test_exact_epochs_measure_how_far_the_remote_terms_moved(parts):
    """With nothing changing between epochs (no dropout, no step) the remote terms an exact
    epoch brings are those kept: drift 0, forward and backward; training moves them.  Exact
    epochs after an earlier exact one measure it, on every layer; no other epoch does."""
    still = fit_on_threads(parts, 4, options(epochs=8, lr=0.0, dropout=0.0))[0]
    moving = fit_on_threads(parts, 4, options(epochs=8))[0]
    for run in (still, moving):
        measured = [r for r in run.history if "stale_drift" in r]
        assert len(measured) >= 3 and all(r["exact_exchange"] for r in measured)
        assert "stale_drift" not in run.history[0]
        assert all(set(r["stale_drift"]) == set(r["stale_drift_grad"]) == {"0", "1"}
                   for r in measured)
        assert not any("stale_drift" in r for r in run.history if not r["exact_exchange"])
    assert all(v == 0.0 for r in still.history
               for v in (*r.get("stale_drift", {}).values(),
                         *r.get("stale_drift_grad", {}).values()))
    assert all(0.01 < v < 2 for r in moving.history for v in r.get("stale_drift", {}).values())

