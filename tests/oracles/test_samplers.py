"""verify-oracle --sampler: the protocol, the checks, the shipped adapters, and the exactness fix."""

import importlib.util
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from specd.core.sampler import RejectionSampler, exact_less, sample_categorical
from specd.oracles.fixture import OracleConfig, build_rig
from specd.oracles.lab.broken import Float32UniformComparison
from specd.oracles.reference import Reference
from specd.oracles.report import run_sampler_oracle
from specd.oracles.samplers import checks as sc
from specd.oracles.samplers.edges import check_dtype_edges
from specd.oracles.samplers.protocol import SamplerUnderTest, rule_sampler
from tests.helpers import run_cli
from tests.oracles import slips

ONE_MINUS_2_30 = 1 - 2.0**-30


# -- the fix: exact decisions for every uniform the streams produce and every row dtype --------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_a_sure_accept_is_accepted_at_the_largest_uniforms(dtype):
    s = RejectionSampler()
    p_draft = torch.tensor([[0.3]], dtype=dtype)
    for u in (ONE_MINUS_2_30, 1 - 2.0**-25, 1 - 2.0**-53):
        passed = s.acceptance_tests(
            p_draft, p_draft.clone(), torch.tensor([[u]], dtype=torch.float64), torch.ones(1, 1, dtype=torch.bool)
        )
        assert passed.item(), (dtype, u)
    # the float32 comparison the issue found rejects it
    broken = Float32UniformComparison().acceptance_tests(
        p_draft,
        p_draft.clone(),
        torch.tensor([[ONE_MINUS_2_30]], dtype=torch.float64),
        torch.ones(1, 1, dtype=torch.bool),
    )
    assert not broken.item()


def test_the_engine_accepts_a_ratio_one_draft_at_u_one_minus_2_pow_30():
    """End to end: inject the uniform where the float32 test failed; the log shows the sure accept."""
    from specd.core.engine import EngineConfig, SpeculativeEngine
    from specd.core.processors import SamplingPolicy
    from specd.core.proposer import ModelProposer
    from specd.core.round import speculative_round
    from specd.core.state import Request
    from specd.core.table_model import TableModel

    model = TableModel(4, seed=3)
    policy = SamplingPolicy.build(temperature=1.0)
    engine = SpeculativeEngine(model, ModelProposer(model, policy), policy, EngineConfig(k=1))  # q == p: ratio 1
    draws = lambda state, stream, n: [ONE_MINUS_2_30 if stream == "acceptance" else 0.5] * n  # noqa: E731
    session = engine.start([Request("r", (0, 1), 4)], draws=draws)
    speculative_round(session)
    (rec,) = session.logs["r"].acceptance
    assert rec.accept_ratio == 1.0 and rec.uniform == ONE_MINUS_2_30 and rec.accepted


def test_exact_less_decides_at_the_boundary_exactly():
    from fractions import Fraction

    num, den = torch.tensor([13.0 / 256]), torch.tensor([51.0 / 256])
    ratio = Fraction(13, 51)
    n = (ratio * 2**53).__floor__()
    for m in (n - 1, n, n + 1, n + 2):
        u = torch.tensor([float(Fraction(m, 2**53))], dtype=torch.float64)
        assert exact_less(u, num, den).item() == (Fraction(m, 2**53) < ratio)


def test_inverse_cdf_at_the_ends_and_at_zero_mass():
    row = torch.tensor([[0.0, 0.25, 0.0, 0.75, 0.0, 0.0]], dtype=torch.float32)
    cases = {0.0: 1, 2.0**-53: 1, 0.25 - 2.0**-54: 1, 0.25: 3, 1 - 2.0**-53: 3, 1 - 2.0**-30: 3}
    for u, token in cases.items():
        assert sample_categorical(row, torch.tensor([u], dtype=torch.float64)).item() == token, u


# -- the checks on production and on known-wrong samplers ------------------------------------------
def test_dtype_edges_catch_a_draft_kept_within_a_tolerance_of_a_ratio_of_one():
    """Rows of ratio 1 - 2^-40 and 1 - 2^-50 in float64, at a uniform just past the ratio: a fast path that
    keeps such a draft untested (ratio >= 1 - 1e-9) passed every table and every other edge."""
    from tests.oracles import slips

    check = check_dtype_edges(SamplerUnderTest("near", slips.chain_kept_within_1e_9_of_a_ratio_of_one, ""), True)
    assert check.passed is False and check.counterexample["exact_ratio"] == 1 - 2**-40
    assert check.counterexample["rule"]["accepted"] == 0 and check.counterexample["sampler"]["accepted"] == 1
    assert check_dtype_edges(SamplerUnderTest("exact", slips.chain_exact, ""), True).passed


def test_dtype_edges_pass_on_production_and_catch_the_float32_comparison():
    assert check_dtype_edges(SamplerUnderTest("specd", rule_sampler(), ""), tokens=True).passed
    broken = check_dtype_edges(SamplerUnderTest("f32", rule_sampler(Float32UniformComparison()), ""), tokens=True)
    assert not broken.passed and broken.findings == ["decision_differs_from_the_exact_rule"]
    cx = broken.counterexample
    assert cx["rule"]["accepted"] != cx["sampler"]["accepted"]


def test_the_production_rule_passes_every_sampler_check():
    report = run_sampler_oracle(OracleConfig(vocab=3, k=2), "specd")
    assert report["passed"] and report["findings"] == [] and report["counterexample"] is None
    assert {c["name"] for c in report["checks"]} == {
        "exact_joint",
        "exact_rational",
        "dtype_edges",
        "exact_low_precision",
        "impossible_draft",
        "zero_target_mass",
        "equal_rows",
        "disjoint_supports",
        "k_zero_row",
        "batch_of_two",
        "batch_rows",
    }


SAMPLERS = textwrap.dedent(
    '''
    import torch

    from specd.oracles.samplers.protocol import rule_sampler

    correct = rule_sampler()


    class CorrectionFromP:
        """Draws the correction from p instead of [p - q]_+."""

        def __call__(self, p, q, drafts, k_lens, accept_u, terminal_u):
            accepted, _ = correct(p, q, drafts, k_lens, accept_u, terminal_u)
            rows = p[torch.arange(p.shape[0]), accepted]
            return accepted, rows


    def raises(p, q, drafts, k_lens, accept_u, terminal_u):
        raise RuntimeError("not implemented yet")


    def exits(p, q, drafts, k_lens, accept_u, terminal_u):
        import sys

        sys.exit(0)


    def strings(p, q, drafts, k_lens, accept_u, terminal_u):
        return "accepted", "terminal"


    def no_accepted(p, q, drafts, k_lens, accept_u, terminal_u):
        return {"terminal": [0] * drafts.shape[0]}


    def nan_counts(p, q, drafts, k_lens, accept_u, terminal_u):
        return [float("nan")] * drafts.shape[0], [0] * drafts.shape[0]


    def nan_rows(p, q, drafts, k_lens, accept_u, terminal_u):
        return [0] * drafts.shape[0], p[:, 0] * float("nan")


    def out_of_range(p, q, drafts, k_lens, accept_u, terminal_u):
        return [drafts.shape[1] + 5] * drafts.shape[0], [0] * drafts.shape[0]


    def token_out_of_range(p, q, drafts, k_lens, accept_u, terminal_u):
        return [0] * drafts.shape[0], [99] * drafts.shape[0]
    '''
)


@pytest.fixture
def user_samplers(tmp_path, monkeypatch):
    (tmp_path / "user_samplers.py").write_text(SAMPLERS)
    monkeypatch.chdir(tmp_path)  # module:attr is found beside the user, as `python -m` would
    yield "user_samplers"
    sys.modules.pop("user_samplers", None)


def test_a_correct_external_sampler_passes(user_samplers, capsys):
    code, out, err = run_cli(["verify-oracle", "--sampler", f"{user_samplers}:correct", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0, err
    assert doc["passed"] and doc["sampler"]["returns"] == "tokens"


def test_a_wrong_external_sampler_fails_with_a_minimal_counterexample(user_samplers, capsys):
    code, out, _ = run_cli(["verify-oracle", "--sampler", f"{user_samplers}:CorrectionFromP", "--json"], capsys)
    doc = json.loads(out)
    assert code == 1 and not doc["passed"] and "not_exact" in doc["findings"]
    cx = doc["counterexample"]
    assert (cx["vocab"], cx["k"]) == (2, 1)  # the smallest case already shows it
    assert cx["exact_mass"] != cx["sampler_mass"]
    cell = cx["cell"]
    assert cell["rule"]["accepted"] == 0 and cell["rule"]["law"] != cell["sampler"]["law"]
    code, out, _ = run_cli(["verify-oracle", "--sampler", f"{user_samplers}:CorrectionFromP"], capsys)
    assert code == 1 and "minimal counterexample" in out and "FAILED" in out


def test_a_sampler_from_a_file_path_is_loaded_as_a_module_is_imported(user_samplers, tmp_path, capsys):
    """--sampler path/to/file.py:attr: the file loaded in the sampler's own process (what it runs on loading
    runs there, not in specd's), its folder on the path while it loads (it imports what lies beside it),
    from a relative or an absolute path, for a chain and a tree sampler."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "beside.py").write_text(
        "from specd.oracles.samplers.protocol import rule_sampler\n\ncorrect = rule_sampler()\n"
    )
    (folder / "mine.py").write_text(
        "import os\n\nfrom beside import correct\n"
        "from specd.oracles.samplers.tree_protocol import specd_tree_sampler as tree\n\n"
        "with open(os.path.join(os.path.dirname(__file__), 'loaded_by.txt'), 'a') as out:\n"
        "    out.write(f'{os.getpid()}\\n')\n"
    )
    # --exact-size: what is checked here is the loading (the covered sizes are tests/oracles/test_coverage.py's)
    for spec in ("elsewhere/mine.py:correct", f"{folder / 'mine.py'}:correct"):
        code, out, err = run_cli(["verify-oracle", "--sampler", spec, "--exact-size", "--json"], capsys)
        assert code == 0 and json.loads(out)["passed"], err
    code, out, err = run_cli(
        ["verify-oracle", "--sampler", "elsewhere/mine.py:tree", "--tree", "2", "--vocab", "3", "--exact-size"], capsys
    )
    assert code == 0 and "PASSED: exact on" in out, out + err
    loaders = {int(pid) for pid in (folder / "loaded_by.txt").read_text().split()}
    assert loaders and os.getpid() not in loaders  # loaded in the sandbox, never in specd's process
    sys.modules.pop("beside", None)


@pytest.fixture
def broken_modules(user_samplers):
    """Modules beside the user that exit or raise on import, and a class that raises when built."""
    (Path.cwd() / "exits_on_import.py").write_text("import sys\nsys.exit(0)\n")
    (Path.cwd() / "raises_on_import.py").write_text("1 / 0\n")
    (Path.cwd() / "raises_in_init.py").write_text(
        "class Sampler:\n    def __init__(self):\n        raise OSError('x')\n"
    )
    yield
    for name in ("exits_on_import", "raises_on_import", "raises_in_init"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize(
    "spec,message",
    [
        ("no_such_module_xyz:sample", "cannot import the sampler module 'no_such_module_xyz'"),
        ("user_samplers:missing", "has no attribute 'missing'"),
        ("justaname", "--sampler takes module:attr"),
        ("exits_on_import:sample", "on import, exited (SystemExit 0)"),
        ("raises_on_import:sample", "on import, raised ZeroDivisionError"),
        ("raises_in_init:Sampler", "building the sampler raises_in_init:Sampler with no arguments raised OSError"),
        ("raises_on_import.py:sample", "the sampler file 'raises_on_import.py', on loading, raised ZeroDivisionError"),
        ("exits_on_import.py:sample", "on loading, exited (SystemExit 0)"),
        ("no/such/file.py:sample", "no such file 'no/such/file.py'"),
        ("user_samplers.py:missing", "has no attribute 'missing'"),
    ],
)
def test_a_sampler_that_cannot_be_loaded_is_one_line_and_exit_2(broken_modules, capsys, spec, message):
    """docs/oracle.md: exit 2 for a sampler that cannot be imported (or built), with or without --json."""
    for extra in ([], ["--json"]):
        got, out, err = run_cli(["verify-oracle", "--sampler", spec, *extra], capsys)
        assert got == 2 and err.count("\n") == 1 and message in err and "Traceback" not in err, err
        assert "internal error" not in err and out == ""


@pytest.mark.parametrize(
    "spec,finding,message",
    [
        ("user_samplers:raises", "raised", "raised RuntimeError: not implemented yet"),
        ("user_samplers:exits", "exited", "sampler user_samplers:exits exited (SystemExit 0) instead of returning"),
        ("user_samplers:strings", "returned_not_a_tensor", "returned accepted counts of type str"),
        ("user_samplers:no_accepted", "missing_parts", "a mapping without 'accepted'"),
        ("user_samplers:nan_counts", "count_not_integer", "expected integers"),
        ("user_samplers:nan_rows", "returned_non_finite_rows", "not finite, non-negative rows"),
        ("user_samplers:out_of_range", "count_out_of_range", "outside 0.."),
        ("user_samplers:token_out_of_range", "token_out_of_range", "terminal tokens [99] outside 0..2"),
    ],
)
def test_a_sampler_that_fails_on_an_ordinary_round_is_a_report_with_the_finding(
    user_samplers, capsys, spec, finding, message
):
    """Code under test that raises, exits or returns nonsense is a failed check (exit 1), never a pass:
    --json gives the report, its check and finding named; the tables say the same."""
    got, out, err = run_cli(["verify-oracle", "--sampler", spec, "--json", "--vocab", "3", "--k", "2"], capsys)
    assert got == 1 and err == "", err
    doc = json.loads(out)
    assert not doc["passed"] and doc["findings"] == [finding]
    (check,) = doc["checks"]
    assert check["name"] == "ordinary_round" and check["passed"] is False and message in check["detail"]
    got, out, err = run_cli(["verify-oracle", "--sampler", spec], capsys)
    assert got == 1 and "Traceback" not in out + err and f"FAILED; found: {finding}" in out


# -- Hugging Face's _speculative_sampling ---------------------------------------------------------------
needs_hf = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")


@needs_hf
def test_the_hf_adapter_findings_by_name():
    try:
        report = run_sampler_oracle(OracleConfig(vocab=2, k=2), "hf")
    except Exception as err:  # noqa: BLE001 - a transformers without the function is skipped, said in one line
        pytest.skip(str(err))
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["exact_joint"]["passed"]  # exact on ordinary tables
    assert checks["exact_rational"]["passed"] is None  # it returns distributions
    assert report["findings"] == ["batch_raises", "k_zero_raises", "q_zero_accepted_silently", "u_zero_accepts_p_zero"]
    assert checks["zero_target_mass"]["figures"]["accepted_at"] == [0.0]  # its test is r <= p/q
    assert not report["passed"]


@needs_hf
def test_the_hf_ensemble_mode_is_not_exact():
    report = run_sampler_oracle(OracleConfig(vocab=2, k=2), "hf-ensemble")
    assert "not_exact" in report["findings"] and report["counterexample"]["cell"]


def test_an_adapter_whose_library_lacks_the_function_is_one_line(monkeypatch, capsys):
    import transformers.generation.utils as gen

    monkeypatch.delattr(gen, "_speculative_sampling")
    code, _, err = run_cli(["verify-oracle", "--sampler", "hf"], capsys)
    assert code == 2 and err.count("\n") == 1 and "lacks" in err


def test_round_cells_integrate_to_one():
    rig = build_rig(OracleConfig(vocab=3, k=2))
    calls = sc.round_calls(Reference(rig), rig.prompt, 3, 2, tokens=True, exact=False)
    assert abs(sum(c.mass for c in calls) - 1) < 1e-12


def _sorted_draw(p, q, drafts, k_lens, accept_u, terminal_u):
    """Exact in law, not the protocol's reading: the terminal is the inverse CDF over tokens sorted by
    weight, the largest first (as a top-p sampler orders them)."""
    from fractions import Fraction

    accepted, _ = slips.chain_exact(p, q, drafts, k_lens, accept_u, terminal_u)
    terminal = []
    for b in range(drafts.shape[0]):
        n = int(accepted[b])
        law = [Fraction(x) for x in p[b, n].tolist()]
        if n < int(k_lens[b]):
            law = [max(Fraction(0), x - Fraction(y)) for x, y in zip(law, q[b, n].tolist())]
        order = sorted(range(len(law)), key=lambda t: -law[t])
        terminal.append(order[slips._draw([law[t] for t in order], terminal_u[b].item())])
    return accepted, torch.tensor(terminal)


def _mirrored(p, q, drafts, k_lens, accept_u, terminal_u):
    """Exact in law, not the protocol's reading: the inverse CDF at 1 - terminal_u."""
    return slips.chain_exact(p, q, drafts, k_lens, accept_u, 1 - terminal_u)


def _flipped_tests(p, q, drafts, k_lens, accept_u, terminal_u):
    """Exact in law, not the protocol's reading: a draft kept while 1 - U < p(d)/q(d)."""
    return slips.chain_exact(p, q, drafts, k_lens, 1 - accept_u, terminal_u)


def _mirrored_previous_row(p, q, drafts, k_lens, accept_u, terminal_u):
    """Not exact, and not the protocol's reading: each draft after the first tested against the row
    before its own, the terminal drawn at 1 - terminal_u."""
    return slips.chain_test_against_previous_row(p, q, drafts, k_lens, accept_u, 1 - terminal_u)


@pytest.mark.parametrize("sampler", [_sorted_draw, _mirrored, _flipped_tests])
def test_a_sampler_exact_in_law_that_reads_the_uniforms_otherwise_is_not_called_inexact(sampler):
    """Its outcomes differ from the rule's uniform by uniform, so the check fails it, but its own cells
    (the price's integration) give the target's law: the finding says it reads the uniforms otherwise,
    never not_exact, and no counterexample claims masses read the rule's way."""
    report = run_sampler_oracle(OracleConfig(vocab=2, k=3), sampler)
    exact = next(c for c in report["checks"] if c["name"] == "exact_joint")
    assert not report["passed"] and exact["passed"] is False
    assert exact["findings"] == ["uniforms_read_otherwise"] and "not_exact" not in report["findings"]
    assert "proven on no other table" in exact["detail"]
    assert report["price"]["chain"]["tv_horizon"] <= 1e-12 and report["price"]["chain"]["threshold_shaped"]
    assert report["counterexample"] is None


def _flipped_previous_row(p, q, drafts, k_lens, accept_u, terminal_u):
    """The same slip as ``_mirrored_previous_row`` reading every uniform as 1 - U: the same law."""
    return slips.chain_test_against_previous_row(p, q, drafts, k_lens, 1 - accept_u, 1 - terminal_u)


def test_a_lossy_sampler_that_reads_the_uniforms_otherwise_is_still_not_exact_and_priced_as_its_law():
    """Reading a uniform as 1 - U does not change a sampler's law: the price of the slip read either way is
    the price of the slip as the protocol reads it."""
    report = run_sampler_oracle(OracleConfig(vocab=3, k=2), _mirrored_previous_row)
    exact = next(c for c in report["checks"] if c["name"] == "exact_joint")
    assert exact["findings"] == ["not_exact"] and report["price"]["chain"]["tv_horizon"] > 0.01
    assert report["counterexample"]["cell"]
    plain = run_sampler_oracle(OracleConfig(vocab=3, k=2), slips.chain_test_against_previous_row)["price"]["chain"]
    flipped = run_sampler_oracle(OracleConfig(vocab=3, k=2), _flipped_previous_row)["price"]["chain"]
    for price in (report["price"]["chain"], flipped):
        assert price["threshold_shaped"]
        for key in ("tv_horizon", "expected_accepted"):
            assert abs(price[key] - plain[key]) < 1e-12, (key, price[key], plain[key])


def _refuses_wide_float32_rows(p, q, drafts, k_lens, accept_u, terminal_u):
    if p.dtype == torch.float32 and p.shape[-1] > 256:
        raise ValueError("no float32 rows past 256 tokens")
    return slips.chain_exact(p, q, drafts, k_lens, accept_u, terminal_u)


def test_a_sampler_refusing_the_dtype_edges_wide_rows_fails_that_check_and_says_which_rows():
    """A refusal past the ordinary round is that check's failure, with the rows it refused; the checks before
    it stand (it was reported as an ordinary round of the named size, which the sampler had passed)."""
    doc = run_sampler_oracle(OracleConfig(vocab=2, k=1, rule="maximal"), _refuses_wide_float32_rows)
    *before, check = doc["checks"]
    assert not doc["passed"] and doc["findings"] == ["raised"] and check["name"] == "dtype_edges"
    assert (
        "no float32 rows past 256 tokens" in check["detail"] and "float32 rows of 257 tokens, K = 1" in check["detail"]
    )
    assert [(c["name"], c["passed"]) for c in before] == [("exact_joint", True), ("exact_rational", True)]


def _refuses_half_precision_rows(p, q, drafts, k_lens, accept_u, terminal_u):
    if p.dtype == torch.float16:
        raise ValueError("no float16 rows")
    return slips.chain_exact(p, q, drafts, k_lens, accept_u, terminal_u)


def test_a_sampler_refusing_the_rational_checks_half_precision_rows_fails_it_and_says_which_rows():
    doc = run_sampler_oracle(OracleConfig(vocab=2, k=1, rule="maximal"), _refuses_half_precision_rows)
    *before, check = doc["checks"]
    assert not doc["passed"] and doc["findings"] == ["raised"] and check["name"] == "exact_rational"
    assert "no float16 rows (float16 rows of 2 tokens, K = 1) (in exact_rational)" in check["detail"]
    assert [(c["name"], c["passed"]) for c in before] == [("exact_joint", True)]
