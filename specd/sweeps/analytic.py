"""The analytic ledger's inputs, read and checked once (K and batch ranges, the acceptance profile,
the cost model, the K/V shape), and its rows: what ``sweep-k`` without ``--measure`` and
``specd.ledger`` compute, by the same function."""

from __future__ import annotations

import re
from collections.abc import Mapping

from specd.core.tree_shape import TreeShape, parse_tree
from specd.errors import EmptyRange, InvalidCost, UsageError, shown
from specd.policy.kpolicy import check_tree_budget
from specd.policy.ledger import CostModel
from specd.policy.profile import AcceptanceProfile, constant_profile, per_position_profile
from specd.policy.row_costs import read_row_costs
from specd.sweeps.ledger import LedgerRow, ModelShape, Trees, sweep
from specd.sweeps.profile import profile_from_mapping, profile_from_trace

DEFAULT_ALPHA = 0.8
COST_FIELDS = ("draft_cost", "row_cost", "draft_row_cost", "state_cost", "queue_cost", "context_cost")
MAX_SWEEP_K = 256
MAX_SWEEP_BATCH = 65536
# Rows of one sweep (a K or tree at a batch size): each is priced in well under a millisecond, but a range
# is every value in it, and --k 1..256 --batch 1..65536 would be 16.8 million rows (hours, gigabytes).
MAX_SWEEP_ROWS = 10_000


def parse_ints(text, option: str, limit: int) -> list[int]:
    """'1..8', '1-8' or '1,4,16' (or a list of ints) -> ints in 1..limit (refused before any list is built;
    numbers in ASCII digits, judged by their length before they are converted)."""
    if isinstance(text, (list, tuple)):
        text = ",".join(str(v) for v in text)
    text = str(text).strip()
    if m := re.fullmatch(r"([0-9]+)\s*(?:\.\.|-)\s*([0-9]+)", text):
        lo, hi = _bounded(m.group(1), limit), _bounded(m.group(2), limit)
        if lo > hi:
            raise EmptyRange(f"{option} {shown(text)}: empty range")
        values = [lo, hi]
    else:
        parts = [x.strip() for x in text.split(",") if x.strip()]
        if not all(re.fullmatch(r"[+-]?[0-9]+", x) for x in parts):
            raise UsageError(f"{option} takes a range like 1..8 or a list like 1,4,16; got {shown(text)}")
        values = [_bounded(x, limit) for x in parts]
        if not values:
            raise EmptyRange(f"{option}: empty list")
    if min(values) < 1 or max(values) > limit:
        raise UsageError(f"{option} takes values in 1..{limit}; got {shown(text)}")
    return list(range(values[0], values[1] + 1)) if m else values


def _bounded(digits: str, limit: int) -> int:
    """A signed ASCII integer -> its value, or limit + 1 where it has more digits than ``limit`` (refused
    then: int() would refuse more than 4300 of them)."""
    sign = -1 if digits.startswith("-") else 1
    significant = digits.lstrip("+-").lstrip("0") or "0"
    return limit + 1 if len(significant) > len(str(limit)) else sign * int(significant)


def choose_profile(
    alpha: float | None = None,
    alphas: str | list[float] | None = None,
    rates: str = "reach_conditioned",
    trace_log: str | None = None,
    from_config: object = None,
    config_path: str | None = None,
) -> AcceptanceProfile:
    """One profile: a constant alpha, per-position alphas, an acceptance log's, a config's, or the
    default constant alpha (DEFAULT_ALPHA)."""
    given = [value is not None for value in (alpha, alphas, trace_log)]
    if sum(given) > 1:
        raise UsageError("give one of --alpha, --alphas, --trace-log")
    if alpha is not None:
        return constant_profile(alpha)
    if alphas is not None:
        if isinstance(alphas, str):
            try:
                alphas = [float(x) for x in alphas.split(",")]
            except ValueError:
                raise UsageError(f"--alphas takes numbers like 0.9,0.8; got {shown(alphas)}") from None
        return per_position_profile(alphas, rates)
    if trace_log is not None:
        return profile_from_trace(trace_log)
    if from_config is not None:
        if not isinstance(from_config, dict):
            raise UsageError(f"{config_path}: profile must be a mapping")
        return profile_from_mapping(from_config)
    return constant_profile(DEFAULT_ALPHA)


def cost_model(fields: Mapping[str, object]) -> CostModel:
    """A cost model from its fields by name (the others at their defaults), each a number."""
    unknown = sorted(set(fields) - set(COST_FIELDS))
    if unknown:
        raise UsageError(f"unknown cost field {shown(unknown[0])}; the fields are {', '.join(COST_FIELDS)}")
    return CostModel(**{name: _number(value, name) for name, value in fields.items()})


def kv_shape(text: str | None) -> ModelShape | None:
    """--kv-shape layers,kv_heads,head_dim[,bytes] -> the shape, or None."""
    if not text:
        return None
    try:
        parts = [int(x) for x in text.split(",")]
        shape = ModelShape(*parts)
    except (ValueError, TypeError):
        raise UsageError(f"--kv-shape takes layers,kv_heads,head_dim[,bytes]; got {shown(text)}") from None
    if min(parts) < 1:
        raise UsageError(f"--kv-shape values must be >= 1; got {shown(text)}")
    return shape


def analytic(
    profile: AcceptanceProfile,
    cost: CostModel,
    ks: list[int],
    batches: list[int],
    context: object = 0,
    stop_probability: object = 0.0,
    shape: ModelShape | None = None,
    k_given: bool = True,
    trees: Trees | None = None,
) -> list[LedgerRow]:
    """The ledger's rows over the profile and the cost model (and ``trees``' shapes), with the -k auto
    row per batch size. Without ``k_given``, a per-position profile sets how far K goes."""
    if not isinstance(context, int) or isinstance(context, bool) or context < 0:
        raise UsageError(f"--context must be an integer >= 0, got {shown(context)}")
    if not isinstance(stop_probability, (int, float)) or isinstance(stop_probability, bool):
        raise UsageError(f"--stop-probability must be in [0, 1), got {shown(stop_probability)}")
    if not 0.0 <= stop_probability < 1.0:
        raise UsageError(f"--stop-probability must be in [0, 1), got {shown(stop_probability)}")
    if not (k_given or profile.constant):
        ks = [k for k in ks if k <= len(profile.alphas)]
    rows = (len(ks) + len(trees.shapes if trees else ())) * len(batches)
    if rows > MAX_SWEEP_ROWS:
        raise UsageError(
            f"{len(ks)} K values{' and trees' if trees and trees.shapes else ''} at {len(batches)} batch sizes make "
            f"{rows} rows; a sweep prices at most {MAX_SWEEP_ROWS} (a range is every value in it: give fewer, or a "
            "list like 1,4,16,64)"
        )
    return sweep(profile, cost, ks, batches, context, float(stop_probability), shape, auto=True, trees=trees)


def _number(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidCost(f"cost {name} = {shown(value)} is not a number")
    return float(value)


def tree_shapes(specs, budget, siblings) -> tuple[TreeShape, ...]:
    """--tree's static shapes (a dynamic tree's nodes depend on the draft's rows: refused), checked with
    --tree-budget and --sibling-alphas before any work."""
    shapes = tuple(parse_tree(spec, "--tree") for spec in specs)
    for shape in shapes:
        if shape.dynamic:
            raise UsageError(
                f"--tree {shape.spec!r}: sweep-k prices static shapes (a dynamic tree's nodes follow the draft's rows)"
            )
    if budget is not None:
        check_tree_budget(budget)
    if siblings is not None and not (shapes or budget):
        raise UsageError("--sibling-alphas prices trees: give --tree SPEC or --tree-budget N with it")
    return shapes


def curve_costs(path: str, cost: CostModel, given: set[str]):
    """The ledger's costs on a --row-costs curve, with the cost model's draft, state and queue costs; a
    cost the curve replaces, given too, is refused rather than ignored."""
    replaced = [
        name for name in ("row_cost", "draft_row_cost", "context_cost") if name in given or f"config: {name}" in given
    ]
    if replaced:
        raise UsageError(
            f"--{replaced[0].replace('_', '-')}: --row-costs gives the calls' cost by rows; give one of them"
        )
    if "context" in given:
        raise UsageError("--context: a --row-costs curve does not price the context (its calls were timed at theirs)")
    return read_row_costs(path).costs(cost.draft_cost, cost.state_cost, cost.queue_cost)


def numbers(text: str, flag: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise UsageError(f"{flag} takes numbers like 0.3,0.1; got {text!r}") from None
