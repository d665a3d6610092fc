"""``distgnn-bench``: one subcommand per module of this package (each owns its flags,
``add_arguments``, and its work, ``main``)."""
from __future__ import annotations

import argparse

from distgnn.program import (
    DefaultsHelpFormatter,
    OneLineParser,
    interruptible,
    run_guarded,
    use_huge_pages,
)

# subcommand -> its module of this package
BENCHMARKS = {"spmm": "spmm", "epoch": "epoch", "comm": "comm", "predict": "scaling",
              "report": "report", "partition": "partition", "resume": "resume",
              "phases": "phases"}


def bench_parser() -> argparse.ArgumentParser:
    """``distgnn-bench``'s parser: a subparser per :data:`BENCHMARKS` entry."""
    import importlib

    p = OneLineParser(prog="distgnn-bench",
                      description="Benchmarks that print tables and write JSON.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name, module_name in BENCHMARKS.items():
        module = importlib.import_module(f"bench.{module_name}")
        s = sub.add_parser(name, help=module.HELP, description=module.DESCRIPTION,
                           formatter_class=DefaultsHelpFormatter)
        module.add_arguments(s)
        s.set_defaults(main=module.main)
    return p


@interruptible("distgnn-bench")
def bench_main(argv: list[str] | None = None) -> int:
    use_huge_pages()
    args = bench_parser().parse_args(argv)
    from bench.output import check_outputs

    def run():
        check_outputs(args)  # before the work, not after it
        return args.main(args)

    return run_guarded("distgnn-bench", run)
