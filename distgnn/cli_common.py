"""What every command-line tool of the project shares: one-line errors and exit statuses.

User errors (bad files, bad flags, mismatched checkpoints) end with one line on stderr,
``PROG: error: ...``, and exit status 2 (or the error's own); Ctrl-C anywhere ends with one
line and 130; no traceback.
"""
from __future__ import annotations

import argparse
import functools
import signal
import sys

from .errors import DistGNNError


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are a single line (argparse prints the whole usage first)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def fail(prog: str, message: str) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def interruptible(prog: str):
    """Decorate a command-line entry point so that Ctrl-C anywhere in it (parsing, imports,
    loading) ends with one line and status 130 instead of a traceback."""
    def wrap(main):
        @functools.wraps(main)
        def entry(argv: list[str] | None = None) -> int:
            try:
                return main(argv)
            except KeyboardInterrupt:
                print(f"{prog}: interrupted (Ctrl-C); nothing more was written",
                      file=sys.stderr)
                return 128 + signal.SIGINT
        return entry
    return wrap


def run_guarded(prog: str, command) -> int:
    """``command()``'s exit status, or one line on stderr and a non-zero status: 2 (or the
    error's own) for a user error."""
    try:
        return command()
    except DistGNNError as e:
        fail(prog, str(e))
        return e.exit_status
    except OSError as e:
        return fail(prog, str(e))
