"""The import layers of the project, written once here: a module may import its own layer
and the layers below it, never one above.  Checked from the source (``ast``; nothing is
imported), function-local imports included."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# bottom to top; a prefix names a module or a package (and everything in it)
LAYERS = [
    ("distgnn.errors",),
    ("distgnn.storage", "distgnn.timing", "distgnn.signals", "distgnn.options"),
    ("distgnn.kernels",),
    ("distgnn.data",),
    ("distgnn.placement",),
    ("distgnn.nn",),
    ("distgnn.comm",),
    ("distgnn.exchange",),
    ("distgnn.run",),
    ("distgnn.api", "distgnn.cli", "distgnn.program", "distgnn"),
    ("partition",),
    ("launch",),
    ("bench",),
]
PACKAGES = ("distgnn", "partition", "launch", "bench")


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the longest prefix naming ``module``."""
    best, where = "", None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, where = prefix, i
    assert where is not None, f"{module} is in no layer: add it to LAYERS"
    return where


def imports(path: Path, module: str) -> list[tuple[str, int]]:
    """``(imported module, line)`` of every import of the project's packages in ``path``."""
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out += [(f"{target}.{a.name}", node.lineno) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
    return [(t, line) for t, line in out if t.split(".")[0] in PACKAGES]


def test_no_import_runs_upward():
    upward = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            mine = layer_of(module)
            for target, line in imports(path, module):
                if layer_of(target) > mine:
                    upward.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not upward, "imports that run upward:\n" + "\n".join(upward)


def test_every_module_has_a_layer():
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            layer_of(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
