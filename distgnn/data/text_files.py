"""Text data files: where the data starts, its delimiter and header, its first bad line.

Every text file a dataset comes in (edge lists, side files, split files, OGB's
``.csv.gz``) is read as UTF-8 (``.gz`` decompressed) without a byte-order mark; ``#``
starts a comment; a line is split at commas if the first data line has one, else at
whitespace.  A first line that the loader's tests reject, above one they accept, is a
header (:func:`find_table`), skipped and noted.  Numbers are parsed by numpy's C reader;
only a malformed file is re-scanned line by line, to name its first bad line."""
from __future__ import annotations

import contextlib
import dataclasses
import gzip
import re
import warnings
import zlib
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..errors import one_line
from .graph import GraphError

# Errors of reading a file that is missing, a directory, unreadable, a damaged gzip stream.
READ_ERRORS = (OSError, EOFError, zlib.error)


def joined_notes(*notes: str) -> str:
    """The non-empty ``notes`` as one line."""
    return "; ".join(filter(None, notes))


_INTEGER = re.compile(r"[+-]?[0-9]+")


def is_integer(text: str) -> bool:
    return _INTEGER.fullmatch(text) is not None


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class Line:
    """A data line: its number (from 1), its text without the comment, its fields
    (stripped) and the delimiter that split them (None: whitespace)."""

    number: int
    text: str
    fields: list[str]
    delimiter: str | None


@dataclasses.dataclass(frozen=True)
class Table:
    """Where the data of the text file ``path`` starts: ``first``, its first data line,
    whose delimiter splits every line, after the ``skip`` lines numpy's reader passes over,
    which end with ``header`` when the first line that is not a comment is a header."""

    path: Path
    first: Line
    skip: int = 0
    header: Line | None = None

    def note(self) -> str:
        """What a user is told of the skipped header (``""``: none)."""
        if self.header is None:
            return ""
        text = self.header.text if len(self.header.text) <= 40 else self.header.text[:40] + "..."
        return f"{self.path.name}: line {self.header.number} ({text!r}) is a header, skipped"

    def read(self, dtype, **options) -> np.ndarray:
        """The data lines parsed by numpy's reader into ``dtype`` (``options``: ``loadtxt``'s);
        a byte-order mark is dropped."""
        with warnings.catch_warnings():
            # numpy reads in chunks and warns that a comment line is not counted
            warnings.simplefilter("ignore", UserWarning)
            return np.loadtxt(self.path, dtype=dtype, delimiter=self.first.delimiter,
                              comments="#", skiprows=self.skip, encoding="utf-8-sig",
                              **options)

    def first_bad_line(self, problem: Callable[[list[str]], str | None]) -> GraphError | None:
        """A GraphError for the first data line whose fields ``problem`` finds fault with
        (its words, after the line number), or None; a slow line-by-line re-scan."""
        for line in data_lines(self.path, self):
            found = problem(line.fields)
            if found:
                return GraphError(f"line {line.number}: {found}", self.path)
        return None


def find_table(path: Path, *tests: Callable[[list[str]], bool]) -> Table | None:
    """The :class:`Table` of ``path`` (None: no data line).

    ``tests`` take a line's fields and accept data lines; the first line that is not a
    comment is a header, skipped, when one of them rejects it and accepts the next line
    (``src dst`` above ``0 1``).  Each line is split at commas if it has one, else at
    whitespace, until the first data line fixes the delimiter.
    """
    with contextlib.closing(data_lines(path)) as lines:
        first = next(lines, None)
        second = next(lines, None)
    if first is None:
        return None
    if second is not None and any(not test(first.fields) and test(second.fields)
                                  for test in tests):
        return Table(path, second, first.number, first)
    return Table(path, first)


def data_lines(path: Path, table: Table | None = None) -> Iterator[Line]:
    """The non-blank, non-comment lines of ``path``, each a :class:`Line`.

    The file is read as UTF-8 (``.gz``: decompressed), without a byte-order mark at the start
    of the file: from the start, each line split at a comma if it has one, else at
    whitespace; or, with ``table``, from its first data line, split at its delimiter."""
    skip = 0 if table is None else table.skip
    with _open_binary(path) as lines:
        for number, raw in enumerate(lines, 1):
            if number <= skip:
                continue
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError:
                raise GraphError(f"line {number}: not UTF-8 text", path) from None
            body = line.partition("#")[0]
            if not body.strip():
                continue
            delimiter = (("," if "," in body else None) if table is None
                         else table.first.delimiter)
            yield Line(number, body.strip(), [f.strip() for f in body.split(delimiter)],
                        delimiter)


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


@contextlib.contextmanager
def reading(path: Path) -> Iterator[None]:
    """Turn an error of reading ``path`` (see ``READ_ERRORS``) into a GraphError naming it."""
    try:
        yield
    except READ_ERRORS as e:
        raise GraphError(f"cannot read: {one_line(e)}", path) from None


# ---- small file helpers ------------------------------------------------------------------------
def required(path: Path) -> Path:
    if not path.exists():
        raise GraphError("missing file", path)
    return optional(path)


def optional(path: Path) -> Path | None:
    """``path`` if it is a file, None if it does not exist; anything else is an error."""
    if not path.exists():
        return None
    if not path.is_file():
        raise GraphError("not a regular file", path)
    return path
