"""The held-out corpus (benchmarks/corpus, issue 36): large and varied enough to fit on and to
test on, with a fixed split that shares no source text between its halves, and readable by
``specd generate --prompts-file``."""

import json
import re
from pathlib import Path

from tests.helpers import benchmark

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
CORPUS = BENCHMARKS / "corpus"


def heldout():
    """benchmarks/heldout.py, the one home of the kinds and of how a half is read."""
    return benchmark("heldout")


def word_grams(text: str, n: int) -> set[tuple[str, ...]]:
    words = re.findall(r"[a-z0-9']+", text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def half(name: str):
    return heldout().load_half(name)


def test_the_corpus_has_120_prompts_over_15_kinds_split_evenly():
    fit, test = half("fit"), half("test")
    assert len(fit) + len(test) >= 120
    for items in (fit, test):
        kinds = [it.tag for it in items]
        assert set(kinds) == {*heldout().GROUNDED, *heldout().OPEN} and len(set(kinds)) == 15
        assert all(kinds.count(k) == 4 for k in set(kinds))
    assert not {it.request_id for it in fit} & {it.request_id for it in test}
    assert all(it.request_id.startswith("fit-") for it in fit) and all(it.request_id.startswith("test-") for it in test)


def test_the_test_half_shares_no_passage_code_or_data_with_the_fit_half():
    """The text a prompt works on (after its instruction line) shares no 8-word run with the fit half:
    the same kinds of instruction, never the same material."""
    fit_grams = set().union(*(word_grams(it.text, 8) for it in half("fit")))
    for item in half("test"):
        material = item.text.split("\n\n", 1)[-1]
        assert not word_grams(material, 8) & fit_grams, item.request_id


def test_the_benchmark_prompts_of_other_scripts_are_not_in_the_corpus():
    """No corpus prompt is a near copy of a prompt the older benchmarks (and the fitted constants
    of earlier work) read: no 8-word run of the grounded and head_spec benchmarks' passages."""
    import ast

    older = set()
    for script in ("grounded.py", "head_spec.py"):
        tree = ast.parse((CORPUS.parent / script).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) > 40:
                older |= word_grams(node.value, 8)
    for name in ("fit", "test"):
        for line in (CORPUS / f"{name}.jsonl").read_text().splitlines():
            assert not word_grams(json.loads(line)["prompt"], 8) & older


def test_a_benchmark_refuses_an_output_over_the_corpus_or_inside_a_model_it_reads(tmp_path, capsys):
    import pytest

    refuse = heldout().refuse_outputs
    for outputs, words in (
        ({"--json": str(CORPUS / "test.jsonl")}, "is the same file as the corpus's test half"),
        ({"--json": str(tmp_path)}, "is a directory"),
        ({"--json": str(tmp_path / "a.json"), "--out": str(tmp_path / "a.json")}, "both name one file"),
        ({"--cache folder": str(tmp_path / "model" / "cache")}, "inside"),
    ):
        (tmp_path / "model").mkdir(exist_ok=True)
        with pytest.raises(SystemExit) as stop:
            refuse("bench.py", outputs, [str(tmp_path / "model")])
        assert str(stop.value).startswith("bench.py: ") and words in str(stop.value)
    (tmp_path / "draft").mkdir()
    with pytest.raises(SystemExit) as stop:  # a draft model's folder too
        refuse(
            "bench.py",
            {"--out": str(tmp_path / "draft" / "rows.json")},
            [str(tmp_path / "model")],
            str(tmp_path / "draft"),
        )
    assert "the model folder of --draft" in str(stop.value)
    refuse("bench.py", {"--json": str(tmp_path / "ok.json"), "--cache folder": str(tmp_path / "cache")}, [])
    assert not (tmp_path / "ok.json").exists()  # refusing or not, nothing is written before the run
