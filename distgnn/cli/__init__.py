"""The trainer's command lines: ``distgnn-train`` (``train``), ``distgnn-predict``
(``predict``) and what every command line of the project shares (``common``: one-line
errors, Ctrl-C, help with defaults, the dataset flags).  Parse, call the run, print."""
