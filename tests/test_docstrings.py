"""Docstrings in a form a reader scans: one that runs past three lines opens with a
one-line summary (a paragraph of its own), before the maths and the shapes.

Checked from the source (``ast``) over every module, class and function of the packages."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("distgnn", "partition", "launch", "bench")


def long_docstrings_without_a_summary(source: str) -> list[tuple[int, str]]:
    """(line, name) of each docstring in ``source`` longer than three lines whose first
    paragraph runs over more than one line."""
    found = []
    tree = ast.parse(source)
    for node in [tree, *ast.walk(tree)]:
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)):
            continue
        doc = ast.get_docstring(node, clean=True)
        if doc is None:
            continue
        lines = doc.split("\n")
        first_paragraph = doc.split("\n\n")[0]
        if len(lines) > 3 and "\n" in first_paragraph:
            found.append((getattr(node, "lineno", 1), getattr(node, "name", "<module>")))
    return sorted(set(found))


def test_the_check_sees_a_docstring_without_a_summary():
    good = 'def f():\n    """One line.\n\n    a\n    b\n    c"""\n'
    bad = 'def g():\n    """Two lines\n    of summary.\n    a\n    b"""\n'
    short = 'class C:\n    """Two lines\n    are short enough."""\n'
    assert long_docstrings_without_a_summary(good + short) == []
    assert long_docstrings_without_a_summary(bad) == [(1, "g")]


def test_every_long_docstring_opens_with_a_one_line_summary():
    problems = [f"{path.relative_to(ROOT)}:{line} {name}"
                for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
                for line, name in long_docstrings_without_a_summary(path.read_text())]
    assert not problems, "docstrings over three lines without a one-line summary:\n" + \
        "\n".join(problems)
