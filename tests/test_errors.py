"""Every error class lives in specd/errors.py, each with an exit code and a stable code name."""

import ast
import inspect
from pathlib import Path

import specd
from specd import errors

PACKAGE = Path(specd.__file__).parent


def test_no_exception_class_is_defined_outside_errors_py():
    defined_elsewhere = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if any(b.endswith(("Error", "Exception")) or b in vars(errors) for b in bases):
                    defined_elsewhere.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert defined_elsewhere == []


def test_each_error_has_an_exit_code_and_a_distinct_code():
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.SpecdError)]
    assert len(classes) > 15
    assert all(c.exit_code in (1, 2) for c in classes)
    assert len({c.code for c in classes}) == len(classes)
