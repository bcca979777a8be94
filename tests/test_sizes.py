"""The house's sizes: no module of the package over 450 lines, no function over 60 (a function's lines
run from its first decorator, or its ``def``, to its last line, docstring, comments and blank lines
included; a nested function counts within its own and on its own)."""

import ast
from pathlib import Path

import specd

PACKAGE = Path(specd.__file__).parent
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60


def function_lengths(source: str) -> dict[str, int]:
    """``name`` (dotted through its classes and enclosing functions, with the line it starts on) ->
    its length in lines, for every function and method of ``source``."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    found[f"{name}:{child.lineno}"] = child.end_lineno - start + 1
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def package_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_scan_sees_the_package_and_measures_what_it_finds():
    """Guard against a vacuous scan: the package's subpackages are read, and a function is measured
    from its decorator to its last line, methods and nested functions apart."""
    names = {str(p.relative_to(PACKAGE)) for p in package_files()}
    assert {"core/round.py", "models/run/pipeline.py", "oracles/engine/exact.py"} <= names
    source = "class A:\n    @staticmethod\n    def f():\n        def g():\n            pass\n\n        return g\n"
    assert function_lengths(source) == {"A.f:3": 6, "A.f.g:4": 2}
    assert max(function_lengths((PACKAGE / "core" / "round.py").read_text()).values()) > 30


def test_no_module_over_450_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in package_files()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_function_over_60_lines():
    long = {
        f"{p.relative_to(PACKAGE)}:{name}": n
        for p in package_files()
        for name, n in function_lengths(p.read_text()).items()
        if n > MAX_FUNCTION_LINES
    }
    assert long == {}
