# ruff: noqa: E501  (the signatures are held verbatim, one per line)
"""The public API's names and signatures, held here: a refactor that removes a public name or
changes a signature fails this test, so the change is made on purpose (and in docs/python.md),
never by accident. Regenerate the table with ``python tests/test_public_api.py`` after such a
decision."""

import dataclasses
import inspect

import specd
import specd.testing

SIGNATURES = {
    "Pair": "class",
    "Pair.compare": "(self, prompts: 'str | Sequence[str]', *, batch_size: 'int | None' = None, **options: 'object') -> 'Comparison'",
    "Pair.generate": "(self, prompts: 'str | Sequence[str]', *, baseline: 'bool' = False, batch_size: 'int | None' = None, out: 'str | None' = None, trace: 'str | None' = None, **options: 'object') -> 'Generation'",
    "Pair.load": "(cls, target: 'object' = None, draft: 'object' = None, *, tokenizer: 'object' = None, draft_tokenizer: 'object' = None, **options: 'object') -> 'Pair'",
    "Pair.manifest": "(self, *, baseline: 'bool' = False, **options: 'object') -> 'dict'",
    "Pair.options": "property",
    "Pair.stream": "(self, prompts: 'str | Sequence[str]', *, baseline: 'bool' = False, batch_size: 'int | None' = None, **options: 'object') -> 'Iterator[TextDelta]'",
    "Generation": "fields: mode: str, results: tuple[RequestResult, ...], stats: dict, notes: tuple[str, ...]",
    "Generation.texts": "property",
    "Comparison": "fields: target_only: Generation, speculative: Generation, speedup: float, identical: bool, divergences: tuple[Divergence, ...]",
    "Divergence": "fields: request_id: str, index: int, tokens: tuple[int | None, int | None], top2: tuple[int, int] | None, margin: float | None, tolerance: float | None, dtype: str",
    "Divergence.as_dict": "(self) -> 'dict'",
    "Divergence.describe": "(self) -> 'str'",
    "Divergence.near_tie": "property",
    "RequestResult": "fields: request_id: str, tag: str | None, prompt: str, prompt_tokens: int, text: str, tokens: tuple[int, ...], finish_reason: str | None, history: History",
    "RequestResult.as_dict": "(self) -> 'dict'",
    "TextDelta": "fields: request_id: str, text: str",
    "prove": "(vocab: 'int' = 2, k: 'int' = 3, *, rule: 'str' = 'both', seed: 'int' = 0, horizon: 'int | None' = None, samples: 'int' = 2000, lab: 'bool' = True, target_temperature: 'float' = 1.0, draft_temperature: 'float' = 0.7, target_bias: 'Mapping[int, float] | None' = None, draft_bias: 'Mapping[int, float] | None' = None, repetition_penalty: 'float | None' = None, layout: 'str' = 'replay_frontier', backend: 'str' = 'max_shift', jobs: 'int | None' = None, tree: 'str | Sequence[str] | None' = None, **controls: 'float | int | None') -> 'OracleReport'",
    "check_sampler": "(sampler: 'Callable | str', *, rule: 'str' = 'maximal', tree: 'str | None' = None, vocab: 'int' = 2, k: 'int' = 3, seed: 'int' = 0, target_temperature: 'float' = 1.0, draft_temperature: 'float' = 0.7, target_bias: 'Mapping[int, float] | None' = None, draft_bias: 'Mapping[int, float] | None' = None, repetition_penalty: 'float | None' = None, input_rounding: 'float' = 0.0, timeout: 'float' = 60.0, jobs: 'int | None' = None, exact_size: 'bool' = False, **controls: 'float | int | None') -> 'OracleReport'",
    "OracleReport": "fields: passed: bool, checks: tuple[CheckResult, ...], findings: tuple[str, ...], counterexample: dict | None, failure_lab: tuple[dict, ...], document: dict",
    "OracleReport.failed": "property",
    "CheckResult": "fields: name: str, passed: bool | None, figures: dict, detail: str, findings: tuple[str, ...]",
    "ledger": "(k: 'str | Sequence[int] | None' = None, batch: 'str | Sequence[int]' = '1,4,16', *, alpha: 'float | None' = None, alphas: 'Sequence[float] | None' = None, trace_log: 'str | None' = None, context: 'int' = 0, stop_probability: 'float' = 0.0, kv_shape: 'str | None' = None, **costs: 'float') -> 'pd.DataFrame'",
    "sweep": "(pair: 'Pair', k: 'str | Sequence[int]' = '1..4', batch: 'str | Sequence[int]' = '1', *, max_new_tokens: 'int' = 32, repeats: 'int' = 5, prompts: 'Sequence[str] | None' = None) -> 'pd.DataFrame'",
    "read_log": "(path: 'str') -> 'pd.DataFrame'",
    "summarize_log": "(path: 'str', by: 'str | None' = None) -> 'pd.DataFrame'",
    "SpecdError": "class",
    "UsageError": "class",
    "testing.assert_sampler_exact": "(sampler: 'Callable | str', *, rule: 'str' = 'maximal', tree: 'str | None' = None, vocab: 'int' = 2, k: 'int' = 3, seed: 'int' = 0, input_rounding: 'float' = 0.0, timeout: 'float' = 60.0, exact_size: 'bool' = False) -> 'OracleReport'",
}


def describe(name: str, obj) -> dict[str, str]:
    """A public name's signature (a function), or its fields and public methods (a class). A
    dataclass's constructor is its fields; any other class is built by its own classmethods."""
    if not inspect.isclass(obj):
        return {name: str(inspect.signature(obj))}
    fields = dataclasses.is_dataclass(obj)
    out = {name: "fields: " + ", ".join(f"{f.name}: {f.type}" for f in dataclasses.fields(obj)) if fields else "class"}
    if issubclass(obj, Exception):
        return out
    for attr, value in sorted(vars(obj).items()):
        if attr.startswith("_"):
            continue
        function = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
        if isinstance(value, property):
            out[f"{name}.{attr}"] = "property"
        elif callable(function):
            out[f"{name}.{attr}"] = str(inspect.signature(function))
    return out


def public_signatures() -> dict[str, str]:
    found: dict[str, str] = {}
    for name in specd.PUBLIC:
        found.update(describe(name, getattr(specd, name)))
    found.update(describe("testing.assert_sampler_exact", specd.testing.assert_sampler_exact))
    return found


def test_every_public_name_keeps_its_signature():
    found = public_signatures()
    assert sorted(found) == sorted(SIGNATURES), "a public name appeared or disappeared"
    changed = {name: found[name] for name in SIGNATURES if found[name] != SIGNATURES[name]}
    assert changed == {}, "a public signature changed"


def test_every_public_name_is_in_all_documented_and_listed_in_the_docs():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "python.md").read_text()
    assert set(specd.__all__) == {*specd.PUBLIC, "__version__"}
    for name in specd.PUBLIC:
        assert inspect.getdoc(getattr(specd, name)), name
        assert f"| `{name}` |" in page, f"{name} is not in docs/python.md's table of public names"


def test_an_unknown_name_is_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'Pipeline'"):
        specd.Pipeline  # noqa: B018


if __name__ == "__main__":
    for name, signature in public_signatures().items():
        print(f"    {name!r}: {signature!r},")
