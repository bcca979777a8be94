"""The checks of ``verify-oracle`` on the engine: each a function of the fixture returning a Check.

``exact_joint`` (one round, run by the report itself because its joint feeds the sequence
table) and, here, ``exact_joint_rounds``, ``exact_joint_auto_k``, ``exact_rational``,
``monte_carlo``, ``coupling``, ``layout_parity``, ``batch_invariance``, ``dtype_edges``,
``backend_parity`` and ``exact_joint_ngram``. ``batch_difference`` and ``dtype_edges_of`` also
serve the failure lab.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch

from specd.core.layouts import LAYOUTS
from specd.core.probability import softmax
from specd.core.proposer import ModelProposer
from specd.core.sampler import RejectionSampler
from specd.core.state import Request
from specd.errors import UsageError
from specd.oracles.engine.coupling import coupling_matrix
from specd.oracles.engine.eos import check_eos
from specd.oracles.engine.exact import Enumerator, speculative_joint
from specd.oracles.engine.montecarlo import FAILURE_PROBABILITY, bernstein_bound, run_monte_carlo
from specd.oracles.engine.rational import rational_difference
from specd.oracles.fixture import OracleConfig, build_rig
from specd.oracles.record import EXACT_TOLERANCE, NOT_APPLICABLE, Check, exact_check, max_abs_diff
from specd.oracles.reference import Reference, target_joint
from specd.oracles.rig import Rig, fold, multi_source_rig, ngram_rig, shared_body_columns, shared_body_rig
from specd.oracles.samplers.edges import check_dtype_edges as check_dtype_edges_of
from specd.oracles.samplers.protocol import SamplerUnderTest, rule_sampler
from specd.policy.autok import AutoK
from specd.policy.costs import FixedCosts
from specd.policy.ledger import CostModel

BACKEND_TOLERANCE = {"float64": 1e-12, "float32": 1e-6}

MULTI_SOURCE_K, MULTI_SOURCE_HORIZON = 2, 3
# Two sources: the model draft at 0.15 target steps a step and the lookup priced at 0.1, so that
# each is the best for some history: a two-token match (prior 0.51) beats the model's fresh 0.5 at
# these prices, a one-token match (0.28) does not (a lookup is never tried but on its price, so at a
# price where it never won the choice would never vary); the model's catch-up on tokens emitted in
# the lookup's rounds is priced too, so that the choice also reads how far behind the output the
# model's cache is.
MULTI_COSTS = FixedCosts(
    CostModel(draft_cost=0.15, row_cost=0.05, draft_row_cost=0.0, state_cost=0.02),
    {"ngram:2": CostModel(draft_cost=0.1, row_cost=0.05, draft_row_cost=0.0, state_cost=0.02)},
    catch_up_per_token=0.01,
)
# -k auto's rule under costs that do not move (so the enumeration is deterministic): a draft step
# of 0.15 target steps and 0.05 per extra verified row make K = 0, 1 and 2 each the best for some
# acceptance history.
AUTO_COSTS = FixedCosts(CostModel(draft_cost=0.15, row_cost=0.05, draft_row_cost=0.0, state_cost=0.02))


@dataclass(frozen=True)
class Fixture:
    """What every check of one oracle run shares."""

    cfg: OracleConfig
    rig: Rig
    horizon: int
    reference: dict  # the target joint over V^H sequences
    speculative: dict  # the exact speculative joint (one round, target completion)


def _exact(rig: Rig, horizon: int, reference, completion: str, name: str) -> tuple[Check, dict]:
    joint = speculative_joint(rig, horizon, completion)
    detail = (
        "one speculative round, completed by target steps"
        if completion == "target"
        else "speculative rounds to the horizon from each published successor"
    )
    return exact_check(name, reference, joint, detail), joint


def check_rounds(fx: Fixture) -> Check:
    return _exact(fx.rig, fx.horizon, fx.reference, "rounds", "exact_joint_rounds")[0]


def check_stop_token(fx: Fixture) -> Check:
    return check_eos(fx.rig, fx.horizon)


def check_auto_k(fx: Fixture) -> Check:
    """-k auto's rule (K from the request's own past acceptances, fixed costs) with --draft-stop
    (the draft cut where its own q is flat), over several rounds, in both layouts. K must be seen to
    vary, else nothing data-dependent was checked: a failure, unless the rows prove that K cannot
    depend on the data here (``fixed_k_reason``), then not applicable (a joint that differs fails)."""
    stop = draft_stop_for(fx.rig, fx.horizon)
    figures, ok = {"tolerance": EXACT_TOLERANCE, "draft_stop": stop}, True
    k_seen: set[int] = set()
    for layout in LAYOUTS:
        rig = fx.rig.but(
            layout_name=layout,
            draft_stop=stop,
            k_policy_factory=lambda r: AutoK(max(r.k, 2), 1, AUTO_COSTS),
        )
        enumerator = Enumerator(rig, fx.horizon, "rounds")
        check = exact_check(layout, fx.reference, enumerator.joint(), "")
        figures[f"max_abs_diff_{layout}"] = check.figures["max_abs_diff"]
        figures[f"total_mass_{layout}"] = check.figures["total_mass"]
        ok &= check.passed
        k_seen |= enumerator.k_seen
    figures["k_values_seen"] = sorted(k_seen)
    detail = (
        "K per round from the request's acceptance history (the ledger with fixed costs) and drafts stopped by "
        "the draft's own confidence, speculative rounds to the horizon"
    )
    if len(k_seen) >= 2 or not ok:
        return Check("exact_joint_auto_k", ok, figures, detail)
    reason = fixed_k_reason(fx.rig, fx.horizon, stop)
    if reason is not None:
        return Check(
            "exact_joint_auto_k", None, figures, f"{NOT_APPLICABLE}{reason} (saw K = {sorted(k_seen)}); {detail}"
        )
    # a policy that never changed K would prove nothing about data-dependent K
    detail += f"; K never varied (saw {sorted(k_seen)}): nothing data-dependent was checked"
    return Check("exact_joint_auto_k", False, figures, detail)


def draft_stop_for(rig: Rig, horizon: int) -> float:
    """exact_joint_auto_k's --draft-stop: the median draft confidence over every output within the
    horizon (it cuts about half the drafts), but never above the confidence at the prompt. Above it,
    the first round would draft nothing, and at horizon 2 (K = 1), where no later round has a draft
    budget, no round would: K = 0 throughout, for a reason of the check's own making."""
    values = sorted(draft_confidence(rig, o) for o in outputs_within(rig, horizon - 1))
    return min(values[len(values) // 2], draft_confidence(rig, rig.prompt), 0.999)  # --draft-stop is < 1


def draft_confidence(rig: Rig, output: tuple[int, ...]) -> float:
    """The draft's confidence after ``output``, as --draft-stop reads it (ModelProposer.confidence:
    max q, or a greedy draft's largest probability before its argmax is taken)."""
    policy = rig.draft_policy
    state = fold(policy.initial_state(rig.prompt), output[len(rig.prompt) :])
    raw = rig.draft.raw_logits(output).unsqueeze(0)
    q = policy.probabilities(raw, [state], rig.backend, torch.float64)
    return float(ModelProposer(rig.draft, policy).confidence(raw, q, [state])[0])


def fixed_k_reason(rig: Rig, horizon: int, stop: float) -> str | None:
    """Why, from the rows alone, K cannot depend on the data in exact_joint_auto_k's set-up, or None.
    A round's K reads its draft budget, the request's acceptance history and the draft's confidence.
    At horizon 1 every budget is 0. Where no draft can be rejected (q <= p, so q = p, wherever a draft
    is made) and no confidence within the horizon is below the stop, every path has the same budgets
    and history and no draft is cut: every path has one K schedule, so K depends on nothing."""
    if horizon < 2:
        return "horizon 1: every round's draft budget is horizon - 1 = 0, so every round drafts nothing"
    ref = Reference(rig)
    starts = outputs_within(rig, horizon - 2)
    rejectable = any(qx > px for o in starts for px, qx in zip(ref.p(o), ref.q(o)))
    cut = any(draft_confidence(rig, o) < stop for o in outputs_within(rig, horizon - 1))
    if rejectable or cut:
        return None
    return (
        "no draft can be rejected (q = p wherever a draft is made) and the draft-stop cuts none: every path has the "
        "same budgets and acceptance history, so one K schedule"
    )


def check_multi_source(fx: Fixture) -> Check:
    """Two draft sources, a lookup (q a point mass) and the model draft (q sampled), chosen per request
    and round by -k auto's rule from each source's own acceptance history (the lookup's at its match
    length; fixed costs: MULTI_COSTS), speculative rounds to the horizon, both layouts. The choice
    must be seen to vary (both sources used), else nothing data-dependent was checked. On the lab's
    policies (sampled target and draft, every processor kind), whatever the checked case's: a
    greedy target would decide every round alike."""
    # Every proposal uniform of the model is integrated in lookup rounds too: K 2 and 4 tokens suffice.
    lab = build_rig(fx.cfg, lab=True).but(rule=fx.rig.rule)
    k, horizon = min(lab.k, MULTI_SOURCE_K), MULTI_SOURCE_HORIZON
    figures, ok, seen = {"tolerance": EXACT_TOLERANCE, "k": k, "horizon": horizon}, True, set()
    for layout in LAYOUTS:
        base = lab.but(layout_name=layout, k=k)
        rig = multi_source_rig(base, lambda r: AutoK(max(r.k, 2), 1, MULTI_COSTS))
        enumerator = Enumerator(rig, horizon, "rounds")
        check = exact_check(layout, target_joint(rig, horizon), enumerator.joint(), "")
        figures[f"max_abs_diff_{layout}"] = check.figures["max_abs_diff"]
        figures[f"total_mass_{layout}"] = check.figures["total_mass"]
        ok &= check.passed
        seen |= enumerator.sources_seen
    figures["sources_seen"] = sorted(seen)
    varied = len(seen) >= 2
    return Check(
        "exact_joint_multi_source",
        ok and varied,
        figures,
        "the source and K per round from each source's acceptance history, a lookup and a sampled model draft"
        + ("" if varied else f"; only {sorted(seen)} drafted: the choice never varied"),
    )


def check_shared_body(fx: Fixture) -> Check:
    """The shared-body draft (``self:vocab=N``): the target's own rows, staged in its cache by the
    draft, and a head restricted to the lower half of the vocabulary (q = 0 outside it, those tokens
    reachable only by a correction or bonus token); verification by the full head over the staged
    hidden states. Fixed K and -k auto's rule, speculative rounds to the horizon, the replay layout
    (the retained one is refused, and that refusal is checked)."""
    base = fx.rig.but(layout_name="replay_frontier")
    columns = shared_body_columns(base.vocab)
    figures, ok = {"tolerance": EXACT_TOLERANCE, "draft_vocabulary": list(columns)}, True
    outside: set[int] = set()
    for name, policy in (("fixed_k", None), ("auto_k", lambda r: AutoK(max(r.k, 2), 1, AUTO_COSTS))):
        rig = shared_body_rig(base.but(k_policy_factory=policy))
        check = exact_check(name, fx.reference, Enumerator(rig, fx.horizon, "rounds").joint(), "")
        figures[f"max_abs_diff_{name}"] = check.figures["max_abs_diff"]
        figures[f"total_mass_{name}"] = check.figures["total_mass"]
        ok &= check.passed
        outside |= {t for seq, m in fx.reference.items() if m > 0 for t in seq if t not in columns}
    try:
        shared_body_rig(base.but(layout_name="retained_frontier")).engine()
        refused = False
    except UsageError:
        refused = True
    figures["retained_frontier_refused"] = refused
    figures["tokens_outside_the_draft_vocabulary"] = sorted(outside)
    reaches = bool(outside)  # the joint must put mass on tokens the draft never proposes
    return Check(
        "exact_joint_shared_body",
        ok and refused and reaches,
        figures,
        "the draft runs the target's body into the target's cache and a head over half the vocabulary; verification "
        "applies the full head to the staged rows, fixed K and -k auto, rounds to the horizon"
        + ("" if refused else "; the retained layout was not refused")
        + ("" if reaches else "; no token outside the draft vocabulary has mass: nothing was checked there"),
    )


def outputs_within(rig: Rig, tokens: int) -> list[tuple[int, ...]]:
    """The prompt and the prompt followed by each sequence of 1..``tokens`` tokens, shortest first."""
    outputs, frontier = [rig.prompt], [rig.prompt]
    for _ in range(tokens):
        frontier = [o + (x,) for o in frontier for x in range(rig.vocab)]
        outputs += frontier
    return outputs


def check_rational(fx: Fixture) -> Check:
    cfg = fx.cfg
    diff = rational_difference(cfg.vocab, cfg.k, fx.horizon, cfg.seed, prompt=fx.rig.prompt)
    return Check("exact_rational", diff == 0, {"difference": str(diff)}, "Fraction tables, no processors")


def check_monte_carlo(fx: Fixture) -> Check:
    cfg = fx.cfg
    mc = run_monte_carlo(fx.rig, fx.horizon, cfg.samples, cfg.seed)
    worst_ratio, worst_dev, worst_bound = 0.0, 0.0, 0.0
    for seq in set(fx.reference) | set(mc.empirical):
        p = fx.reference.get(seq, 0.0)
        dev = abs(mc.empirical.get(seq, 0.0) - p)
        bound = bernstein_bound(p, cfg.samples, len(fx.reference))
        if dev / bound > worst_ratio:
            worst_ratio, worst_dev, worst_bound = dev / bound, dev, bound
    return Check(
        "monte_carlo",
        worst_ratio <= 1.0 and not mc.accounting_errors,
        {
            "samples": cfg.samples,
            "rounds": mc.rounds,
            "max_abs_deviation": worst_dev,
            "bound_at_worst_cell": worst_bound,
            "worst_deviation_over_bound": worst_ratio,
            "failure_probability": FAILURE_PROBABILITY,
            "rng_accounting_errors": len(mc.accounting_errors),
            "k_per_row": f"1..{cfg.k} mixed in one batch",
        },
        mc.accounting_errors[0] if mc.accounting_errors else "Bernstein bound per cell, union over cells",
        empirical=mc.empirical,
    )


def check_coupling(fx: Fixture) -> Check:
    rig = fx.rig
    c = coupling_matrix(_first_row(rig.target, rig.target_policy, rig), _first_row(rig.draft, rig.draft_policy, rig))
    return Check(
        "coupling",
        abs(c.diagonal - c.one_minus_tv) <= EXACT_TOLERANCE and c.column_error <= EXACT_TOLERANCE,
        {
            "diagonal": c.diagonal,
            "one_minus_tv": c.one_minus_tv,
            "column_sum_error": c.column_error,
            "row_sum_error": c.row_error,
            "matrix": [[round(x, 6) for x in row] for row in c.matrix.tolist()],
        },
        "position 1: rows X ~ q, columns Y ~ p",
    )


def check_layout_parity(fx: Fixture) -> Check:
    cfg, rig = fx.cfg, fx.rig
    other = next(name for name in LAYOUTS if name != cfg.layout)
    other_rig = rig.but(layout_name=other)
    layout_diff = max_abs_diff(fx.speculative, speculative_joint(other_rig, fx.horizon, "target"))
    requests = min(cfg.samples, 128) or 64
    trace_a = run_monte_carlo(rig, fx.horizon, requests, cfg.seed, audit=True, trace=True)
    trace_b = run_monte_carlo(other_rig, fx.horizon, requests, cfg.seed, audit=True, trace=True)
    same = trace_a.published_trace == trace_b.published_trace
    audit_errors = trace_a.audit_errors + trace_b.audit_errors
    return Check(
        "layout_parity",
        layout_diff <= EXACT_TOLERANCE and same and not audit_errors,
        {
            "layouts": [cfg.layout, other],
            "exact_joint_max_abs_diff": layout_diff,
            "requests": requests,
            "published_successors_compared": len(trace_a.published_trace),
            "identical_successors": same,
            "audit_errors": len(audit_errors),
        },
        audit_errors[0] if audit_errors else "output, committed K/V identities and frontier after every round",
    )


def check_batch_invariance(fx: Fixture) -> Check:
    differs, cells = cell_batch_difference(fx.rig, fx.horizon)
    differs = differs or seeded_batch_difference(fx.rig, fx.horizon, fx.cfg.seed)
    return Check(
        "batch_invariance",
        differs is None,
        {"requests": BATCH_ROWS, "cells_compared": cells, "prompts": len(batch_prompts(fx.rig))},
        differs
        or "every cell of a round drafts and emits the same alone and among other prompts' cells; every request's "
        "tokens are the same alone and in a batch with different prompts",
    )


@cache
def dtype_edges_of(sampler_cls: type[RejectionSampler]):
    """dtype_edges depends on the rule alone: once per rule class (production, or a lab variant)."""
    return check_dtype_edges_of(SamplerUnderTest(sampler_cls.__name__, rule_sampler(sampler_cls()), ""), tokens=True)


def check_dtype_edges(fx: Fixture) -> Check:
    c = dtype_edges_of(RejectionSampler)
    detail = c.detail if c.passed else f"{c.detail}; first: {c.counterexample}"
    return Check("dtype_edges", c.passed, c.figures, detail)


def _first_row(model, policy, rig: Rig) -> torch.Tensor:
    """The processed row at the prompt: float64[V]."""
    raw = model.raw_logits(rig.prompt).unsqueeze(0)
    return policy.probabilities(raw, [policy.initial_state(rig.prompt)], rig.backend, torch.float64)[0]


def _backend_parity(rig: Rig, reference, horizon: int) -> Check:
    """Both softmax backends on every row of both tables after the prompt and each continuation of
    up to ``horizon`` tokens (every row a run to the horizon reads, and the next: whatever ran before
    this check), and the exact joint under the other backend."""
    contexts = outputs_within(rig, horizon)
    rows = [table.raw_logits(c) for table in (rig.target, rig.draft) for c in contexts]
    raw = torch.stack(rows)
    figures = {}
    ok = True
    for dtype, name in ((torch.float64, "float64"), (torch.float32, "float32")):
        diff = (softmax(raw, "online", dtype) - softmax(raw, "max_shift", dtype)).abs().max().item()
        figures[f"max_abs_diff_{name}"] = diff
        figures[f"tolerance_{name}"] = BACKEND_TOLERANCE[name]
        ok &= diff <= BACKEND_TOLERANCE[name]
    other = "online" if rig.backend == "max_shift" else "max_shift"
    joint_diff = max_abs_diff(reference, speculative_joint(rig.but(backend=other), horizon, "target"))
    figures["exact_joint_other_backend_diff"] = joint_diff
    figures["rows_compared"] = len(rows)
    ok &= joint_diff <= EXACT_TOLERANCE
    detail = "max_shift vs online (m, l) softmax on every table row within the horizon"
    return Check("backend_parity", ok, figures, detail)


def _ngram_exact(rig: Rig, horizon: int) -> Check:
    """Prompt-lookup drafting (q = point mass) under the same exact checks."""
    ng = ngram_rig(rig)
    reference = target_joint(ng, horizon)
    one = max_abs_diff(reference, speculative_joint(ng, horizon, "target"))
    rounds = max_abs_diff(reference, speculative_joint(ng, horizon, "rounds"))
    return Check(
        "exact_joint_ngram",
        max(one, rounds) <= EXACT_TOLERANCE,
        {"max_abs_diff": one, "max_abs_diff_rounds": rounds, "tolerance": EXACT_TOLERANCE, "prompt": list(ng.prompt)},
        "ngram:2 prompt lookup, q = point mass on each proposed token",
    )


BATCH_ROWS = 12


def batch_difference(rig: Rig, horizon: int, seed: int) -> str | None:
    """What differs between requests alone and in a batch (the exact cells, then seeded requests), or None."""
    return cell_batch_difference(rig, horizon)[0] or seeded_batch_difference(rig, horizon, seed)


def batch_prompts(rig: Rig) -> list[tuple[int, ...]]:
    """The exact batch check's prompts: the rig's, and it followed by token 0 (rows of their own: a
    K, or anything else, read off the batch differs between them)."""
    return [rig.prompt, rig.prompt + (0,)]


def cell_batch_difference(rig: Rig, horizon: int) -> tuple[str | None, int]:
    """Every cell of a round's uniforms (the exact enumeration's, at its centre) from each of
    ``batch_prompts``, run with every prompt's cells in one batch and with each prompt's alone: what
    a request drafts and emits must not depend on its batch-mates, for any uniforms. -> (the first
    difference or None, cells compared). Deterministic: no seed decides whether a difference shows."""
    enums = [Enumerator(rig.but(prompt=p), horizon) for p in batch_prompts(rig)]
    roots = [e.root() for e in enums]
    points = [e.round_points(root, probes=("centre",)) for e, root in zip(enums, roots)]
    alone = [e.run_cells([(root, pts)])[0] for e, root, pts in zip(enums, roots, points)]
    together = enums[0].run_cells(list(zip(roots, points)))
    cells = sum(len(pts) for pts in points)
    for prompt, solo, mixed in zip(batch_prompts(rig), alone, together):
        for j, ((a, _), (b, _)) in enumerate(zip(solo, mixed)):
            if (a.draft_token_ids, a.emitted) != (b.draft_token_ids, b.emitted):
                return (
                    f"prompt {list(prompt)}, cell {j}: alone it drafts {list(a.draft_token_ids)} and emits "
                    f"{list(a.emitted)}, among {cells} cells of {len(roots)} prompts it drafts "
                    f"{list(b.draft_token_ids)} and emits {list(b.emitted)}"
                ), cells
    return None, cells


def seeded_batch_difference(rig: Rig, horizon: int, seed: int) -> str | None:
    """Run requests with different prompts in one batch and each alone, over several rounds: a
    request's tokens must not depend on its batch-mates (its random streams are its own). -> what
    differs, or None."""
    v = rig.vocab
    requests = [
        Request(f"b{i}", rig.prompt + tuple((i * (j + 1)) % v for j in range(i % 3)), horizon, seed=seed)
        for i in range(BATCH_ROWS)
    ]
    together = rig.engine().run(requests).new_tokens()
    for request, tokens in zip(requests, together):
        alone = rig.engine().run([request]).new_tokens()[0]
        if alone != tokens:
            return f"{request.request_id}: {list(alone)} alone, {list(tokens)} in a batch of {BATCH_ROWS}"
    return None


CHECKS = (
    check_rounds,
    check_stop_token,
    check_auto_k,
    check_multi_source,
    check_shared_body,
    check_rational,
    check_monte_carlo,
    check_coupling,
    check_layout_parity,
    check_batch_invariance,
    check_dtype_edges,
)
