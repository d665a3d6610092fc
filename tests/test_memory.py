"""The memory estimate that refuses runs which cannot fit."""
import subprocess
import sys

import pytest

from distgnn.errors import DistGNNError
from distgnn.exchange.wire import row_bytes
from distgnn.run.config import TrainConfig
from distgnn.run.memory import predict, require, scaled_plans
from distgnn.run.memory import training_memory as estimate


def parts(cfg):
    """What the memory model reads of a configuration: its network, exchange and execution."""
    return cfg.network, cfg.exchange, cfg.execution


def test_float64_doubles_every_float_but_not_the_graph():
    single = estimate(1000, 5000, 32, 4, 16, 2)
    double = estimate(1000, 5000, 32, 4, 16, 2, value_bytes=8)
    assert double["model"] == 2 * single["model"]
    # the ReLU's masks (a byte per element of the hidden layer) are not floats either
    masks = 1000 * 16
    assert double["activations"] - masks == 2 * (single["activations"] - masks)
    # labels, masks and degrees (24 bytes per vertex) are not floats of the run's type
    assert double["features"] - 24 * 1000 == 2 * (single["features"] - 24 * 1000)
    assert double["graph"] == single["graph"] == 22 * 5000 + 40 * 1000
    assert double["runtime"] == single["runtime"] == 450 << 20
    # model: 5 copies of (F + 1) H + (H + 1) C floats
    assert single["model"] == 4 * 5 * (33 * 16 + 17 * 4)
    # a precomputed first aggregation keeps an aggregate as large as the features
    pre = estimate(1000, 5000, 32, 4, 16, 2, precompute_first=True)
    assert pre["features"] - single["features"] == 4 * 1000 * 32


def test_recompute_adds_a_tensor_at_the_widest_width():
    """Measured: checkpointing a 2-layer model raises the peak (the backward pass recomputes
    a layer while its output's gradient is held); the prediction and the check follow."""
    plain = estimate(1000, 5000, 32, 4, 16, 2)
    again = estimate(1000, 5000, 32, 4, 16, 2, recompute=True)
    assert again["activations"] - plain["activations"] == 4 * 1000 * 32
    recomputed = predict(*parts(TrainConfig(recompute=True)), 1000, 5000, 32, 4)
    # GCN on a whole graph folds its scale into a plan each way
    assert recomputed["total"] == estimate(1000, 5000, 32, 4, 16, 2, recompute=True,
                                           folded_scales=2)["total"]


@pytest.mark.parametrize("options, split_entries, plans", [
    ({}, 0, 2),  # GCN, a whole graph: q folded into a plan each way
    ({"model": "sage", "aggregator": "gcn"}, 0, 1),  # only its backward pass has a q
    ({"model": "sage", "aggregator": "mean"}, 0, 0),
    ({}, 100, 0),  # cd-0 combines the clones' sums apart from the fused kernel
    ({"algo": "0c"}, 100, 2),
    ({"dtype": "float64"}, 0, 0),  # float64 sums gather q in float64
    ({"backend": "torch"}, 0, 0),
])
def test_the_plans_that_fold_a_source_scale_are_counted_at_4_bytes_an_edge(options,
                                                                           split_entries,
                                                                           plans):
    cfg = TrainConfig(**options)
    assert scaled_plans(*parts(cfg), split_entries) == plans
    base = estimate(1000, 5000, 32, 4, 16, 2)["graph"]
    assert estimate(1000, 5000, 32, 4, 16, 2, folded_scales=plans)["graph"] \
        == base + 4 * 5000 * plans


def test_a_run_that_cannot_fit_is_refused_with_its_parts():
    cfg = TrainConfig(hidden=10 ** 7, layers=3, dtype="float64")
    with pytest.raises(DistGNNError, match="needs about .*activations"):
        require(*parts(cfg), 10 ** 6, 10 ** 7, 100, 4, "cpu", "data")
    require(*parts(TrainConfig(hidden=16)), 1000, 5000, 32, 4, "cpu", "data")  # fits: no error


def test_attention_adds_its_per_edge_tensors():
    """GAT keeps six [E, H] tensors per layer; an edge-heavy GAT run is refused where the same
    GCN fits."""
    plain = estimate(1000, 5000, 32, 4, 16, 2)
    gat = estimate(1000, 5000, 32, 4, 16, 2, heads=8)
    # ... and its ELU keeps its output (4 bytes per element) where a ReLU keeps a mask (1)
    assert gat["activations"] - plain["activations"] == 6 * 4 * 5000 * 8 * 2 + 3 * 1000 * 16
    edges = 10 ** 8  # 2.4 GB of graph copies; GAT's 8 heads x 2 layers add 38 GB
    require(*parts(TrainConfig(model="gcn")), 10 ** 4, edges, 8, 2, "cpu", "data")
    with pytest.raises(DistGNNError, match="needs about"):
        require(*parts(TrainConfig(model="gat", heads=8, hidden=64)), 10 ** 4, edges, 8, 2,
                "cpu", "data")


def test_gin_counts_its_mlp_weights():
    """GIN's MLP has a hidden x hidden weight in every layer: at --hidden 65536 that is 17 GB
    of weights (86 GB with gradients and Adam), refused on cora's size; the same GCN fits."""
    plain = estimate(2708, 10556, 1433, 7, 16, 2)
    gin = estimate(2708, 10556, 1433, 7, 16, 2, mlp=16)
    # per layer d_in m + m + (m + 1) d_out, five copies of each float
    assert gin["model"] == 4 * 5 * ((1433 * 16 + 16 + 17 * 16) + (16 * 16 + 16 + 17 * 7))
    assert gin["activations"] - plain["activations"] == 4 * 2708 * 2 * 3 * 16
    require(*parts(TrainConfig(model="gcn", hidden=65536)), 2708, 10556, 1433, 7, "cpu",
            "cora")
    with pytest.raises(DistGNNError, match="needs about .*model"):
        require(*parts(TrainConfig(model="gin", hidden=65536)), 2708, 10556, 1433, 7, "cpu",
                "cora")


def test_delayed_exchange_counts_its_bins_at_the_widths_it_carries():
    """cd-r's state grows with --delay (6 KiB of bookkeeping per bin and exchange), and
    with the split entries at the width of each exchange: three rows of values and a
    received row per entry (twice that on a compressed wire; the default schedule a row and
    16 bytes more), never the features' width that no exchange carries."""
    base = estimate(1000, 5000, 32, 4, 16, 2)
    cdr = estimate(1000, 5000, 32, 4, 16, 2, delayed_widths=(16, 4, 4), delay=100,
                   split_entries=50)
    assert cdr["delayed exchange"] == sum(6 * 1024 * 100 + 50 * 4 * 4 * w for w in (16, 4, 4))
    # the split entries' tables are there for cd-0 too, and the exact exchange's buffers at
    # the peak: a row per entry at the widest exchanged width, min(32, 16)
    buffers = 50 * 4 * 16
    assert cdr["exchange"] == 50 * 80
    assert cdr["activations"] - base["activations"] == buffers
    assert cdr["total"] - base["total"] == cdr["delayed exchange"] + cdr["exchange"] + buffers
    big = predict(*parts(TrainConfig(algo="cd-r", delay=100_000, layers=100)), 2708, 10556,
                  1433, 7,
                  split_entries=500)
    # 100 layers x 2 passes x 10^5 bins x 6 KiB = 123 GB
    assert big["delayed exchange"] > 100 * 2 * 100_000 * 6 * 1024
    # cora's 1433 features, hidden 16, 7 classes: the layers aggregate at 16 and 7 wide,
    # both passes of both layers exchange (the first layer projects first)
    small = predict(*parts(TrainConfig(algo="cd-r", delay=5)), 2708, 10556, 1433, 7,
                    split_entries=500)
    assert small["delayed exchange"] == sum(6 * 1024 * 5 + 500 * 16 * w for w in (16, 7, 16, 7))
    # the default schedule: one bin, an int4 wire (compressed: residuals and encoded rows),
    # and what the drift measures (a row of what the remote terms moved, 16 bytes of positions)
    default = predict(*parts(TrainConfig(algo="cd-r")), 2708, 10556, 1433, 7,
                      split_entries=500)
    int4 = {16: row_bytes("int4", 16), 7: row_bytes("int4", 7)}
    assert default["delayed exchange"] == sum(
        6 * 1024 + 500 * (4 * 4 * w + 2 * int4[w] + 4 * w + 16) for w in (16, 7, 16, 7))
    assert predict(*parts(TrainConfig(algo="cd-0")), 2708, 10556, 1433, 7,
                   split_entries=500)["delayed exchange"] == 0


class _Ranks:
    """A communicator of ``size`` ranks on one node whose allreduce adds the rows the
    other ranks would have written: copies of this rank's."""

    def __init__(self, size):
        self.rank, self.size = 0, size

    def allreduce(self, table, op="sum"):
        table[1:] = table[0]


def test_the_ranks_of_a_node_are_refused_together():
    """Each rank's prediction fits the node alone; as many ranks as the node's memory holds
    once are accepted, and twice that many refused, with the count and both sizes."""
    from distgnn.run.memory import available_bytes, held_bytes, require_on_node

    have = available_bytes("cpu") + held_bytes("cpu")
    need = {"runtime": have // 4, "total": have // 4}
    require_on_node(_Ranks(2), need, "cpu", "p")  # 2 x 1/4 of the node: fits
    with pytest.raises(DistGNNError, match=r"p: the 8 ranks on this node need about .* "
                                           r"\(this one .*runtime .*\) but cpu has"):
        require_on_node(_Ranks(8), need, "cpu", "p")


def test_training_keeps_a_byte_per_element_of_each_hidden_relu():
    """A hidden layer's ReLU is kept as a mask: the activations of a model grow by one byte
    per vertex for each unit of hidden width kept by the ReLU, and by a float for the
    input of the layer after it."""
    narrow = estimate(1000, 5000, 32, 4, 16, 2)
    wide = estimate(1000, 5000, 32, 4, 17, 2)
    # one more hidden unit: a mask byte, the next layer's input and the widest gradient
    assert wide["activations"] - narrow["activations"] == 1000 * (1 + 4 + 0)


def test_bf16_mixed_keeps_its_saved_activations_and_features_at_two_bytes():
    """Under bf16-mixed the activations autograd keeps (each layer's input, the output
    layer's output) and the features take 2 bytes an element where fp32 takes 4; the
    gradients, the logits and everything else stay as they are."""
    fp32 = predict(*parts(TrainConfig(hidden=64)), 1000, 5000, 32, 4)
    mixed = predict(*parts(TrainConfig(hidden=64, precision="bf16-mixed")), 1000, 5000, 32, 4)
    assert fp32["activations"] - mixed["activations"] == 2 * 1000 * (32 + 64 + 4)
    assert fp32["features"] - mixed["features"] == 2 * 1000 * 32
    assert {k: v for k, v in fp32.items() if k not in ("activations", "features", "total")} \
        == {k: v for k, v in mixed.items() if k not in ("activations", "features", "total")}


@pytest.mark.parametrize("config, fused", [
    ({}, True), ({"model": "sage", "aggregator": "gcn"}, True),
    ({"model": "sage", "aggregator": "mean"}, False), ({"model": "gat"}, False),
    ({"residual": True, "layers": 3}, False), ({"recompute": True}, False)])
def test_fused_models_are_planned_without_the_copies_their_epilogues_write_over(config,
                                                                                fused):
    """GCN and GraphSAGE-gcn without residuals or recomputation: each hidden activation is
    written over its product's output and the last projection's input gradient over that
    activation, so neither a mask byte per element nor the widest gradient is planned (2
    layers), nor the dropped input beside them (freed once aggregated).  Other models keep
    the general plan."""
    cfg = TrainConfig(hidden=64, **config)
    n, f, c = 1000, 32, 4
    got = predict(*parts(cfg), n, 5000, f, c)["activations"]
    widths = (f,) + (cfg.hidden,) * (cfg.layers - 1) + (c,)
    fused_plan = (4 * n * sum(widths[:-1]) + 4 * n * c + n * sum(widths[1:-1]) // 8
                  + (cfg.layers > 2) * 4 * n * cfg.hidden + 3 * 4 * n * c)
    assert (got == fused_plan) == fused


def test_the_first_aggregation_is_the_fused_peak_where_its_copies_are_the_widest():
    """Under bf16-mixed the dropped features (2 bytes) and their float32 sums (4) of a first
    layer that aggregates ``F = H`` wide outweigh what the products keep (2 bytes of each
    operand); projecting first (``F > H``) or precomputed, the products' terms are the plan."""
    n, c, h = 1000, 4, 256
    kept = 2 * n * (h + h) + 2 * n * c + n * h // 8 + 3 * 4 * n * c
    for f, precomputed, want in ((256, False, 6 * n * 256), (256, True, None),
                                 (512, False, None)):
        got = estimate(n, 0, f, c, h, 2, saved_bytes=2, feature_bytes=2, fused=True,
                       precompute_first=precomputed)["activations"]
        assert got == (want or kept + 2 * n * (f - h)), (f, precomputed)


def test_freed_blocks_go_back_to_the_kernel():
    """After one large block has been freed, glibc serves blocks up to 32 MiB from its heap
    and keeps them resident when they are freed; with return_freed_blocks they are unmapped."""
    script = """
import sys, numpy as np
from distgnn.run.memory import process_mib, return_freed_blocks
if sys.argv[1] == "fixed" and not return_freed_blocks():
    print("no glibc"); sys.exit()
np.ones(4 << 20, np.float32)  # 16 MiB mapped and freed at once: glibc raises its threshold
before = process_mib("VmRSS")
blocks = [np.ones(1 << 18, np.float32) for _ in range(96)]  # 96 x 1 MiB
pin = np.ones(1 << 18, np.float32)  # above them: the heap's top cannot be trimmed
del blocks
print(process_mib("VmRSS") - before)
"""
    held = {}
    for mode in ("default", "fixed"):
        out = subprocess.run([sys.executable, "-c", script, mode], capture_output=True,
                             text=True, check=True).stdout.strip()
        if out == "no glibc":
            pytest.skip("malloc is not glibc's")
        held[mode] = float(out)
    assert held["default"] > 64, held  # the freed blocks stayed resident
    assert held["fixed"] < 16, held


def test_the_rates_add_up_to_the_prediction_of_any_share_of_the_graph():
    """``memory_rates`` is ``training_memory`` split into a fixed part and rates per vertex,
    edge and split entry: they give its total exactly for any sizes, and the fixed part is
    the runtime and the model, which no cut changes."""
    from distgnn.run.memory import RUNTIME_BYTES, memory_rates

    options = dict(saved_bytes=2, delayed_widths=(16,), delay=2)
    rates = memory_rates(128, 7, 64, 3, **options)
    for n, e, s in ((1, 0, 0), (2708, 10556, 0), (10**6, 3 * 10**7, 4 * 10**5)):
        total = estimate(n, e, 128, 7, 64, 3, split_entries=s, **options)["total"]
        assert total == (rates["fixed"] + rates["vertex"] * n + rates["edge"] * e
                         + rates["split_entry"] * s)
    parts = estimate(0, 0, 128, 7, 64, 3, **options)
    assert rates["fixed"] == parts["runtime"] + parts["model"] + parts["delayed exchange"]
    assert rates["runtime"] == RUNTIME_BYTES and rates["vertex"] > rates["edge"] > 0
    # the fused plan is the larger of two moments: its rates bound it from above, and are
    # exact where a share has no split entries (the moment of the products is its peak)
    fused = dict(saved_bytes=2, feature_bytes=2, fused=True)
    rates = memory_rates(128, 7, 256, 2, **fused)
    over = []
    for n, e, s in ((2708, 10556, 0), (10**6, 3 * 10**7, 4 * 10**5), (10**6, 0, 10**6)):
        total = estimate(n, e, 128, 7, 256, 2, split_entries=s, **fused)["total"]
        over.append(rates["fixed"] + rates["vertex"] * n + rates["edge"] * e
                    + rates["split_entry"] * s - total)
    assert over[0] == 0 and over[1] > 0 and over[2] > 0
