"""The import graph of the package: no circle between modules (imports for type checkers included),
no package importing one above it, no part of a divided package importing a part above it, and no
specd import hidden inside a function to dodge a circle."""

import ast
from functools import cache
from pathlib import Path

import specd

PACKAGE = Path(specd.__file__).parent

# The layers, lowest first; a package may import its own modules and those of lower layers only.
LAYERS = [
    ("specd", "errors", "files"),
    ("core",),
    ("policy", "traces"),
    ("models",),
    ("sweeps", "oracles"),
    ("api",),
    ("testing",),
    ("cli",),
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}
# The packages divided into parts, each part's order, lowest first: a part is a subpackage, or a module
# of the package's root; the rest of the root is the part named after the package. A part may import its
# own modules and those of lower parts only. models: what both backends and the run read, the two
# backends, the run over them. oracles: the shared fixture, rig, records and the oracle's own rule; what
# judges a sampler; what judges the engine (its dtype check is the sampler oracle's, on its own rule);
# the failure lab; the report, which assembles a run of them. Other packages are one part each (core's
# rules/ is a folder of core, importing and imported by the rest of it).
PARTS = {
    "models": [("models",), ("models.hf", "models.llamacpp"), ("models.run",)],
    "oracles": [("oracles",), ("oracles.samplers",), ("oracles.engine",), ("oracles.lab",), ("oracles.report",)],
}
PART_LAYER = {name: i for parts in PARTS.values() for i, names in enumerate(parts) for name in names}
# The console entry point imports the app under its Ctrl-C handler (torch takes seconds to import).
LAZY_ALLOWED = {("specd.cli", "specd.cli.app")}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@cache
def parsed(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once per test session (every test of the graph reads them all)."""
    return ast.parse(path.read_text())


def imports(path: Path, known: set[str], type_checking: bool = False) -> list[tuple[str, bool]]:
    """(imported specd module, inside a function) for every import statement of a module that runs:
    those under ``if TYPE_CHECKING:`` only with ``type_checking`` (then only those)."""
    tree = parsed(path)
    found = []
    in_function, for_checkers = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for_checkers.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if (id(node) in for_checkers) != type_checking:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "specd":
            targets = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known]
            targets = targets or [node.module]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names if a.name.split(".")[0] == "specd"]
        else:
            continue
        found += [(t, id(node) in in_function) for t in targets]
    return found


@cache
def graph(type_checking: bool = False) -> dict[str, set[str]]:
    """module -> the specd modules it imports when it runs (with ``type_checking``: and those it imports
    for type checkers, but the package root's, which only name the modules of the public names)."""
    mods = modules()
    edges = {name: {t for t, _ in imports(path, set(mods)) if t != name} for name, path in mods.items()}
    if type_checking:
        for name, path in mods.items():
            if name != "specd":
                edges[name] |= {t for t, _ in imports(path, set(mods), type_checking=True) if t != name}
    return edges


def package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "specd"


def part(module: str) -> str:
    """The part of its package a module belongs to (``PARTS``): the longest part naming it."""
    names = module.split(".")[1:]
    for n in range(len(names), 0, -1):
        if ".".join(names[:n]) in PART_LAYER:
            return ".".join(names[:n])
    return package(module)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_scan_sees_the_package():
    edges = graph()
    assert "specd.core.round" in edges and "specd.core.session" in edges["specd.core.round"]
    assert "specd.policy.ledger" in edges["specd.policy.autok"]


def test_no_import_circle_between_modules():
    assert cycles(graph(type_checking=True)) == []


def test_the_scan_sees_imports_for_type_checkers(tmp_path):
    """Guard against a vacuous circle check: an import under ``if TYPE_CHECKING:`` is an edge."""
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from specd.core.round import decode\n"
    )
    assert imports(source, set(modules())) == []
    assert imports(source, set(modules()), type_checking=True) == [("specd.core.round", False)]


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_package_imports_a_package_above_it_or_beside_it():
    upward = []
    for module, targets in graph().items():
        for target in targets:
            mine, theirs = package(module), package(target)
            if mine != theirs and theirs not in ("specd", "errors", "files") and LAYER[theirs] >= LAYER[mine]:
                upward.append((module, target))
    assert upward == []


def test_no_part_of_a_divided_package_imports_a_part_above_it_or_beside_it():
    upward = []
    for module, targets in graph().items():
        for target in targets:
            if package(module) == package(target) in PARTS and part(module) != part(target):
                if PART_LAYER[part(target)] >= PART_LAYER[part(module)]:
                    upward.append((module, target))
    assert upward == []


def test_every_subpackage_of_a_divided_package_has_its_place():
    """A new subpackage of models or oracles is placed in ``PARTS`` (and every part named exists)."""
    mods = modules()
    subpackages = {m.split(".", 1)[1] for m, path in mods.items() if path.name == "__init__.py" and m.count(".") == 2}
    divided = {s for s in subpackages if s.split(".")[0] in PARTS}
    named = {name for parts in PARTS.values() for names in parts for name in names}
    assert divided <= named
    assert all(f"specd.{name}" in mods for name in named)
    assert {part(m) for m in mods if package(m) == "oracles"} == {n for names in PARTS["oracles"] for n in names}
    assert part("specd.oracles.engine.exact") == "oracles.engine" and part("specd.oracles.rig") == "oracles"


def test_the_package_root_imports_nothing_and_names_the_modules_of_its_public_names():
    """``import specd`` runs no other module (each public name loads on first use); for type checkers
    it names exactly the modules of its public names."""
    root = modules()["specd"]
    assert graph()["specd"] == set()
    assert {t for t, _ in imports(root, set(modules()), type_checking=True)} == set(specd.PUBLIC.values())


def test_models_import_nothing_from_sweeps_and_policy_only_core():
    edges = graph()
    assert not [t for m, ts in edges.items() if package(m) == "models" for t in ts if package(t) == "sweeps"]
    # files: the leaf every layer writes through (a machine's row-cost file reads and writes as every file does)
    assert {package(t) for m, ts in edges.items() if package(m) == "policy" for t in ts} <= {
        "core",
        "errors",
        "files",
        "policy",
    }


def test_no_specd_import_inside_a_function():
    mods = modules()
    lazy = [
        (name, target)
        for name, path in mods.items()
        for target, inside in imports(path, set(mods))
        if inside and (name, target) not in LAZY_ALLOWED
    ]
    assert lazy == []
