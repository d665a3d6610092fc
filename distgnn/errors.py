"""The exception type the command-line tools turn into a one-line error and an exit status."""


class DistGNNError(Exception):
    """A problem with the user's input or environment (not a bug in distgnn).

    ``exit_status`` is what the command-line tools exit with (2 unless a subclass says).
    """

    exit_status = 2


def one_line(error: Exception) -> str:
    """The first line of ``error``'s message (an OSError's reason without the file name,
    which the caller says already), or its type name when it has no message."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
