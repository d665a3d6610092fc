"""distgnn-bench spmm runs end to end on a tiny graph and writes the documented JSON."""
import json
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def test_bench_spmm_writes_json(tmp_path):
    out = tmp_path / "spmm.json"
    proc = subprocess.run(
        [str(BIN / "distgnn-bench"), "spmm", "--dataset", "rmat:scale=9,edge_factor=4,features=1",
         "--widths", "8,32", "--reps", "1", "--threads", "1", "--sweep", "--json", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "fwd x" in proc.stdout and "sweep d=32" in proc.stdout
    result = json.loads(out.read_text())
    assert result["benchmark"] == "spmm" and result["num_nodes"] == 512
    assert result["machine"]["triad_gb_s"] > 0
    assert result["machine"]["cached_start_s"] > 0
    assert [r["width"] for r in result["results"]] == [8, 32]
    for r in result["results"]:
        for key in ("numba_fwd", "torch_fwd", "scipy_fwd", "numba_bwd", "torch_bwd"):
            assert r[key] > 0
        assert r["speedup_fwd"] > 0 and r["eff_gb_s_fwd"] > 0
    for s in result["sweep"]:
        assert str(s["chosen"]) in s["times"] and s["chosen_over_best"] >= 1.0


def test_bench_needs_a_subcommand():
    proc = subprocess.run([str(BIN / "distgnn-bench")], capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
