"""What every program (command line) of the project shares.

One-line errors and exit statuses, the parser that gives them, help that states every
default, the dataset flags.

User errors (bad files, bad flags, mismatched checkpoints) end with one line on stderr,
``PROG: error: ...``, and exit status 2 (or the error's own); Ctrl-C anywhere ends with one
line and 130; no traceback.
"""
from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
import threading

from .errors import DistGNNError
from .signals import EARLY_INTERRUPTS

__all__ = ["DefaultsHelpFormatter", "OneLineParser", "check_outputs_spare_inputs", "comma_list",
           "dataset_file_flags", "fail", "interruptible", "load_dataset", "peak_memory_line",
           "refuse_dataset_flags", "run_guarded", "say", "use_huge_pages"]

# what MPI launchers and SLURM tell each process of its rank in the job, before MPI starts
WORLD_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are a single line (argparse prints the whole usage first); in a
    job of several processes, the first prints it for all (each would print the same)."""

    def error(self, message: str):
        rank = next((os.environ[v] for v in WORLD_RANK_VARIABLES if v in os.environ), "0")
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n" if rank == "0" else None)

    def _get_values(self, action, arg_strings):
        # argparse's one hook where every given value meets its flag, subcommands' included:
        # an empty value read as "not given" would train the default dataset or write nothing
        if "" in arg_strings and action.nargs not in (argparse.REMAINDER, argparse.PARSER):
            name = "/".join(action.option_strings) or action.metavar or action.dest
            self.error(f"{name}: the value is empty; give one"
                       + (", or leave the flag out" if action.option_strings else ""))
        return super()._get_values(action, arg_strings)


def fail(prog: str, message: str) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def use_huge_pages() -> None:
    """Have torch's CPU allocator back large tensors with transparent huge pages.

    The allocator does so only when ``THP_MEM_ALLOC_ENABLE`` is set before its first
    allocation (full-batch epochs run about 1.5x faster here).  A user's own setting, 0
    included, wins.  Called by the programs that train, not on import: a library does not
    change its caller's environment."""
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def interruptible(prog: str):
    """Decorate a command-line entry point so that Ctrl-C ends it cleanly.

    Ctrl-C anywhere in it (parsing, imports, loading) ends with one line and status 130
    instead of a traceback.  Ctrl-C is recorded as it arrives, because a C extension being
    imported (numba's) turns the interrupt into an ``ImportError`` and other libraries may
    swallow it (training then stops before its first epoch:
    :data:`distgnn.signals.EARLY_INTERRUPTS`).  Inside an import the interrupt waits until
    the import is done (it is asked again every :data:`IMPORT_RETRY_S`): raised inside
    torch's initialisation, it aborts the process (SIGABRT)."""
    def wrap(main):
        @functools.wraps(main)
        def entry(argv: list[str] | None = None) -> int:
            pressed = EARLY_INTERRUPTS
            pressed.clear()

            def record(signum, frame):
                pressed.append(signum)
                if _importing(frame):
                    later = threading.Timer(IMPORT_RETRY_S, ask_again)
                    later.daemon = True
                    later.start()
                    return
                signal.default_int_handler(signum, frame)

            def ask_again():
                if signal.getsignal(signal.SIGINT) is record:  # still this entry point's
                    os.kill(os.getpid(), signal.SIGINT)

            installed = signal.getsignal(signal.SIGINT) is signal.default_int_handler
            if installed:
                signal.signal(signal.SIGINT, record)
            try:
                return main(argv)
            except (KeyboardInterrupt, ImportError) as e:
                if isinstance(e, ImportError) and not pressed:
                    raise
                print(f"{prog}: interrupted (Ctrl-C); nothing more was written",
                      file=sys.stderr)
                return 128 + signal.SIGINT
            finally:
                pressed.clear()
                if installed and signal.getsignal(signal.SIGINT) is record:
                    signal.signal(signal.SIGINT, signal.default_int_handler)
        return entry
    return wrap


# how often a Ctrl-C that came during an import is asked again, until the import is done
IMPORT_RETRY_S = 0.1


def _importing(frame) -> bool:
    """Whether ``frame`` runs inside an import (a module's body or the import system)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


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


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with every default stated: ``(default: X)``, or ``(default: none)`` for a
    flag that is off unless given (an output not written, an option not applied); not for
    switches, which are off unless given, nor where the text names its default itself."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ((action.nargs == 0 and not action.default) or action.default is argparse.SUPPRESS
                or "default" in text or not action.option_strings or action.required):
            return text
        if action.default is None:
            return f"{text} (default: none)"
        return super()._get_help_string(action)


def comma_list(kind=str, choices: tuple | None = None):
    """An argparse type for ``a,b,c``: each item converted by ``kind`` (and one of
    ``choices`` if given); a bad item is one line naming it."""
    def parse(text: str) -> list:
        items = [item.strip() for item in text.split(",")]
        try:
            values = [kind(item) for item in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of "
                                             f"{kind.__name__} values") from None
        unknown = [v for v in values if choices is not None and v not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(map(str, unknown))}; choose "
                                             f"from {', '.join(choices)}")
        return values
    return parse


def dataset_file_flags(group) -> None:
    """The flags that shape a dataset read from files (``distgnn.data.datasets.load``'s
    ``features``, ``labels``, ``symmetrize``, ``split_file``): the same in every tool that
    reads one (distgnn-train, distgnn-predict, distgnn-partition)."""
    group.add_argument("--features",
                       help="features file (.npy or text) for an edge-list dataset (default: "
                            "one feature, 1.0, per vertex)")
    group.add_argument("--labels",
                       help="labels file (.npy or text) for an edge-list dataset; -1 (or a "
                            "vertex absent from a keyed file) marks an unlabelled vertex "
                            "(default: label 0 for every vertex, in no split: nothing to train)")
    group.add_argument("--symmetrize", action="store_true",
                       help="add the reverse of every edge of a file's graph (an edge list "
                            "with one line per undirected edge); without it, the summary "
                            "line counts the edges that have no reverse")
    group.add_argument("--split-file", metavar="FILE",
                       help="the train/validation/test split to use instead of the "
                            "dataset's own (an edge list's default: a seeded random "
                            "60/20/20 of the labelled vertices): a text file of 'vertex "
                            "split' lines (split: train, val or test) in the dataset's "
                            "vertex ids, or an .npz with bool train_mask/val_mask/test_mask "
                            "[N]")


FILE_FLAGS = ("features", "labels", "symmetrize", "split_file")  # dataset_file_flags's


def refuse_dataset_flags(args, *more: str) -> None:
    """With ``--partitions``: refuse ``--dataset``, :func:`dataset_file_flags`' flags and
    ``more`` (partitions hold what those would shape)."""
    if args.dataset:
        raise DistGNNError("give --dataset or --partitions, not both")
    for flag in (*FILE_FLAGS, *more):
        if getattr(args, flag):
            raise DistGNNError(f"--{flag.replace('_', '-')} applies to --dataset; partitions "
                               "hold the graph, features, labels and split distgnn-partition "
                               "wrote")


def check_outputs_spare_inputs(args, outputs: dict[str, str | None], **inputs) -> None:
    """Refuse, before any data is read, an output on an input or on another output.

    Refused: an output (``{flag: path}``) that is a file the command reads (``--dataset``,
    ``--partitions``, the dataset files' flags, and ``inputs``: ``{name: path}``) or lies
    inside a directory it reads, and two outputs on one path
    (:func:`distgnn.storage.check_distinct_outputs`)."""
    from .storage import check_distinct_outputs

    read = {f"--{name.replace('_', '-')}": getattr(args, name, None)
            for name in ("dataset", "partitions", "features", "labels", "split_file")}
    check_distinct_outputs(outputs, {**read, **inputs})


def load_dataset(args, split: int = 0):
    """``args.dataset`` (default: the bundled cora) as :func:`distgnn.data.datasets.load` reads
    it with :func:`dataset_file_flags`' flags."""
    from .data.datasets import load

    return load(args.dataset or "cora", split=split,
                **{flag: getattr(args, flag) for flag in FILE_FLAGS})


def say(line: str) -> None:
    """A progress line on stdout, at once (ranks' output is interleaved by the launcher)."""
    print(line, flush=True)


def peak_memory_line(high_mib: float, mean_mib: float) -> str:
    """The peak resident memory of a run's ranks, max and mean over ranks."""
    return (f"peak memory per rank {high_mib / 1024:.2f} GiB (max), {mean_mib / 1024:.2f} GiB "
            "(mean)")
