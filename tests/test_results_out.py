"""What comes out of a run, in one process: the model file and what rebuilds it, the
predictions and embeddings of every vertex, distgnn-predict, the metrics file's summary
record, epochs counted from 1 everywhere, and the no-data-loss rules for every output.
(Partitioned runs against these: tests/test_distributed.py.)"""
import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import distgnn
from distgnn.errors import DistGNNError
from distgnn.run import training, vertex_outputs
from distgnn.run.evaluation import embedding_layers, forward_eval
from distgnn.run.shard import dataset_shard
from distgnn.timing import PhaseTimer
from tests.helpers.hostile import Runner

EPOCHS = 12


def quiet(line):
    pass


@pytest.fixture(scope="module")
def run(tmp_path_factory, cora_ds):
    """12 epochs of GCN on cora writing every result (best weights)."""
    out = tmp_path_factory.mktemp("results")
    cfg = distgnn.TrainConfig(epochs=EPOCHS, save_model=str(out / "model.pt"),
                              predictions_out=str(out / "pred.csv"),
                              embeddings_out=str(out / "emb.npy"),
                              metrics_out=str(out / "metrics.jsonl"), progress=False)
    return out, cfg, distgnn.train(cora_ds, cfg, log=quiet)


def test_epochs_are_counted_from_one_and_the_metrics_end_with_a_summary(run):
    out, cfg, result = run
    assert [r["epoch"] for r in result.history] == list(range(1, EPOCHS + 1))
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in lines[:-1]] == list(range(1, EPOCHS + 1))
    summary = lines[-1]
    assert summary == result.summary
    best = max(result.history, key=lambda r: (r["val_acc"], -r["val_loss"]))
    assert summary["best_epoch"] == result.best["epoch"] == best["epoch"]
    assert summary["test_acc"] == best["test_acc"] and summary["weights"] == "best"
    assert summary["saved"] == {"model": cfg.save_model, "predictions": cfg.predictions_out,
                                "embeddings": cfg.embeddings_out}
    losses = [r["loss"] for r in result.history]
    rises = [after > before for before, after in zip(losses, losses[1:])]
    longest = max((len(run) for run in "".join("x" if r else " " for r in rises).split()),
                  default=0)
    assert summary["longest_loss_rise"] == longest and "exchange" not in summary


def test_the_model_file_reads_without_pickle_and_rebuilds_the_best_model(run, cora_ds):
    out, cfg, result = run
    saved = torch.load(out / "model.pt", weights_only=True)
    assert saved["format"] == "distgnn-model" and saved["weights"] == "best"
    assert saved["epoch"] == result.best["epoch"] and saved["config"]["model"] == "gcn"
    assert (saved["num_features"], saved["num_classes"]) == (1433, 7)
    for name, tensor in result.best["state"].items():
        torch.testing.assert_close(saved["state_dict"][name], tensor, rtol=0, atol=0)
    model = distgnn.load_model(out / "model.pt")
    assert not model.training
    shard = dataset_shard(cora_ds, cfg, PhaseTimer(), quiet)
    logits, _ = forward_eval(model, shard)
    test = shard.masks["test"]
    acc = int((logits.argmax(1)[test] == shard.y[test]).sum()) / int(test.sum())
    assert acc == pytest.approx(result.best["test_acc"], abs=1e-12)


def test_predictions_and_embeddings_hold_every_vertex_once(run, cora_ds):
    out, cfg, result = run
    model = distgnn.load_model(out / "model.pt")
    shard = dataset_shard(cora_ds, cfg, PhaseTimer(), quiet)
    logits, embeddings = forward_eval(model, shard, layer=-1)
    with open(out / "pred.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["vertex", "predicted_class", *(f"p_{c}" for c in range(7))]
    table = np.array(rows[1:], dtype=np.float64)
    assert table.shape == (cora_ds.num_nodes, 9)
    np.testing.assert_array_equal(table[:, 0], np.arange(cora_ds.num_nodes))
    np.testing.assert_array_equal(table[:, 1], logits.argmax(1).numpy())
    np.testing.assert_allclose(table[:, 2:], torch.softmax(logits, 1).numpy(), rtol=1e-5,
                               atol=1e-6)
    emb = np.load(out / "emb.npy")
    assert emb.dtype == np.float32 and emb.shape == (cora_ds.num_nodes, 16)
    np.testing.assert_allclose(emb, embeddings.numpy(), rtol=1e-6)
    # the input of the last layer: what the classifier reads, so the logits follow from it
    np.testing.assert_allclose(model.convs[-1](shard.nbr, torch.from_numpy(emb)).detach(),
                               logits, rtol=1e-5, atol=1e-6)


def test_predict_on_the_same_graph_gives_the_reported_accuracy(run, cora_ds, tmp_path):
    out, cfg, result = run
    got = distgnn.predict(out / "model.pt", cora_ds, predictions_out=str(tmp_path / "p.npz"),
                          log=quiet)
    for mask in ("train", "val", "test"):
        assert got.scores[f"{mask}_acc"] == pytest.approx(result.best[f"{mask}_acc"], abs=1e-12)
    z = np.load(tmp_path / "p.npz")
    assert set(z.files) == {"vertex", "predicted_class", "probabilities"}
    expected = np.loadtxt(out / "pred.csv", delimiter=",", skiprows=1)
    np.testing.assert_array_equal(z["predicted_class"], expected[:, 1])
    np.testing.assert_allclose(z["probabilities"], expected[:, 2:], rtol=1e-5, atol=1e-6)


def test_distgnn_predict_prints_the_accuracy_and_writes(run, tmp_path):
    out, cfg, result = run
    # the command's entry point, run in this process (no interpreter and torch start-up)
    proc = Runner.in_process("predict", [out / "model.pt", "--embeddings-out",
                                         tmp_path / "e.npy", "--embeddings-layer", 0])
    assert proc.status == 0, proc.stderr
    assert f"test accuracy {result.best['test_acc'] * 100:.2f} %" in proc.stdout
    assert np.load(tmp_path / "e.npy").shape == (2708, 1433)  # the first layer's input: x


def test_last_weights_and_inductive_inference_on_a_changed_graph(cora_ds, tmp_path):
    """--final-weights last saves the last epoch's weights; the model then runs on a graph
    with vertices and edges it never saw (the same features)."""
    cfg = distgnn.TrainConfig(model="sage", epochs=3, final_weights="last",
                              save_model=str(tmp_path / "m.pt"), progress=False)
    result = distgnn.train(cora_ds, cfg, log=quiet)
    saved = torch.load(tmp_path / "m.pt", weights_only=True)
    assert saved["weights"] == "last" and saved["epoch"] == 3
    for name, tensor in result.model.state_dict().items():
        torch.testing.assert_close(saved["state_dict"][name], tensor, rtol=0, atol=0)
    grown = distgnn.NodeDataset(
        distgnn.CSRGraph.from_edges(np.r_[cora_ds.graph.edges()[0], 2708, 2709],
                                    np.r_[cora_ds.graph.edges()[1], 2709, 0], 2710),
        np.r_[cora_ds.x, cora_ds.x[:2]], np.r_[cora_ds.y, cora_ds.y[:2]],
        np.r_[cora_ds.train_mask, False, False], np.r_[cora_ds.val_mask, False, False],
        np.r_[cora_ds.test_mask, False, False])
    got = distgnn.predict(tmp_path / "m.pt", grown, predictions_out=str(tmp_path / "p.csv"),
                          log=quiet)
    assert got.scores["test_acc"] is not None
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 2710 + 1


def test_outputs_never_replace_a_users_file(tmp_path):
    """Checked at start-up (before any data is read), not when the configuration is made."""
    mine = tmp_path / "notes.csv"
    mine.write_text("my,own\n1,2\n")
    with pytest.raises(DistGNNError, match="refusing to replace"):
        distgnn.TrainConfig(predictions_out=str(mine)).check_paths()
    features = tmp_path / "x.npy"
    np.save(features, np.zeros((3, 2), np.float32))
    with pytest.raises(DistGNNError, match="never written over"):
        distgnn.TrainConfig(embeddings_out=str(features)).check_paths()
    with pytest.raises(DistGNNError, match="refusing to replace"):
        distgnn.TrainConfig(save_model=str(mine)).check_paths()
    with pytest.raises(DistGNNError, match="must end in .csv or .npz"):
        distgnn.TrainConfig(predictions_out=str(tmp_path / "p.txt")).check_paths()
    assert mine.read_text() == "my,own\n1,2\n"


def test_an_earlier_predictions_file_is_replaced(run, tmp_path):
    out, cfg, result = run
    again = tmp_path / "pred.csv"
    again.write_bytes((out / "pred.csv").read_bytes())
    distgnn.TrainConfig(predictions_out=str(again)).check_paths()  # accepted: it is ours


def test_a_failed_write_leaves_the_target_as_it_was_and_nothing_beside_it(tmp_path,
                                                                          monkeypatch):
    from distgnn.comm import SelfCommunicator

    target = tmp_path / "p.csv"
    target.write_text("vertex,predicted_class,p_0\n0,0,1\n")
    rows = {"probabilities": np.full((4, 2), 0.5, np.float32)}

    def broken(path, ids, probabilities):
        Path(path).write_text("half")
        raise OSError("disk full")

    monkeypatch.setattr(vertex_outputs, "_write_csv", broken)
    with pytest.raises(Exception, match="disk full"):
        vertex_outputs.write_rows(SelfCommunicator(), target, rows, np.arange(4), 4,
                                  lambda: None)
    assert target.read_text() == "vertex,predicted_class,p_0\n0,0,1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["p.csv"]


def test_rows_missing_from_the_ranks_are_refused(tmp_path):
    from distgnn.comm import SelfCommunicator

    rows = {"embeddings": np.ones((3, 2), np.float32)}
    with pytest.raises(DistGNNError, match="hold 3 of 4 vertices"):
        vertex_outputs.write_rows(SelfCommunicator(), tmp_path / "e.npy", rows,
                                  np.array([0, 1, 3]), 4, lambda: None)
    assert list(tmp_path.iterdir()) == []


def test_embedding_layers_are_graph_and_linear_layers_in_order():
    from distgnn.nn.models import GCNII, GNN

    gnn = GNN("gin", 8, 16, 3, 2, 0.0)
    assert [type(m).__name__ for m in embedding_layers(gnn)] == ["GINConv", "GINConv"]
    gcnii = GCNII(8, 16, 3, 2, 0.0, 0.1, 0.5)
    assert [type(m).__name__ for m in embedding_layers(gcnii)] == [
        "Linear", "GCN2Conv", "GCN2Conv", "Linear"]


def test_string_ids_undirected_lines_unlabelled_vertices_and_a_split_file(tmp_path):
    """An edge list in string ids, one line per undirected edge, labels for some vertices
    only, and the user's split: predictions come back keyed by those strings, one row per
    vertex, the unlabelled ones included."""
    rng = np.random.default_rng(3)
    names = [f"user-{i:03d}" for i in range(60)]
    classes = np.arange(60) % 3
    edges = {(a, (a + 3) % 60) for a in range(60)} | {  # a ring in each class, and more
        (a, b) for a in range(60) for b in rng.choice(60, 3) if a != b and
        classes[a] == classes[b]}
    (tmp_path / "g.txt").write_text("".join(f"{names[a]} {names[b]}\n"
                                            for a, b in sorted(edges)))
    (tmp_path / "x.txt").write_text("".join(
        f"{n} {' '.join(str(v) for v in np.eye(3)[c] + rng.normal(0, 0.5, 3))}\n"
        for n, c in zip(names, classes)))
    labelled = range(0, 50)  # 50..59 unlabelled: absent from the labels file
    (tmp_path / "y.txt").write_text("".join(f"{names[i]} {classes[i]}\n" for i in labelled))
    (tmp_path / "split.txt").write_text("".join(
        f"{names[i]} {'train' if i < 30 else 'val' if i < 40 else 'test'}\n" for i in labelled))
    proc = Runner.in_process(  # distgnn-train's entry point, in this process
        "train", ["--dataset", tmp_path / "g.txt", "--features", tmp_path / "x.txt", "--labels",
                  tmp_path / "y.txt", "--symmetrize", "--split-file", tmp_path / "split.txt",
                  "--epochs", 30, "--no-progress", "--predictions-out", tmp_path / "p.csv"])
    assert proc.status == 0, proc.stderr
    assert "split: from" in proc.stdout and "10 vertices unlabelled" in proc.stdout.replace(
        "(", "").replace(")", "")
    with open(tmp_path / "p.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["vertex"] for r in rows) == names
    assert all(0 <= int(r["predicted_class"]) < 3 for r in rows)


def test_a_model_file_of_bf16_mixed_from_when_fp32_was_the_default_reads_as_trained():
    """Model files once recorded ``--aggregation-precision fp32`` (then the default, which
    ``--precision bf16-mixed`` overrode) beside bf16-mixed: they are read as trained, with
    bf16 rows gathered, not refused as the contradiction the flags now are."""
    from distgnn.run.config import TrainConfig
    from distgnn.run.prediction import saved_config

    old = {"config": {**TrainConfig().options(), "precision": "bf16-mixed",
                      "aggregation_precision": "fp32"}}
    assert saved_config(old).gathered_precision == "bf16"
    with pytest.raises(DistGNNError, match="--aggregation-precision fp32 cannot apply"):
        TrainConfig(precision="bf16-mixed", aggregation_precision="fp32")


def test_predict_warns_of_edge_weights_and_classes_unlike_training(run, cora_ds, capsys):
    """The model file records whether the model read edge weights in training (on cora:
    none); a prediction on a graph that has them, or on labels of fewer classes, warns once
    on stderr, and the Python API says it as the command does.  A file without the record
    (written before it was kept) says nothing of weights, nor does a model that reads none
    (GAT)."""
    from distgnn.nn.models import GNN
    from distgnn.run.prediction import mismatch_warnings
    from distgnn.run.saved_model import read_model_file
    from distgnn.run.shard import dataset_shard

    out, cfg, result = run
    saved = read_model_file(out / "model.pt")
    assert saved["edge_weights"] is False
    graph = cora_ds.graph
    weighted = distgnn.NodeDataset(
        distgnn.CSRGraph(graph.indptr, graph.indices, graph.num_nodes,
                         np.full(graph.num_edges, 2.0, np.float32)),
        cora_ds.x, cora_ds.y, cora_ds.train_mask, cora_ds.val_mask, cora_ds.test_mask)
    capsys.readouterr()
    distgnn.predict(out / "model.pt", weighted, log=quiet)
    err = capsys.readouterr().err
    assert err == (f"warning: {out / 'model.pt'} was trained on a graph without edge weights, "
                   "and this graph has them: its aggregations now weigh each edge, which the "
                   "model never saw\n")
    shard = dataset_shard(weighted, cfg, PhaseTimer(), quiet)
    older = {k: v for k, v in saved.items() if k != "edge_weights"}
    assert mismatch_warnings("m.pt", older, shard, scored=True, weighted=True) == []
    assert mismatch_warnings("m.pt", saved, shard, scored=True, weighted=False) == []
    fewer = {**saved, "num_classes": 9}  # the labels name 7
    assert mismatch_warnings("m.pt", fewer, shard, True, weighted=False)[0].startswith(
        "m.pt predicts 9 classes but the data's labels name 7: the accuracies mean something "
        "only if label k is the model's class k")
    assert mismatch_warnings("m.pt", {**older, "num_classes": 9}, shard, False, True) == []
    gat, plain = GNN("gat", 1433, 16, 7, heads=2), GNN("gcn", 1433, 16, 7)
    assert not training.reads_edge_weights(gat, shard)
    assert training.reads_edge_weights(plain, shard)
    assert not training.reads_edge_weights(plain, dataset_shard(cora_ds, cfg, PhaseTimer(),
                                                                quiet))


def test_the_model_is_built_and_checked_before_the_data_is_loaded(run, cora_ds):
    """distgnn.predict (and distgnn-predict) read the model file and check
    --embeddings-layer against the model before a loader given as the source runs; a
    layer chosen for the returned embeddings alone (no file) is taken."""
    out, cfg, result = run
    loaded = []
    with pytest.raises(DistGNNError, match="--embeddings-layer 3: the model has 2 layers"):
        distgnn.predict(out / "model.pt", lambda: loaded.append(1), embeddings_layer=3,
                        with_embeddings=True, log=quiet)
    assert not loaded
    got = distgnn.predict(out / "model.pt", lambda: cora_ds, embeddings_layer=0,
                          with_embeddings=True, log=quiet)
    assert got.embeddings.shape == (2708, 1433)  # the first layer's input: x
