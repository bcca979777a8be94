"""The degenerate rounds of a tree sampler's check (specd.oracles.samplers.tree_degenerate): a round
without drafts, and drafts of target mass 0 with every uniform at 0 or just below 1."""

from specd.oracles.samplers.tree_degenerate import check_zero_mass
from specd.oracles.samplers.tree_protocol import TreeSamplerUnderTest, load_tree_sampler
from tests.oracles.test_coverage import DRAWINGS, tree, verdicts


def test_u_zero_keeping_or_drawing_a_token_of_no_mass_is_its_own_finding():
    """A test U <= p'/q' and a draw at U <= the running sum are exact in law (they differ from the rule on
    a set of uniforms of probability 0), so the exact check passes them; at U = 0 each keeps or draws a
    token the target never emits. EAGLE's evaluate_posterior tests ``random.random() <= gtp[x]``: the same."""
    for name, finding in (
        ("accepts_at_u_equal_to_the_ratio", "u_zero_accepts_p_zero"),
        ("draws_at_u_at_or_below_the_running_sum", "zero_mass_emitted"),
    ):
        assert verdicts(tree(name), "2,2", 3, drawings=("sampled",)) == {"sampled": True}
        check = check_zero_mass(tree(name), DRAWINGS)
        assert check.passed is False and check.findings == [finding] and check.figures["wrong"]
    eagle = check_zero_mass(load_tree_sampler("eagle"), DRAWINGS)
    assert eagle.passed is False and eagle.findings == ["u_zero_accepts_p_zero"]
    assert check_zero_mass(load_tree_sampler("specd"), DRAWINGS).passed


def test_a_sampler_raising_on_a_zero_mass_round_fails_it_and_a_construction_refused_before_is_not_asked():
    """The rounds are ones a run can draw (uniforms on [0, 1), targets with zeros), so raising on one fails
    the check, even where the sampler raises on every one, or only at U = 0 (before, that was taken as
    refusing the construction: n/a, and the probe just below 1 never ran). A construction the exact check
    saw refused is not passed here; none left: n/a, never a pass on nothing."""

    def refuses(tokens, parents, depths, p, q, drawn, u):
        raise ValueError("p has a zero")

    def raises_at_zero(tokens, parents, depths, p, q, drawn, u):
        if u.node(0) == 0.0:
            raise ValueError("log(0)")
        return [], u.draw(p[0])

    for fn in (refuses, raises_at_zero):
        check = check_zero_mass(TreeSamplerUnderTest(fn.__name__, fn, fn.__name__), DRAWINGS)
        assert check.passed is False and check.findings == ["raised"] and "every uniform at 0.0" in check.detail
    check = check_zero_mass(TreeSamplerUnderTest("refuses", refuses, "refuses"), ())
    assert check.passed is None and check.detail.startswith("not applicable at this size: ")


def test_the_uniforms_are_fixed_for_the_whole_round():
    """Every uniform the sampler reads, a node's, the terminal's or any other, is the value asked."""
    seen = []

    def records(tokens, parents, depths, p, q, drawn, u):
        seen.extend([u.node(0), u.node(-1), u.terminal(), u.uniform(("mine", 1))])
        return [], u.draw(p[0])

    check_zero_mass(TreeSamplerUnderTest("records", records, "records"), ("rank",))
    assert set(seen) == {0.0, 1 - 2**-53}
