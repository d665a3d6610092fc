"""The one exception type the command-line tools turn into a one-line error and exit 2."""


class DistGNNError(Exception):
    """A problem with the user's input or environment (not a bug in distgnn)."""
