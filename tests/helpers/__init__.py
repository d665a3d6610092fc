"""What several test modules share: graph and dataset builders, training, fuzzing, the
hostile cases (imported as ``tests.helpers``; ``pythonpath`` in pyproject.toml)."""
