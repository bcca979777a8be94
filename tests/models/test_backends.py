"""--backend: which backend runs a run's GGUF models, its default, its refusals (one line each, exit
2), and llama.cpp runs from the command line with a GGUF draft and a Hugging Face draft."""

import dataclasses
import json
import sys

import pytest
import torch

from specd.errors import BackendUnavailable
from specd.models.llamacpp import lib as llamacpp_lib
from specd.models.run import backends
from specd.models.run.options import GenerateOptions
from tests.helpers import run_cli
from tests.hf_helpers import tiny_llama
from tests.llamacpp_helpers import gguf_tokenizer, needs_binding, tokenizer_fields, write_tiny_gguf

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A tiny GGUF target and draft, and a Hugging Face draft folder with the same tokenizer."""
    folder = tmp_path_factory.mktemp("backends")
    tok = gguf_tokenizer()
    fields = tokenizer_fields(tok)
    target = write_tiny_gguf(folder / "target.gguf", fields, seed=0)
    draft = write_tiny_gguf(folder / "draft.gguf", fields, seed=0, noise=(1, 0.5))
    hf = folder / "hf-draft"
    tiny_llama(len(tok), seed=3, hidden=64).save_pretrained(hf)
    tok.save_pretrained(hf)
    return str(target), str(draft), str(hf)


def test_the_default_runs_embedded_models_on_llama_cpp_on_a_cpu_and_everything_else_on_hf(monkeypatch):
    monkeypatch.setattr(backends, "available", lambda: True)
    embedded = GenerateOptions()
    assert backends.choose(embedded, CPU) == "llama.cpp"
    # Gemma 3's greedy text on llama.cpp was not always llama.cpp's own (docs/llamacpp.md): hf
    assert backends.choose(GenerateOptions(target="embedded:gemma-3-270m"), CPU) == "hf"
    assert backends.choose(embedded, CUDA) == "hf"
    assert backends.choose(dataclasses.replace(embedded, draft="suffix,self:bf16"), CPU) == "hf"  # hf weights
    assert backends.choose(GenerateOptions(target_gguf="m.gguf"), CPU) == "hf"
    assert backends.choose(GenerateOptions(target="./folder"), CPU) == "hf"
    assert backends.choose(GenerateOptions(backend="hf"), CPU) == "hf"
    assert backends.choose(dataclasses.replace(embedded, tree="2,2"), CPU) == "hf"  # trees verify on hf
    monkeypatch.setattr(backends, "available", lambda: False)  # no binding: the embedded model runs on hf
    assert backends.choose(embedded, CPU) == "hf"


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--draft", "self:vocab=64"], "a shared-body draft applies a head of its own"),
        (["--draft", "suffix,self:bf16"], "self: draft is built from the target's weights"),
        (["--dtype", "bfloat16"], "llama.cpp runs the GGUF file's own types"),
        (["--device", "cuda"], "specd runs llama.cpp on the CPU"),
        (["--target", "./some-folder"], "llama.cpp runs GGUF files"),
        (["--tree", "2,2"], "llama.cpp's backend verifies chains only"),
    ],
)
def test_what_llama_cpp_cannot_run_is_refused_in_one_line(extra, words, capsys):
    code, out, err = run_cli(["generate", "--backend", "llama.cpp", *extra, "-p", "hi"], capsys)
    assert code == 2 and words in err and err.strip().count("\n") == 0 and "use --backend hf" in err


def test_an_unknown_backend_is_one_line(capsys):
    code, _, err = run_cli(["generate", "--backend", "vllm", "-p", "hi"], capsys)
    assert code == 2 and "unknown backend 'vllm'; choose one of hf, llama.cpp" in err


def test_a_missing_binding_is_one_line(files, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    monkeypatch.setattr(llamacpp_lib, "_STATE", {})
    with pytest.raises(BackendUnavailable, match=r"needs llama-cpp-python: pip install 'specd\[llamacpp\]'"):
        llamacpp_lib.binding()
    code, _, err = run_cli(["generate", "--backend", "llama.cpp", "--target-gguf", files[0], "-p", "hi"], capsys)
    assert code == 2 and "needs llama-cpp-python" in err and err.strip().count("\n") == 0


@needs_binding
def test_a_gguf_llama_cannot_read_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\0\0\0" + b"\0" * 24)
    code, _, err = run_cli(["generate", "--backend", "llama.cpp", "--target-gguf", str(bad), "-p", "hi"], capsys)
    assert code == 2 and f"cannot load {bad} with llama.cpp" in err and err.strip().count("\n") == 0


@needs_binding
@pytest.mark.parametrize("draft", ["gguf", "hf"])
def test_a_gguf_target_on_llama_cpp_with_a_gguf_or_hugging_face_draft(files, draft, capsys):
    """--compare on llama.cpp: greedy outputs identical, the manifest names the backend and both models
    (a GGUF draft runs on llama.cpp, a folder draft on Hugging Face: their tokenizers agree)."""
    target, gguf_draft, hf_draft = files
    flag = ["--draft-gguf", gguf_draft] if draft == "gguf" else ["--draft", hf_draft]
    args = ["generate", "--backend", "llama.cpp", "--target-gguf", target, *flag, "-k", "3", "--chat"]
    code, out, err = run_cli(
        [*args, "-p", "the quick brown fox", "--max-new-tokens", "12", "--compare", "--json"], capsys
    )
    doc = json.loads(out)
    assert code == 0, err
    assert doc["identical_outputs"] is True and doc["manifest"]["backend"] == "llama.cpp"
    assert doc["manifest"]["target"]["identity"].startswith("llama.cpp:")
    assert doc["manifest"]["draft"]["identity"].startswith("llama.cpp:" if draft == "gguf" else "hf:")
    assert len(doc["manifest"]["target"]["weights_sha256"]) == 64  # the file's bytes
    assert doc["stats"]["speculative"]["emitted_tokens"] == 12


@needs_binding
def test_the_output_says_which_backend_ran(files, capsys):
    code, out, _ = run_cli(
        ["generate", "--backend", "llama.cpp", "--target-gguf", files[0], "-p", "hello", "--max-new-tokens", "4"],
        capsys,
    )
    assert code == 0 and "backend: llama.cpp (" in out and "q8_0 keys" in out


@needs_binding
def test_a_tree_with_a_llama_cpp_model_is_refused_by_the_engine_in_one_line(files):
    """Through the library, where no option check runs: the engine asks every model of the run."""
    from specd.core.engine import EngineConfig, SpeculativeEngine
    from specd.core.processors import SamplingPolicy
    from specd.core.tree_shape import parse_tree
    from specd.errors import UsageError
    from specd.models.llamacpp.lib import GGUFModel
    from specd.models.llamacpp.model import LlamaCppLM

    lm = LlamaCppLM(GGUFModel(files[0]), "tiny")
    with pytest.raises(UsageError, match="verifies chains only"):
        SpeculativeEngine(lm, None, SamplingPolicy(greedy=True), EngineConfig(tree=parse_tree("2,2")))
