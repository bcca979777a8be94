"""--dtype auto (the default): float32 on a CPU, the checkpoint's own dtype on CUDA; a self:bf16 draft
of a target already in bfloat16 is refused by name."""

import json

import pytest
import torch

from specd.errors import UsageError
from specd.models.hf.loading import resolve_dtype
from tests.helpers import run_cli


def test_auto_is_float32_on_a_cpu_and_the_checkpoints_own_on_cuda():
    assert resolve_dtype("auto", torch.device("cpu")) is torch.float32
    assert resolve_dtype("auto", torch.device("cuda", 1)) == "auto"  # transformers reads the checkpoint's
    assert resolve_dtype("bfloat16", torch.device("cuda")) is torch.bfloat16
    with pytest.raises(UsageError, match="auto, float32"):
        resolve_dtype("float64")


def test_the_manifest_says_the_dtype_the_target_was_loaded_in(tiny_models, capsys):
    for flags, expected in (([], "float32"), (["--dtype", "bfloat16", "--draft", "suffix"], "bfloat16")):
        code, out, err = run_cli(
            ["generate", "--target", tiny_models[0], "-p", "hello", "--max-new-tokens", "4", "--json", *flags], capsys
        )
        assert code == 0, err
        assert json.loads(out)["manifest"]["dtype"] == expected


def test_a_half_precision_copy_of_a_half_precision_target_is_refused(tiny_models, capsys):
    code, _, err = run_cli(
        ["generate", "--target", tiny_models[0], "--draft", "self:bf16", "--dtype", "bfloat16", "-p", "hi"], capsys
    )
    assert code == 2 and err.count("\n") == 1
    assert "already in bfloat16" in err and "self:vocab=N" in err


# -- issue 50: the default draft list adapts to the target's dtype -------------------------------------
BF16, FP16, F32 = torch.bfloat16, torch.float16, torch.float32


@pytest.mark.parametrize(
    "default,dtype,expected",
    [
        ("suffix,self:bf16", BF16, "suffix"),
        ("suffix,self:bf16", F32, "suffix,self:bf16"),
        ("suffix,self:bf16", FP16, "suffix,self:bf16"),
        ("self:fp16,suffix", FP16, "suffix"),
        ("suffix,self:vocab=16384", BF16, "suffix,self:vocab=16384"),
    ],
)
def test_a_default_list_leaves_out_a_copy_of_the_target_in_its_own_dtype(default, dtype, expected):
    from specd.models.run.drafts import fit_default, parse_drafts

    draft, specs, note = fit_default(default, parse_drafts(default), dtype)
    assert draft == expected and [s.text for s in specs] == expected.split(",")
    assert (note is None) == (draft == default)
    if note:
        assert note.startswith(f"draft: {expected} (the default {default} without ") and "already in" in note


@pytest.mark.parametrize(
    "flags,code,message",
    [
        (["--dtype", "bfloat16"], 0, "draft: suffix (the default suffix,self:bf16 without self:bf16: the target is"),
        (["--dtype", "float32"], 0, None),
        (["--dtype", "bfloat16", "--draft", "suffix,self:bf16"], 2, "--draft self:bf16: the target is already in"),
    ],
)
def test_the_default_draft_list_of_a_bfloat16_target_runs_and_says_so_once(
    tiny_models, capsys, monkeypatch, flags, code, message
):
    """`specd generate --dtype bfloat16` on the embedded SmolLM2 (default suffix,self:bf16) was refused
    for a draft the user never named. A tiny target given the embedded model's default list stands in
    for it here (the same code path, without loading 135M parameters)."""
    from specd.models.run import load

    monkeypatch.setattr(load, "DEFAULT_OWN_TARGET_DRAFT", "suffix,self:bf16")
    args = ["generate", "--target", tiny_models[0], "-p", "hi", "--max-new-tokens", "2", *flags]
    got, out, err = run_cli([*args, "--json"], capsys)
    assert got == code, err
    if code == 0:
        assert err.count("draft: suffix") == (1 if message else 0) and (message or "") in err
        sources = json.loads(out)["manifest"]["draft_sources"]
        assert sources[0] == "suffix" and len(sources) == (1 if message else 2)
    else:
        assert err.count("\n") == 1 and message in err


def test_the_documented_bfloat16_pair_loads(specd_cache_dir):
    """docs/python.md: Pair.load("embedded:smollm2-135m", dtype="bfloat16") (loaded, not run: a CPU runs
    bfloat16 slowly)."""
    import specd

    pair = specd.Pair.load("embedded:smollm2-135m", dtype="bfloat16")
    assert pair.options.draft == "suffix" and pair._pipe.target.dtype is BF16
    assert [s.identity for s in pair._pipe.proposer.sources] == ["suffix"]


def test_sweep_k_measure_on_a_bfloat16_target_asks_for_a_draft(tiny_models, capsys):
    args = ["sweep-k", "--measure", "--target", tiny_models[0], "--dtype", "bfloat16", "-k", "1"]
    code, _, err = run_cli(args, capsys)
    assert code == 2 and err.count("\n") == 1 and "name the draft to time with --draft" in err
