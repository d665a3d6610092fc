"""The Triton kernels of GPU ranks and the triton backend (tests/helpers/triton_checks.py):
on a GPU when there is one, else on the CPU under Triton's interpreter; skipped where
Triton is not installed (it comes with CUDA builds of PyTorch; ``pip install triton`` on a
CPU machine)."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                reason="Triton is not installed")


def run_check(check: str) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([sys.executable, "-m", "tests.helpers.triton_checks", check, device],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("check", ["kernels", "layers", "repeat"])
def test_triton_kernels_match_their_references(check):
    run_check(check)
