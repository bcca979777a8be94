"""--dtype auto (the default): float32 on a CPU, the checkpoint's own dtype on CUDA; a self:bf16 draft
of a target already in bfloat16 is refused by name."""

import json

import pytest
import torch

from specd.errors import UsageError
from specd.models.loading import resolve_dtype
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
