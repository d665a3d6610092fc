"""What every program (command line) of the project shares.

One-line errors and exit statuses, the parser that gives them, help that states every
default, the dataset flags.

User errors (bad files, bad flags, mismatched checkpoints) end with one line on stderr,
``PROG: error: ...``, and exit status 2 (or the error's own); Ctrl-C anywhere ends with one
line and 130, SIGTERM outside training's epochs with one line and 143, SIGHUP (a closed
terminal) as SIGTERM with 129; no traceback.
"""
from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
import threading
import time

from .errors import DistGNNError
from .signals import EARLY_INTERRUPTS, Terminated, stop_now, stopping

__all__ = ["DefaultsHelpFormatter", "OneLineParser", "check_outputs_spare_inputs", "comma_list",
           "dataset_file_flags", "fail", "interruptible", "load_dataset", "peak_memory_line",
           "refuse_dataset_flags", "run_guarded", "say", "use_huge_pages"]

# what MPI launchers and SLURM tell each process of its rank in the job, before MPI starts
WORLD_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
# how long a rank other than the first waits, under Open MPI, for the first to report a bad
# flag for the job
OTHER_RANKS_WAIT_S = 30


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are a single line (argparse prints the whole usage first); in a
    job of several processes, the first prints it for all (each would print the same); under
    Open MPI the others wait up to :data:`OTHER_RANKS_WAIT_S` to be ended with the job."""

    def error(self, message: str):
        rank = next((os.environ[v] for v in WORLD_RANK_VARIABLES if v in os.environ), "0")
        if rank != "0":  # rank 0 parses the same flags and says this for the job
            if "OMPI_COMM_WORLD_RANK" not in os.environ:
                self.exit(2)
            # Open MPI's launcher (which sets that variable) ends the job at its first failed
            # rank, which could be this one before rank 0 has said why: this rank waits to
            # be ended with the job (without a stop line of its own), or says it itself
            for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(s, signal.SIG_DFL)
            time.sleep(OTHER_RANKS_WAIT_S)
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

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
    """Decorate a command-line entry point so that Ctrl-C, SIGTERM and SIGHUP end it cleanly.

    Ctrl-C anywhere in it (parsing, imports, loading, writing) ends with one line and
    status 130 instead of a traceback, SIGTERM with one line and 143 and SIGHUP (a closed
    terminal; left alone when ignored, as under ``nohup``) with one line and 129 instead of
    an immediate end: each raises where the process is (``KeyboardInterrupt``,
    :class:`distgnn.signals.Terminated`), so every writer on the way out removes what it
    made beside its target.  Training takes them over while it runs its epochs
    (:class:`distgnn.signals.StopRequests`).  A stop signal is recorded as it arrives,
    because a C extension being imported (numba's) turns the interrupt into an
    ``ImportError`` and other libraries may swallow it (training then stops before its
    first epoch: :data:`distgnn.signals.EARLY_INTERRUPTS`).  Inside an import the stop
    waits until the import is done (it is asked again every :data:`IMPORT_RETRY_S`):
    raised inside torch's initialisation, it aborts the process (SIGABRT).  Once a stop is
    on its way out, further ones are not raised (:func:`distgnn.signals.stopping`), and
    from its last line on the process ignores Ctrl-C: it is ending, and a second Ctrl-C
    must not turn its end into a traceback."""
    def wrap(main):
        @functools.wraps(main)
        def entry(argv: list[str] | None = None) -> int:
            pressed = EARLY_INTERRUPTS
            pressed.clear()

            def record(signum, frame):
                pressed.append(signum)
                if stopping():  # one is on its way out: its clean-ups and line go on
                    return
                if _importing(frame):
                    later = threading.Timer(IMPORT_RETRY_S, ask_again, (signum,))
                    later.daemon = True
                    later.start()
                    return
                stop_now(signum)

            def ask_again(signum):
                if signal.getsignal(signum) is record:  # still this entry point's
                    os.kill(os.getpid(), signum)

            installed = [s for s, default in STOP_DEFAULTS.items()
                         if signal.getsignal(s) == default]
            for s in installed:
                signal.signal(s, record)
            ended = False
            try:
                return main(argv)
            except (KeyboardInterrupt, Terminated, ImportError) as e:
                if isinstance(e, ImportError) and not pressed:
                    raise
                signum = (e.signum if isinstance(e, Terminated) else pressed[0]
                          if isinstance(e, ImportError) else signal.SIGINT)
                ended = True
                for s in installed:  # from here on the program only ends
                    signal.signal(s, signal.SIG_IGN)
                print(f"{prog}: {STOP_WORDS.get(signum, signal.Signals(signum).name)}; "
                      "nothing more was written", file=sys.stderr)
                return 128 + signum
            finally:
                pressed.clear()
                for s in installed:
                    if ended and s == signal.SIGINT:
                        continue  # ignored until the process exits, which is all it does now
                    if ended or signal.getsignal(s) is record:
                        signal.signal(s, STOP_DEFAULTS[s])
        return entry
    return wrap


# the stop signals an entry point takes over while it runs, with the handler each has when
# nobody took it (an embedding program's own handler is left alone)
STOP_DEFAULTS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL,
                 signal.SIGHUP: signal.SIG_DFL}
# what an entry point's last line says of each
STOP_WORDS = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "stopped by SIGTERM",
              signal.SIGHUP: "stopped by SIGHUP"}


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
