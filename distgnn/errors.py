"""The exception type the command-line tools turn into a one-line error and an exit status."""


class DistGNNError(Exception):
    """A problem with the user's input or environment (not a bug in distgnn).

    ``exit_status`` is what the command-line tools exit with (2 unless a subclass says).
    """

    exit_status = 2
