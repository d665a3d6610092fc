"""``--algo auto``: cd-0 for the measured epochs, then cd-0 or cd-r's default schedule, chosen
once from the epochs' records, the same again on a resume."""
import pytest
import torch

from distgnn.exchange import auto
from distgnn.run.config import TrainConfig
from tests.helpers.training import fit_on_threads, losses
from tests.test_distributed import write_parts

EXCHANGE = auto.EXCHANGE_PHASES


def records(shares):
    """Epoch records whose exchange took ``shares`` of each epoch (one second each)."""
    return [{"epoch": e + 1, "epoch_s": 1.0,
             "phases": {**dict.fromkeys(EXCHANGE, s / 3), "dense": 1 - s}}
            for e, s in enumerate(shares)]


def test_the_choice_waits_for_the_measured_epochs_then_says_why():
    first = auto.WARMUP + auto.MEASURED
    assert auto.choice(records([0.9] * (first - 1))) is None
    algo, epoch, made = auto.choice(records([0.9, 0.4, 0.5, 0.6]))
    reason = made["reason"]
    assert (algo, epoch) == ("cd-r", first)
    assert "took 50 % of epochs 2-4" in reason and "cd-r's default schedule from epoch 5" in reason
    assert reason.startswith("--algo auto: cd-r saves about 25 % of an epoch here: switching")
    algo, _, made = auto.choice(records([0.9, 0.02, 0.03, 0.01]))
    assert algo == "cd-0" and "took 2 % of epochs 2-4" in made["reason"]
    assert made["reason"].startswith("--algo auto: cd-r would save only 1 % of an epoch here, "
                                     "less than the 5 % that pays for its stale epochs: "
                                     "keeping cd-0")
    # the warm-up epoch does not count, later epochs neither: the same records, the same choice
    assert auto.choice(records([0.0, 0.4, 0.5, 0.6, 0.0, 0.0]))[0] == "cd-r"
    edge = 2 * auto.GAIN  # the schedule skips at most half the exact epochs' exchanges
    assert auto.choice(records([0, edge, edge, edge]))[0] == "cd-r"
    assert auto.choice(records([0, edge * 0.99] * 2))[0] == "cd-0"


def test_the_wire_of_the_schedule_counts_against_it():
    """An int4 exact epoch sends about 0.14x the bytes but spends time encoding them: with
    the exchange at 40 % of a 1 s epoch, 0.5 s of wire work per exact epoch still pays
    (0.37 - 0.25), 0.7 s does not."""
    seconds, ratio = auto.wire_seconds("int4", [(16, torch.float32), (7, torch.float32)], 500)
    assert seconds > 0 and 0.1 < ratio < 0.25
    assert auto.wire_seconds("fp32", [(16, torch.float32)], 500) == (0.0, 1.0)
    shares = records([0, 0.4, 0.4, 0.4])
    algo, _, made = auto.choice(shares, 0.5, 0.14)
    assert algo == "cd-r" and made["gain"] == pytest.approx(0.4 * 0.93 - 0.25)
    assert "its wire sends 0.14x cd-0's bytes for 500 ms of encoding and decoding per " \
        "exact epoch" in made["reason"]
    algo, _, made = auto.choice(shares, 0.9, 0.14)  # g = 0.372 - 0.45: cd-r slower by 8 %
    assert algo == "cd-0"
    assert made["reason"].startswith("--algo auto: cd-r would be 8 % slower here: keeping cd-0")


@pytest.fixture(scope="module")
def parts(cora_ds, tmp_path_factory):
    root = tmp_path_factory.mktemp("auto")
    return {P: write_parts(cora_ds, root / f"p{P}", P) for P in (2, 4)}


def options(**extra):
    return TrainConfig(model="sage", hidden=16, seed=2, progress=False, threads=1, **extra)


# the bar out of reach either way: the rule's inputs (epoch and wire times) vary with the host
@pytest.mark.parametrize("gain, chosen", [(float("inf"), "cd-0"), (-float("inf"), "cd-r")])
def test_a_run_measures_then_keeps_cd0_or_takes_the_default_schedule(parts, monkeypatch,
                                                                       gain, chosen):
    """With the bar out of reach cd-0 stays (the run is cd-0's, loss for loss); with none,
    the default schedule takes over after the measured epochs, its first epoch exact; the
    choice is in the metrics of the epoch that made it, once."""
    monkeypatch.setattr(auto, "GAIN", gain)
    run = fit_on_threads(parts[4], 4, options(epochs=12, algo="auto"))[0]
    cd0 = fit_on_threads(parts[4], 4, options(epochs=12))[0]
    first = auto.WARMUP + auto.MEASURED
    choices = [r for r in run.history if "exchange_choice" in r]
    assert [r["epoch"] for r in choices] == [first]
    assert choices[0]["exchange_choice"]["algo"] == chosen
    # cd-0 until the choice (ranks on threads sum in one order or another: 1e-5)
    assert losses(run)[:first] == pytest.approx(losses(cd0)[:first], rel=1e-5)
    if chosen == "cd-0":
        assert losses(run) == pytest.approx(losses(cd0), rel=1e-5)
        assert not any("exact_exchange" in r for r in run.history)
    else:
        assert run.history[first]["exact_exchange"] is True
        assert any(r["exact_exchange"] is False for r in run.history[first:])
        assert losses(run)[first + 2:] != losses(cd0)[first + 2:]


@pytest.mark.parametrize("ranks", [4, 2])
def test_a_resumed_run_makes_the_same_choice(parts, monkeypatch, tmp_path, ranks):
    """Killed after the choice (cd-r) and resumed on the same partitions (every rank's state
    restored: the losses of the uninterrupted run) or on 2 ranks (the schedule again from an
    exact epoch): the run goes on with the choice its checkpoint's records hold, even where
    the rule, given the same records, would now choose otherwise."""
    monkeypatch.setattr(auto, "GAIN", -float("inf"))
    whole = fit_on_threads(parts[4], 4, options(epochs=14, algo="auto"))[0]
    fit_on_threads(parts[4], 4, options(epochs=7, algo="auto", checkpoint_dir=str(tmp_path),
                                        checkpoint_every=7))
    monkeypatch.setattr(auto, "GAIN", float("inf"))  # decided anew, it would keep cd-0
    resumed = fit_on_threads(parts[ranks], ranks, options(epochs=14, algo="auto",
                                                           resume=str(tmp_path)))[0]
    assert [r["epoch"] for r in resumed.history if "exchange_choice" in r] == [4]
    if ranks == 4:
        assert losses(resumed) == pytest.approx(losses(whole), rel=1e-5)
    else:
        assert resumed.history[7]["exact_exchange"] is True
        assert all("exact_exchange" in r for r in resumed.history[7:])
