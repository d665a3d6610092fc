"""What cd-r's default schedule measures on its exact epochs: how far the remote terms moved
since the last exact epoch (the epoch record's ``stale_drift`` and ``stale_drift_grad``), and
what it does when they move as far as the sums: every later epoch exact, one warning, and
``--algo auto`` back to cd-0."""
import math

import pytest

from distgnn.cli.train import _report_epochs
from distgnn.errors import DistGNNError
from distgnn.exchange import auto, controller
from distgnn.exchange.controller import DRIFT_WINDOW, Controller
from distgnn.run.config import TrainConfig
from tests.helpers.training import fit_on_threads, losses
from tests.test_distributed import write_parts


@pytest.fixture(scope="module")
def parts(cora_ds, tmp_path_factory):
    return write_parts(cora_ds, tmp_path_factory.mktemp("drift") / "p4", 4)


def options(**extra):
    return TrainConfig(model="gcn", hidden=16, seed=1, progress=False, threads=1,
                       **{"algo": "cd-r", "exchange_precision": "fp32", **extra})


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


# ---- the drift limit -----------------------------------------------------------------------
FALLING = [2.0 - e / 100 for e in range(40)]  # a loss that never rises


def test_the_median_drift_of_the_last_exact_epochs_makes_every_later_epoch_exact():
    """Drifts below the limit, or too few of them, change nothing (odd epochs stale on a
    falling loss); once the median of the last ``DRIFT_WINDOW`` reaches it, ``observe`` says
    so once and every later epoch is exact.  One large drift among small ones does not."""
    c = Controller()
    drifts = [0.3, 5.0, 0.2, 0.4, 0.9, 1.2, 1.1, 1.0, 0.5, 1.3]  # median of 5 at the 8th
    found = []
    for e, loss in enumerate(FALLING[:20]):
        c.exact(e)
        measured = drifts[e // 2 - 1] if e % 2 == 0 and 0 < e // 2 <= len(drifts) else None
        found.append(c.observe(e, loss, measured))
    fired = 2 * 8  # the epoch that measured the 8th drift
    assert found == [e == fired for e in range(20)]
    assert c.exact_from == fired + 1 and c.median_drift == pytest.approx(1.0)
    assert [c.exact(e) for e in range(fired + 1)] == [e % 2 == 0 for e in range(fired + 1)]
    assert all(c.exact(e) for e in range(fired + 1, 40))
    assert c.observe(21, FALLING[21], 9.0) is False  # said once


def test_the_finding_travels_in_checkpoints_and_survives_a_new_layout():
    """The drifts kept and the epoch from which all are exact are in the controller's state;
    a state written before they existed loads as nothing seen; a restart on another layout
    forgets the drifts and keeps the finding."""
    c = Controller()
    for e in range(DRIFT_WINDOW):
        c.observe(e, FALLING[e], 2.0)
    restored = Controller()
    restored.load_state_dict(c.state_dict())
    assert (restored.exact_from, restored.drifts) == (DRIFT_WINDOW, [2.0] * DRIFT_WINDOW)
    old = {k: v for k, v in c.state_dict().items() if k not in ("drifts", "exact_from")}
    fresh = Controller()
    fresh.load_state_dict(old)
    assert (fresh.exact_from, fresh.drifts) == (None, [])
    restored.restart(30, FALLING[:30])
    assert restored.drifts == [] and all(restored.exact(e) for e in range(30, 40))
    with pytest.raises(DistGNNError, match="controller state"):
        fresh.load_state_dict({**old, "exact_every": 3})


def test_the_run_says_once_that_stale_epochs_were_costing_accuracy(parts, monkeypatch, capsys):
    """With the limit at 0 the finding comes with the ``DRIFT_WINDOW``-th measured drift: its
    record carries ``exchange_warning``, the rank-0 log and the summary its line, every later
    epoch is exact (cd-r's int4 wire stays), and the console report prints it."""
    monkeypatch.setattr(controller, "DRIFT_LIMIT", 0.0)
    run = fit_on_threads(parts, 4, options(epochs=20, exchange_precision="int4"))[0]
    measured = [r["epoch"] for r in run.history if "stale_drift" in r]
    warned = [r for r in run.history if "exchange_warning" in r]
    assert [r["epoch"] for r in warned] == [measured[DRIFT_WINDOW - 1]]
    finding = warned[0]["exchange_warning"]
    fired = finding["epoch"]
    assert finding["fallback"] is False and finding["drift"] > 0
    assert finding["reason"].startswith(f"cd-r: over the last {DRIFT_WINDOW} exact epochs the "
                                        "stale remote terms moved ")
    assert finding["reason"].endswith(f"from epoch {fired + 1} on every epoch is exact "
                                      "(--algo cd-0 trains exactly from the start)")
    assert all(r["exact_exchange"] for r in run.history[fired:])
    assert all(r["bytes_sent_mean"] < 0.5 * r["bytes_cd0_mean"] for r in run.history[fired:])
    assert run.summary["exchange"]["warning"] == finding["reason"]
    _report_epochs(run.history, 0, run.summary["exchange"])
    assert f"warning: {finding['reason']}\n" in capsys.readouterr().out


def test_the_default_limit_holds_off_on_cora(parts):
    """At the shipped limit nothing fires on cora in 60 epochs (its drifts stay below 1)."""
    run = fit_on_threads(parts, 4, options(epochs=60, exchange_precision="int4"))[0]
    assert not any("exchange_warning" in r for r in run.history)
    assert max(max(r["stale_drift"].values()) for r in run.history if "stale_drift" in r) < 1
    assert "warning" not in run.summary["exchange"]


def test_auto_goes_back_to_cd0_when_the_drift_limit_is_reached(parts, monkeypatch, tmp_path):
    """--algo auto takes cd-r (its bar removed), the limit (at 0) is reached, and from the
    next epoch the run is cd-0's again: no controller decisions, every byte of cd-0's.
    Resumed after the fallback, it goes on with cd-0 (the loss of the uninterrupted run)."""
    monkeypatch.setattr(auto, "GAIN", -math.inf)
    monkeypatch.setattr(controller, "DRIFT_LIMIT", 0.0)
    epochs = 24
    whole = fit_on_threads(parts, 4, options(epochs=epochs, algo="auto"))[0]
    warned = [r for r in whole.history if "exchange_warning" in r]
    assert len(warned) == 1 and warned[0]["exchange_warning"]["fallback"] is True
    fired = warned[0]["epoch"]
    assert warned[0]["exchange_warning"]["reason"].endswith(
        f"from epoch {fired + 1} on --algo auto goes back to cd-0")
    after = whole.history[fired:]
    assert len(after) > 4 and not any("exact_exchange" in r for r in after)
    assert all(r["bytes_sent_mean"] == pytest.approx(r["bytes_cd0_mean"]) for r in after)
    stop = fired + 2
    fit_on_threads(parts, 4, options(epochs=stop, algo="auto", checkpoint_dir=str(tmp_path),
                                     checkpoint_every=stop))
    monkeypatch.setattr(controller, "DRIFT_LIMIT", math.inf)  # it could not fire again
    resumed = fit_on_threads(parts, 4, options(epochs=epochs, algo="auto",
                                               resume=str(tmp_path)))[0]
    assert losses(resumed) == pytest.approx(losses(whole), rel=1e-5)
    assert not any("exact_exchange" in r for r in resumed.history[stop:])
