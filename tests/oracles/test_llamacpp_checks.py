"""The oracle's engine checks on the llama.cpp backend: tiny GGUF target and draft over three
tokens, each read by the reference as a table (its row after a prefix, scored alone on a fresh
context) and run by the engine through its CausalLM (rows of many requests and rounds in each
call). The exact joints agree only if a row never depends on the call it is scored in. The checks
whose subject is the engine's own logic whatever the model (-k auto's rule, the layouts) run on the
table models; these are the ones a model backend can break."""

import pytest

from specd.core.model import RowInput
from specd.models.llamacpp.lib import GGUFModel
from specd.models.llamacpp.model import LlamaCppLM
from specd.oracles.engine.checks import (
    Fixture,
    _ngram_exact,
    check_batch_invariance,
    check_coupling,
    check_rounds,
)
from specd.oracles.engine.exact import speculative_joint
from specd.oracles.fixture import OracleConfig, build_rig
from specd.oracles.record import exact_check
from specd.oracles.reference import target_joint
from tests.llamacpp_helpers import needs_binding, plain_tokens, write_tiny_gguf

pytestmark = needs_binding


class LlamaTable(LlamaCppLM):
    """A llama.cpp model as the oracle's reference reads a table model: ``raw_logits(prefix)``, the row
    after ``prefix`` scored alone in one call on a fresh cache (kept once read)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rows = {}
        self.scratch = self.new_cache()
        self.scratch.open(0)

    def raw_logits(self, prefix):
        if prefix not in self.rows:
            self.scratch.reset(0)
            out = self.step(self.scratch, [RowInput(0, prefix, tuple(range(len(prefix))))], logits_for=1)
            self.rows[prefix] = out.logits[0][-1].clone()  # float32, as the engine reads it
            self.scratch.discard(0)
        return self.rows[prefix]


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    folder = tmp_path_factory.mktemp("oracle-gguf")
    files = [
        write_tiny_gguf(folder / f"{n}.gguf", plain_tokens(3), seed=s, sharpen=12) for n, s in (("t", 0), ("d", 5))
    ]
    target, draft = (LlamaTable(GGUFModel(f), name) for f, name in zip(files, ("target", "draft")))
    cfg = OracleConfig(vocab=3, k=2, samples=300, lab=False)
    rig = build_rig(cfg).but(target=target, draft=draft, rule="maximal")
    horizon = cfg.effective_horizon
    reference = target_joint(rig, horizon)
    return Fixture(cfg, rig, horizon, reference, speculative_joint(rig, horizon, "target"))


def test_the_exact_joint_on_llama_cpp_is_the_targets(fixture):
    assert exact_check("exact_joint", fixture.reference, fixture.speculative, "").passed
    assert len(fixture.reference) == 3**fixture.horizon


@pytest.mark.parametrize("check", [check_rounds, check_batch_invariance, check_coupling])
def test_an_engine_check_passes_on_llama_cpp(fixture, check):
    result = check(fixture)
    assert result.passed, (result.name, result.figures, result.detail)


def test_the_lookup_on_llama_cpp(fixture):
    assert _ngram_exact(fixture.rig, fixture.horizon).passed
