"""``specd.testing.assert_sampler_exact``: passes on specd's rules, fails on transformers' sampler
naming the findings ``verify-oracle --sampler hf`` names, and catches every known-wrong sampler of
the failure lab given to it as a callable."""

import re
from pathlib import Path

import pytest

from specd.core.sampler import RejectionSampler
from specd.oracles.fixture import OracleConfig, build_rig
from specd.oracles.lab.blocks import BLOCK_VARIANTS
from specd.oracles.lab.chains import VARIANTS
from specd.oracles.lab.shipped import SHIPPED_VARIANTS
from specd.oracles.samplers.protocol import rule_sampler
from specd.testing import assert_sampler_exact

DOCS = Path(__file__).resolve().parents[1] / "docs" / "python.md"


def hf_copy():
    """The copy of transformers' _speculative_sampling that docs/python.md shows."""
    code = re.search(r"```python file=hf_copy.py\n(.*?)```", DOCS.read_text(), re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/python.md: hf_copy.py", "exec"), namespace)
    return namespace["hf_speculative_sampling"]


@pytest.mark.parametrize("vocab,k,exact_size", [(2, 1, True), (2, 3, False), (3, 2, True)])
def test_specd_rules_pass(vocab, k, exact_size):
    """The default check's sizes beside the named one are the same whatever is named: they run once, at
    (2, 3); the other named sizes run alone, on every table (the default runs them on the seed's)."""
    assert assert_sampler_exact(rule_sampler(), vocab=vocab, k=k, exact_size=exact_size).passed
    block = assert_sampler_exact(rule_sampler(block=True), rule="block", vocab=vocab, k=k, exact_size=exact_size)
    assert block.passed


def test_transformers_sampler_fails_naming_what_the_command_names():
    with pytest.raises(AssertionError) as failed:
        assert_sampler_exact(hf_copy(), input_rounding=1e-15)
    message = str(failed.value)
    first = message.splitlines()[0]
    assert first.startswith("sampler hf_speculative_sampling is not exact under the maximal rule (V=2, K=3")
    assert first.endswith("found: batch_raises, k_zero_raises, q_zero_accepted_silently, u_zero_accepts_p_zero")
    for check in ("impossible_draft", "zero_target_mass", "disjoint_supports", "k_zero_row", "batch_of_two"):
        assert f"  {check} failed: " in message


def sampler_variants():
    """(rule, variant name, sampler class) of every lab variant that is a sampler (a RejectionSampler
    subclass): the token-wise lab, the shipped bugs, block verification's lab."""
    base = build_rig(OracleConfig(), lab=True)
    for rule, variants in (("maximal", VARIANTS), ("maximal", SHIPPED_VARIANTS), ("block", BLOCK_VARIANTS)):
        for variant in variants:
            cls = variant.build(base).sampler_cls
            if cls is not RejectionSampler:
                yield pytest.param(rule, cls, id=variant.name)


@pytest.mark.parametrize("rule,cls", list(sampler_variants()))
def test_every_known_wrong_sampler_of_the_lab_is_caught(rule, cls):
    """At V = 3 (at V = 2, block's token-wise residual is block's own: one token can have mass)."""
    with pytest.raises(AssertionError, match=r"is not exact under the \w+ rule") as failed:
        assert_sampler_exact(rule_sampler(cls(), block=rule == "block"), rule=rule, vocab=3, k=3)
    assert "failed: " in str(failed.value)


def test_the_lab_has_sampler_variants_of_each_kind():
    ids = [p.id for p in sampler_variants()]
    assert len(ids) >= 12 and "correction_from_p" in ids and "block_stops_at_first_failure" in ids


def test_a_slip_a_size_hides_is_caught_and_exact_size_keeps_the_size():
    """A correction drawn at the refused draft's acceptance uniform: forced at V = 2 (one token left), so
    exact there; the helper's default also runs V = 3 and fails it, naming where; exact_size=True keeps V = 2
    (the degenerate cases at V = 3 still see it: they are fixed cases, not sizes)."""
    from tests.oracles.slips import chain_continue_after_rejection, chain_correction_at_acceptance_uniform

    with pytest.raises(AssertionError) as failed:
        assert_sampler_exact(chain_correction_at_acceptance_uniform, vocab=2, k=3)
    message = str(failed.value)
    assert "exact_joint failed: not exact at V = 3, K = 2 on the table" in message
    assert "minimal counterexample: V=3, K=1" in message
    report = assert_sampler_exact(chain_continue_after_rejection, vocab=2, k=1, exact_size=True)
    assert (
        report.document["coverage"]["exact_size"] and "not shown at this size" in report.document["coverage"]["claim"]
    )
