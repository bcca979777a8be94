"""Shared fixtures. Every test runs offline and with a temporary specd cache, so the
embedded model is converted into a folder of this test session, never into ~/.cache."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session", autouse=True)
def specd_cache_dir(tmp_path_factory):
    """SPECD_CACHE_DIR for the whole session: a temporary folder."""
    folder = tmp_path_factory.mktemp("specd-cache")
    previous = os.environ.get("SPECD_CACHE_DIR")
    os.environ["SPECD_CACHE_DIR"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("SPECD_CACHE_DIR", None)
    else:
        os.environ["SPECD_CACHE_DIR"] = previous


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """(target folder, draft folder): tiny random-weight Llamas sharing a trained tokenizer."""
    from tests.hf_helpers import save_tiny_pair

    target, draft = save_tiny_pair(tmp_path_factory.mktemp("tiny"), noise=0.15)
    return str(target), str(draft)


@pytest.fixture(scope="session")
def hf_pair():
    """(target, draft) HFCausalLM: a 64-token tiny Llama and a noisy copy of it."""
    from specd.models.hf import HFCausalLM
    from tests.hf_helpers import noisy_copy, tiny_llama

    target = tiny_llama(64, seed=0)
    return HFCausalLM(target, "target"), HFCausalLM(noisy_copy(target, 0.25, seed=1), "draft")
