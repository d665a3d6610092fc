"""The trainer's command lines: ``distgnn-train`` (``train``) and ``distgnn-predict`` (``predict``).

Each parses its flags, calls the run and prints; what every command line of the project
shares (one-line errors, Ctrl-C, help with defaults, the dataset flags) is
:mod:`distgnn.program`."""
