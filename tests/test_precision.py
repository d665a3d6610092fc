"""``--precision bf16-mixed``: bf16 matrix products beside float32 weights, the refusals,
and what a run records of it.

Training under bf16-mixed runs on any CPU here (the refusal of a CPU without bf16 units is
lifted with ``monkeypatch``: torch then emulates bf16, slowly but exactly as specified)."""
import numpy as np
import pytest
import torch

from distgnn import placement
from distgnn.errors import DistGNNError
from distgnn.nn.backends import get_backend
from distgnn.placement import check_precision, cpu_has_bf16
from distgnn.run.checkpointing import fingerprinted
from distgnn.run.config import TrainConfig
from tests.helpers.graphs import build_random_graph
from tests.helpers.training import losses, train_quietly


@pytest.fixture
def bf16_cpu(monkeypatch):
    monkeypatch.setattr(placement, "cpu_has_bf16", lambda *a: True)


def test_the_cpus_bf16_units_are_read_from_its_flags(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16 avx512vl\n")
    assert cpu_has_bf16(str(info))
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_vnni\n")
    assert not cpu_has_bf16(str(info))
    info.write_text("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n")  # Arm
    assert cpu_has_bf16(str(info))
    assert not cpu_has_bf16(str(tmp_path / "absent"))


def test_bf16_mixed_is_refused_where_it_cannot_run_as_it_says(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t\t: fpu avx512f\n")
    with pytest.raises(DistGNNError, match="no bf16 matrix units.*--precision fp32"):
        check_precision("bf16-mixed", torch.device("cpu"), str(info))
    check_precision("fp32", torch.device("cpu"), str(info))  # fp32 runs anywhere
    with pytest.raises(DistGNNError, match="runs on CPU ranks"):
        check_precision("bf16-mixed", torch.device("cuda", 0), str(info))
    with pytest.raises(DistGNNError, match="--dtype float64"):
        TrainConfig(precision="bf16-mixed", dtype="float64")
    with pytest.raises(DistGNNError, match="--precision must be one of fp32, bf16-mixed"):
        TrainConfig(precision="bf16")


def test_a_cpu_without_bf16_units_is_refused_before_training(cora, monkeypatch):
    monkeypatch.setattr(placement, "cpu_has_bf16", lambda *a: False)
    with pytest.raises(DistGNNError, match="no bf16 matrix units"):
        train_quietly(cora, epochs=1, precision="bf16-mixed")


def test_bf16_mixed_implies_bf16_aggregation_and_is_fingerprinted():
    cfg = TrainConfig(precision="bf16-mixed")
    assert cfg.bf16_aggregation and not TrainConfig().bf16_aggregation
    assert TrainConfig(aggregation_precision="bf16").bf16_aggregation
    assert fingerprinted(cfg)["--precision"] == "bf16-mixed"
    assert "--precision" not in fingerprinted(TrainConfig())  # old checkpoints still resume


def test_the_numba_spmm_gathers_bf16_rows_as_it_gathers_rounded_float32():
    """A bf16 operand (a product's output under autocast) aggregates to what the float32
    operand rounded to bf16 gives, bit for bit, forward and backward."""
    graph, *_ = build_random_graph(seed=3, n=300, e=2400)
    backend = get_backend("numba", "bf16")
    x = torch.randn(300, 40)
    for reduce in ("sum", "mean"):
        y, _ = backend.spmm(graph, x.bfloat16(), reduce)
        want, _ = backend.spmm(graph, x, reduce)
        assert y.dtype == torch.float32 and torch.equal(y, want)
    y, _ = backend.spmm(graph, x.bfloat16(), "max")  # max gathers float32: widened first
    assert torch.equal(y, backend.spmm(graph, x.bfloat16().float(), "max")[0])


def test_bf16_mixed_multiplies_in_bf16_and_keeps_float32_weights(cora, bf16_cpu):
    """Every matrix product of a training epoch takes bf16 operands; the weights, their
    gradients and Adam's moments stay float32; the loss curve follows fp32's closely without
    being it."""
    seen = set()
    with torch.profiler.profile(record_shapes=True) as prof:
        mixed = train_quietly(cora, epochs=20, dropout=0.0, precision="bf16-mixed")
    for event in prof.events():
        if event.name in ("aten::mm", "aten::addmm") and event.input_shapes[0]:
            seen.update(d for d in event.input_dtypes if d)
    assert seen == {"c10::BFloat16"}, seen
    assert {p.dtype for p in mixed.model.parameters()} == {torch.float32}
    fp32 = losses(train_quietly(cora, epochs=20, dropout=0.0))
    got = losses(mixed)
    assert got != fp32
    gaps = [abs(a - b) / b for a, b in zip(got, fp32)]
    assert max(gaps) < 0.01 and got[-1] < 0.95 * got[0], (gaps, got)


@pytest.mark.parametrize("model", ["sage", "gcn", "gat", "gin"])
def test_each_model_trains_under_bf16_mixed_to_fp32s_accuracy(cora, bf16_cpu, model):
    """60 epochs on cora: bf16-mixed's test accuracy at the best validation within 2 points
    of fp32's (cora's test set is 1,000 vertices: a point is 10 of them)."""
    fp32 = train_quietly(cora, epochs=60, model=model).best["test_acc"]
    mixed = train_quietly(cora, epochs=60, model=model, precision="bf16-mixed")
    assert abs(mixed.best["test_acc"] - fp32) <= 0.02, (mixed.best["test_acc"], fp32)
    assert np.isfinite(losses(mixed)).all()


def test_a_hand_written_loop_gets_the_runs_autocast(cora, bf16_cpu):
    """``run.autocast()`` is torch's CPU autocast to bf16 under bf16-mixed and nothing under
    fp32; the loss of bf16 logits is float32."""
    import distgnn
    from distgnn.nn.models import GNN

    for precision, on in (("bf16-mixed", True), ("fp32", False)):
        with distgnn.setup(cora, TrainConfig(precision=precision), log=lambda s: None) as run:
            model = run.place(GNN("gcn", run.num_features, 16, run.num_classes))
            run.start_epoch(model, 0)
            with run.autocast():
                assert torch.is_autocast_enabled("cpu") == on
                loss = run.loss(model(run.g, run.x))
            assert loss.dtype == torch.float32 and torch.isfinite(loss)


def test_bf16_mixed_resumes_exactly_and_refuses_an_fp32_resume(cora, bf16_cpu, tmp_path):
    whole = train_quietly(cora, epochs=8, seed=1, precision="bf16-mixed")
    ckpt = str(tmp_path / "ck")
    train_quietly(cora, epochs=5, seed=1, precision="bf16-mixed", checkpoint_dir=ckpt,
                  checkpoint_every=5)
    resumed = train_quietly(cora, epochs=8, seed=1, precision="bf16-mixed", resume=ckpt)
    assert losses(resumed) == losses(whole)
    for p, q in zip(resumed.model.state_dict().values(), whole.model.state_dict().values()):
        assert torch.equal(p, q)
    with pytest.raises(DistGNNError, match="--precision"):
        train_quietly(cora, epochs=8, seed=1, resume=ckpt)


def test_a_saved_bf16_mixed_model_predicts_what_training_reported(cora, bf16_cpu, tmp_path):
    """The model file records the precision; ``distgnn.predict`` runs the model as it was
    trained and gives the accuracy training reported for those weights, to the last bit."""
    import distgnn

    result = train_quietly(cora, epochs=10, precision="bf16-mixed",
                           save_model=str(tmp_path / "m.pt"))
    got = distgnn.predict(tmp_path / "m.pt", cora, log=lambda s: None)
    for mask in ("train", "val", "test"):
        assert got.scores[f"{mask}_acc"] == result.best[f"{mask}_acc"]
