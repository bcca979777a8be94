"""specd's oracle as a test helper for other projects: ``assert_sampler_exact`` in a pytest test.

    import pytest
    from specd.testing import assert_sampler_exact

    @pytest.mark.parametrize("vocab,k", [(2, 1), (2, 3), (3, 2)])
    def test_my_sampler_is_exact(vocab, k):
        assert_sampler_exact(my_sampler, vocab=vocab, k=k)

The sampler follows the protocol of ``specd verify-oracle --sampler`` (specd.oracles.samplers.protocol).
"""

from __future__ import annotations

from collections.abc import Callable

from specd.api.oracle import CheckResult, OracleReport, check_sampler
from specd.oracles.samplers.sandbox import DEFAULT_TIMEOUT

__all__ = ["assert_sampler_exact"]


def assert_sampler_exact(
    sampler: Callable | str,
    *,
    rule: str = "maximal",
    tree: str | None = None,
    vocab: int = 2,
    k: int = 3,
    seed: int = 0,
    input_rounding: float = 0.0,
    timeout: float = DEFAULT_TIMEOUT,
    exact_size: bool = False,
) -> OracleReport:
    """Check ``sampler`` against the exact law of ``rule`` (maximal: the token-wise rule; block: block
    verification) on random tables with ``vocab`` tokens and K = ``k``, and at the smallest sizes where
    each class of slip can show, over several tables (``exact_size``: the named size only); return the
    report if it passes, else raise AssertionError naming each failed check and what it found, where,
    the minimal counterexample, and the probability mass that moved there. ``input_rounding``,
    ``timeout`` (the seconds a call may take in the sampler's own process): as in
    ``specd.check_sampler``. ``tree``: a tree shape ("2,2", "iid:2,2"): check ``sampler`` as a tree
    sampler (the protocol of specd.oracles.samplers.tree_protocol) over every draft tree of that shape.
    ``report.document["coverage"]["claim"]`` says what a passing sampler was proved exact on."""
    report = check_sampler(
        sampler,
        rule=rule,
        tree=tree,
        vocab=vocab,
        k=k,
        seed=seed,
        input_rounding=input_rounding,
        timeout=timeout,
        exact_size=exact_size,
    )
    if not report.passed:
        raise AssertionError(failure_message(report))
    return report


def failure_message(report: OracleReport) -> str:
    """A failed report in a few lines: the sampler, the checks that failed, the counterexample."""
    sampler, cfg = report.document["sampler"], report.document["config"]
    lines = [
        f"sampler {sampler['name']} is not exact under the {cfg['rule']} rule "
        f"(V={cfg['vocab']}, K={cfg['k']}, seed={cfg['seed']}); found: {', '.join(report.findings) or 'nothing named'}"
    ]
    lines += [f"  {check.name} failed: {_evidence(check)}" for check in report.failed]
    cx = report.counterexample
    if cx and "tree" in cx:
        lines.append(
            f"  minimal counterexample: V={cx['vocab']}, tree {cx['tree']} drawn {cx['drawing']}, {_table(cx)}: "
            f"the sequence {cx['sequence']} has probability {cx['sampler_mass']:.6g} under the sampler, "
            f"{cx['exact_mass']:.6g} exactly ({cx['moved']:+.6g} of mass moved there)"
        )
        r = cx["round"]
        lines.append(
            f"  most of it on the draft tree tokens={r['tokens']}, parents={r['parents']}, p={r['p_rows']}, "
            f"q={r['q_rows']}: the sampler emits {r['sampler_emits']}, specd's exact rule {r['exact_rule_emits']}"
        )
    elif cx and "sequence" in cx:
        moved = cx["sampler_mass"] - cx["exact_mass"]
        lines.append(
            f"  minimal counterexample: V={cx['vocab']}, K={cx['k']}, {_table(cx)}: the sequence "
            f"{cx['sequence']} has probability {cx['sampler_mass']:.6g} under the sampler, {cx['exact_mass']:.6g} "
            f"exactly ({moved:+.6g} of mass moved there)"
        )
        if "cell" in cx:
            cell = cx["cell"]
            lines.append(
                f"  in the cell p={cell['p_rows']}, q={cell['q_rows']}, drafts={cell['drafts']}, "
                f"U={cell['acceptance_uniforms']}: the rule keeps {cell['rule']['accepted']} and emits "
                f"{cell['rule']['terminal']}, the sampler keeps {cell['sampler']['accepted']} and emits "
                f"{cell['sampler']['terminal']}"
            )
    elif cx:
        lines.append(f"  counterexample: {cx}")
    return "\n".join(lines)


def _table(cx: dict) -> str:
    """Where a counterexample was found: its seed's table, or an adversarial one made from it."""
    table = cx.get("table", f"seed {cx['seed']}")
    return f"seed={cx['seed']}" if table == f"seed {cx['seed']}" else f"table {table}"


def _evidence(check: CheckResult) -> str:
    figures = ", ".join(f"{name}={value}" for name, value in check.figures.items())
    return f"{check.detail}" + (f" ({figures})" if figures else "")
