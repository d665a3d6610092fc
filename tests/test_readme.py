"""The README's quick examples run as written, in order, on a fresh directory (so that they
cannot drift from the tools): the block after the ``readme-test`` marker."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BIN = Path(sys.executable).parent


def quick_commands() -> list[str]:
    """The commands of the README block marked ``readme-test`` (continuations joined)."""
    text = README.read_text()
    block = re.search(r"<!-- readme-test[^>]*-->\s*```sh\n(.*?)```", text, re.S).group(1)
    joined = block.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def test_the_quick_examples_run_in_order(tmp_path):
    commands = quick_commands()
    assert len(commands) >= 8 and any("--resume" in c for c in commands)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    for command in commands:
        argv = [str(BIN / a.removeprefix(".venv/bin/")) if a.startswith(".venv/bin/") else a
                for a in shlex.split(command)]
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}"
    assert (tmp_path / "runs" / "ck").is_dir() and (tmp_path / "runs" / "job.sbatch").is_file()
