"""``distgnn-partition``: vertex-cut partitioning of a graph into a partition directory."""
import sys


def main(argv: list[str] | None = None) -> int:
    print("distgnn-partition: error: not yet available: the Libra partitioner is being built",
          file=sys.stderr)
    return 2
