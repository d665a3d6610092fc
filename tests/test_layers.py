"""The import layers of the project, written once here: a module may import its own layer
and the layers below it, never one above.

Checked from the source (``ast``; nothing is imported), function-local imports included.
``python -m tests.test_layers`` prints the imports between layers as a table."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# bottom to top; a prefix names a module or a package (and everything in it)
LAYERS = [
    ("distgnn.errors",),
    ("distgnn.storage", "distgnn.spill", "distgnn.timing", "distgnn.signals", "distgnn.options"),
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


def modules():
    """``(path, module name)`` of every module of the project's packages."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            yield path, ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_runs_upward():
    upward = []
    for path, module in modules():
        mine = layer_of(module)
        for target, line in imports(path, module):
            if layer_of(target) > mine:
                upward.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not upward, "imports that run upward:\n" + "\n".join(upward)


def import_table() -> str:
    """The imports between layers as a Markdown table: row ``i``, column ``j`` counts the
    imported names of layer ``j`` in layer ``i``'s modules (in brackets: its modules)."""
    names = [", ".join(prefixes) for prefixes in LAYERS]
    counts = [[0] * len(LAYERS) for _ in LAYERS]
    sizes = [0] * len(LAYERS)
    for path, module in modules():
        mine = layer_of(module)
        sizes[mine] += 1
        for target, _ in imports(path, module):
            if layer_of(target) != mine:
                counts[mine][layer_of(target)] += 1
    rows = ["| imports from → | " + " | ".join(str(j) for j in range(len(LAYERS))) + " |",
            "|---" * (len(LAYERS) + 1) + "|"]
    for i, name in enumerate(names):
        cells = " | ".join(str(c) if c else "·" for c in counts[i])
        rows.append(f"| {i}: {name} ({sizes[i]}) | {cells} |")
    return "\n".join(rows)


def test_every_module_has_a_layer():
    for _, module in modules():
        layer_of(module)


def public_names(module: str) -> set[str] | None:
    """The names ``module`` declares public: its ``__all__`` (a literal list, or ``[*EXPORTS,
    ...]`` over a literal dict, as :mod:`distgnn` lazily exports), ``None`` without one."""
    parts = module.split(".")
    path = ROOT.joinpath(*parts).with_suffix(".py")
    if not path.exists():
        path = ROOT.joinpath(*parts, "__init__.py")
    tree = ast.parse(path.read_text())
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
    if "__all__" not in values:
        return None
    names = set()
    for element in values["__all__"].elts:
        if isinstance(element, ast.Starred):
            names |= set(ast.literal_eval(values[element.value.id]))
        else:
            names.add(ast.literal_eval(element))
    return names


def is_module(module: str) -> bool:
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def test_experiments_use_only_public_names():
    """``experiments/`` import the project only through names a module or package declares
    public in its ``__all__`` (or whole modules): the library's private corners can change
    without breaking them."""
    private = []
    for path in sorted((ROOT / "experiments").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module
                    and node.module.split(".")[0] in PACKAGES):
                continue
            declared = public_names(node.module)
            for alias in node.names:
                if is_module(f"{node.module}.{alias.name}"):
                    continue
                if declared is None or alias.name not in declared:
                    private.append(f"{path.name}:{node.lineno} {node.module}.{alias.name}")
    assert not private, "names the experiments import that are not public:\n" + \
        "\n".join(private)


def test_a_moved_module_names_its_new_place():
    """The modules of the flat library that moved: importing one fails with one line naming
    where its contents live now; every new place exists."""
    import importlib

    import pytest

    import distgnn

    for old, new in distgnn.MOVED.items():
        with pytest.raises(ModuleNotFoundError, match=f"^{old} moved: use "):
            importlib.import_module(old)
        place = new.split()[0]  # a module, or a module's name
        if not is_module(place):
            module, name = place.rsplit(".", 1)
            assert hasattr(importlib.import_module(module), name), new


if __name__ == "__main__":
    print(import_table())


def test_architecture_lists_every_module():
    """docs/architecture.md's "Files" section names every module of the four packages under
    its folder, so that the page says where each file fits."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    files = text[text.index("## Files"):]
    listed, folder = set(), None
    for line in files.splitlines():
        if line.startswith("**`") and line.endswith("/`**"):
            folder = line[3:-4]
        elif line.startswith("- `") and folder is not None:
            listed.add(f"{folder}/{line[3:line.index('`', 3)]}")
    modules = {str(path.relative_to(ROOT)) for package in PACKAGES
               for path in (ROOT / package).rglob("*.py")}
    assert modules - listed == set(), "modules docs/architecture.md does not list"
    assert listed - modules == set(), "docs/architecture.md lists modules that do not exist"
