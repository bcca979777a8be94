"""Samplers written here from the protocols of docs/oracle.md, apart from specd's own code: correct ones
written in different ways, and each of a verifier author's slips. The oracle's default check must pass
the first and fail every one of the second, whatever size the user names.

Tree samplers: ``sampler(tokens, parents, depths, p, q, drawn, u) -> (path, terminal)``. Chain samplers:
``sampler(p, q, drafts, k_lens, accept_u, terminal_u) -> (accepted, terminal)``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import torch


def _children(parents) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for n, parent in enumerate(parents.tolist()):
        kids.setdefault(parent, []).append(n)
    return kids


def _normalized(row: list[float]) -> list[float]:
    total = sum(row)
    return [x / total for x in row]


# A division guard: q(d) clamped from below (1e-5 showed on draft_nearly_misses from its start; 1e-6 and 1e-10 only
# since a second token of it is 1e-11 to 1e-6 under both rows, an eighth helper's).
CLAMPS = {"ratio_with_q_clamped": 1e-5, "ratio_with_q_clamped_at_1e_6": 1e-6, "ratio_with_q_clamped_at_1e_10": 1e-10}


def _walk(tokens, parents, p, q, drawn, u, slip: str | None = None, law_out: bool = False):
    """Recursive rejection sampling in floats: at each accepted node its children in order, child d kept
    when U < p'(d) / q'(d) (p' what the elder siblings left, q' the law the child was drawn from: the
    draft row, without the refused children when drawn without replacement; a point mass when ranked);
    a refusal leaves p' = normalize([p' - q']_+); after the last refusal the correction is drawn from
    p', after a node without children the bonus from its row. ``slip`` names one mistake to make."""
    kids = _children(parents)
    if slip == "children_next_to_the_first":  # a node's children taken as the nodes after its first
        kids = {parent: list(range(nodes[0], nodes[0] + len(nodes))) for parent, nodes in kids.items()}
    rows_p, rows_q = p.tolist(), q.tolist() if q is not None else None  # the rows once, as lists
    tokens, parents = tokens.tolist(), parents.tolist()
    if slip == "greedy_where_the_root_target_row_is_a_point_mass" and max(rows_p[0]) == 1:
        return _greedy(kids, tokens, rows_p, law_out)
    both = slip == "greedy_where_the_root_rows_are_both_point_masses" and rows_q is not None
    if both and max(rows_p[0]) == 1 and max(rows_q[0]) == 1:  # a greedy request, its processors' one-hot rows
        return _greedy(kids, tokens, rows_p, law_out)
    root_equal = slip == "first_child_kept_below_where_the_root_rows_are_equal" and drawn in ("sampled", "iid")
    root_equal = root_equal and rows_p[0] == rows_q[0]  # children drawn from q (ranked ones test against a point)
    at, path, younger = -1, [], False  # younger: the walk passed a child kept after a refused sibling
    memo: dict = {}
    look = at  # the node whose children are tried (``at`` but for a slip)
    while True:
        left = list(rows_p[at + 1])
        unchanged = list(left)
        as_sampled = slip == "ranked_children_tested_as_sampled_past_16_nodes" and drawn == "rank" and len(tokens) > 16
        row = list(rows_q[at + 1]) if q is not None and (drawn != "rank" or as_sampled) else None
        ring = RINGS.get(slip or "")
        if ring is not None and row is not None and len(path) >= ring:  # level ring + 1 reads `ring` levels up
            row = list(rows_q[(path[-ring - 1] if len(path) > ring else -1) + 1])
        if slip == "draft_rows_read_at_a_stride_of_64" and row is not None and len(row) > 64:
            flat = [x for r in rows_q for x in r] + [0.0] * len(row)  # every row 64 tokens on from the one before
            row = flat[(at + 1) * 64 : (at + 1) * 64 + len(row)]
        drawn_from = list(row) if row is not None else None
        order = kids.get(look, [])
        if slip in VALUE_SLIPS and order:
            fast = _fast_path(slip, left, row, tokens, order)
            if fast is not None:
                if fast[0] is None:
                    return path, fast[1]
                path.append(fast[0])
                at = look = fast[0]
                continue
        if slip == "siblings_reordered":
            order = order[::-1]
        last = None
        for c in order:
            d = tokens[c]
            if slip == "child_of_no_target_mass_skipped" and unchanged[d] == 0:
                continue  # no test, no residual step, no removal: exact wherever the target is a point mass
            law = row if row is not None else [float(x == d) for x in range(len(left))]
            key = order[0] if slip == "shared_uniform" else c
            third_level = slip == "siblings_at_the_third_level_on_the_unchanged_row" and len(path) >= 2
            third_level = third_level or (
                slip == "siblings_from_the_fifth_level_on_the_unchanged_row" and len(path) >= 4
            )
            num = unchanged[d] if third_level else left[d]
            den = max(law[d], CLAMPS[slip]) if slip in CLAMPS and row is not None else law[d]
            if slip == "ratio_memoized_by_what_is_left":  # the first node's q'(d) where p' and d were these
                den = memo.setdefault((tuple(left), d), den)
            near_one = slip == "kept_within_1e_9_of_a_ratio_of_one" and num / den >= 1 - 1e-9
            near_one = near_one or (root_equal and at >= 0 and c == order[0])  # "the draft is the target"
            near_one = near_one or (slip == "child_kept_where_the_target_row_is_flat" and len(set(left)) == 1)
            flat_q = slip == "child_kept_where_the_draft_row_is_flat" and row is not None and len(set(row)) == 1
            near_one = near_one or flat_q  # "no draft law": nothing to test against
            near_one = near_one or (den == 0 and slip in FAR_ROW_SLIPS)  # a row read from elsewhere: p' / 0 = inf
            untested = slip == "ninth_node_refused_untested" and len(path) >= 8  # a loop unrolled eight times
            if not untested and (
                near_one
                or (
                    u.node(key) <= num / den
                    if _at_or_below(slip, len(path), order.index(c))
                    else u.node(key) < num / den
                )
            ):
                younger = younger or last is not None
                path.append(c)
                below = at >= 0
                at = order[0] if slip == "younger_walked_as_eldest" and below else c
                eldest = slip == "younger_children_from_the_eldest_below_the_root" and below and last is not None
                look = order[0] if eldest else at
                break
            last = c
            if slip == "middle_level_previous_q" and at >= 0 and row is not None and any(kids.get(o) for o in order):
                law = list(rows_q[parents[at] + 1])  # a node with a parent and grandchildren: its parent's row
            if slip == "draft_rows_kept_as_their_32_likeliest" and row is not None:
                law = _top(law, 32)  # sparse draft probabilities; the child's own test read q'(d) from the full row
            residual = [abs(a - b) if slip == "residual_abs" else max(0.0, a - b) for a, b in zip(left, law)]
            if slip == "residual_keeps_p_where_the_rows_are_equal":
                residual = [a if a == b else r for a, b, r in zip(left, law, residual)]
            if slip == "residual_memoized_by_what_is_left":  # the first node's residual where p' and d were these
                residual = memo.setdefault(("residual", tuple(left), d), residual)
            if slip == "residual_floored" and sum(residual) < 1e-6:
                residual = list(unchanged)
            if sum(residual) > 0:  # rounding can refuse a sure child (p' = q', ratio 1 - 2^-53): keep p' there
                left = _normalized(residual)
            removes = drawn == "sampled" or as_sampled or slip == "iid_as_without_replacement" and drawn == "iid"
            capped = {"draft_removals_capped_at_two": 2, "draft_removals_capped_at_three": 3}.get(slip or "")
            if capped is not None and order.index(c) >= capped:
                removes = False  # an unrolled loop of two (three) removals
            if slip == "without_replacement_taken_as_iid_past_eight_nodes" and len(tokens) > 8:
                removes = False  # a batched kernel for larger trees draws i.i.d.
            if removes and row is not None:
                if slip == "elder_removals_forgotten" or slip == "elder_removals_forgotten_below_the_root" and at >= 0:
                    row = list(drawn_from)  # each removal from the draft's row as drawn
                row[d % 64 if slip == "refused_tokens_in_a_64_bit_mask" else d] = 0.0  # 1 << d wraps at 64
                guarded = slip == "draft_renormalized_only_above_1e_3" and sum(row) < 1e-3
                # a loop unrolled for four children: from the fourth refusal on, the removal's total not divided out
                guarded = guarded or slip == "renormalization_forgotten_after_four_refusals" and order.index(c) >= 3
                third = slip == "renormalization_forgotten_from_the_second_refusal_at_the_third_level"
                guarded = guarded or third and len(path) >= 2 and order.index(c) >= 1
                warp = slip == "draft_renormalized_over_the_first_32_tokens"
                if warp and sum(row[:32]) > 0:  # one warp's total
                    row = [x / sum(row[:32]) for x in row]
                elif slip != "no_renormalization" and not guarded and sum(row) > 0:  # nothing left: no next child
                    row = _normalized(row)
        else:
            if slip == "bonus_wrong_row" and last is None and path:
                left = list(rows_p[parents[path[-1]] + 1])  # the bonus from the parent's row, not the leaf's
            five = slip == "correction_unchanged_target_in_a_tree_of_five_levels" and _levels(parents) == 5
            if (slip == "correction_unchanged_target" or five) and last is not None:
                left = unchanged
            cut_here = {
                "correction_top_two": True,
                "correction_top_two_below_the_root": at >= 0,
                "correction_top_two_at_a_wide_node": len(order) >= 2,
                "correction_top_two_under_a_younger_sibling": younger,
                "correction_top_two_at_a_wide_node_below_the_root": at >= 0 and len(order) >= 2,
                "correction_top_two_after_three_accepted": len(path) >= 3,
                "correction_top_two_after_four_accepted": len(path) >= 4,
                "correction_top_two_at_a_wide_node_under_a_younger_sibling": younger and len(order) >= 2,
            }
            if cut_here.get(slip or "") and last is not None:
                left = _top(left)
            if slip == "correction_top_four" and last is not None:
                left = _top(left, 4)
            if slip == "correction_top_sixteen_where_v_is_17_to_64" and 16 < len(left) <= 64 and last is not None:
                left = _top(left, 16)  # a path for one warp
            if slip == "terminal_over_the_first_32_tokens" and sum(left[:32]) > 0:  # one warp's lanes
                left = left[:32] + [0.0] * len(left[32:])
            if slip == "terminal_over_whole_blocks_of_eight" and len(left) >= 8:  # the tail block dropped
                left = _whole_blocks(left, 8)
            left = _block_dropped(slip, _tail_dropped(slip, left))
            if slip == "terminal_in_float32_past_256" and len(left) > 256:  # a buffer for large vocabularies
                left = torch.tensor(left, dtype=torch.float32).tolist()
            if law_out:
                return path, left
            if slip == "correction_at_last_uniform" and last is not None:
                return path, u.draw(left, key=("node", last))
            deep = slip == "draws_at_u_at_or_below_the_running_sum_from_the_fourth_level" and len(path) >= 3
            if slip == "draws_at_u_at_or_below_the_running_sum" or deep:
                return path, _draw_at_or_below(left, u.terminal())
            deep_bonus = slip == "bonus_drawn_at_u_not_times_the_total_two_levels_down" and len(path) >= 2
            if (slip == "bonus_drawn_at_u_not_times_the_total" or deep_bonus) and last is None:
                return path, _draw_at_u(left, u.terminal())
            return path, u.draw(left)


def _greedy(kids: dict, tokens: list, rows_p: list, law_out: bool):
    """A greedy walk: at each node the first child holding its row's argmax is kept, else the argmax is the
    terminal (the tree's law only where every row on the path is a point mass)."""
    at, path = -1, []
    while True:
        row = rows_p[at + 1]
        top = max(range(len(row)), key=lambda x: (row[x], -x))
        kept = next((c for c in kids.get(at, []) if tokens[c] == top), None)
        if kept is None:
            return (path, [float(x == top) for x in range(len(row))]) if law_out else (path, top)
        path.append(kept)
        at = kept


# Fast paths with a tolerance, each a guard a kernel's author might add: they move mass only where the
# rows are within it (specd.oracles.samplers.tables.SMALL_VALUES).
VALUE_SLIPS = ("greedy_when_nearly_one_hot", "first_child_kept_when_rows_allclose")


def _fast_path(slip: str, left: list, row, tokens, order):
    """(the child kept, or None and the terminal) where the slip's fast path is taken, else None."""
    if slip == "greedy_when_nearly_one_hot" and max(left) >= 1 - 1e-5:  # greedy where p' is close to one-hot
        top = max(range(len(left)), key=lambda x: (left[x], -x))
        kept = next((c for c in order if tokens[c] == top), None)
        return (kept, None) if kept is not None else (None, top)
    close = row is not None and all(abs(a - b) <= 1e-8 + 1e-5 * abs(b) for a, b in zip(left, row))
    if slip == "first_child_kept_when_rows_allclose" and close:  # torch.allclose's defaults
        return order[0], None
    return None


def _at_or_below(slip: str | None, depth: int, rank: int) -> bool:
    """Whether a child's test reads U <= p'/q' (a slip) rather than U < p'/q': everywhere, or only at the third
    level (``depth``: nodes accepted above it) or from a node's third child (``rank``: its place among them)."""
    return (
        slip == "accepts_at_u_equal_to_the_ratio"
        or (slip == "accepts_at_u_equal_to_the_ratio_from_the_third_level" and depth >= 2)
        or (slip == "accepts_at_u_equal_to_the_ratio_from_the_third_child" and rank >= 2)
    )


def _draw_at_or_below(law: list, unit) -> int:
    """An inverse CDF that keeps the first token whose running sum is at or above U (U <= cum): at U = 0 a
    leading token of no mass."""
    total, below = sum(law), 0.0
    for x, w in enumerate(law):
        below += w
        if unit <= below / total:
            return x
    return len(law) - 1


def _levels(parents: list[int]) -> int:
    """How many levels a tree of these parents (each before its children; -1: the root) has."""
    depth: dict[int, int] = {}
    for n, parent in enumerate(parents):
        depth[n] = depth.get(parent, 0) + 1
    return max(depth.values(), default=0)


def _draw_at_u(law: list, unit) -> int:
    """An inverse CDF that takes the row's total for 1: the first token of mass whose running sum exceeds U
    (not U times the total), else the last token of mass."""
    below = 0 * law[0]
    for x, w in enumerate(law):
        below += w
        if w > 0 and unit < below:
            return x
    return max(x for x, w in enumerate(law) if w > 0)


# Where V > 4 leaves a tail of one token (two) after blocks of four: that tail dropped, where the rest has mass.
TAILS = {
    "terminal_over_blocks_of_four_a_tail_of_one_dropped": 1,
    "terminal_over_blocks_of_four_a_tail_of_two_dropped": 2,
}


def _tail_dropped(slip: str | None, law: list) -> list:
    """``law`` as the slip ``slip`` of TAILS cuts it (or as it is)."""
    tail = TAILS.get(slip or "")
    if tail is None or len(law) <= 4 or len(law) % 4 != tail:
        return law
    return _whole_blocks(law, 4)


def _block_dropped(slip: str | None, law: list) -> list:
    """``law`` over whole blocks of 128 tokens where V > 128, for the slip that does so; else as it is."""
    return _whole_blocks(law, 128) if slip == "terminal_over_blocks_of_128" and len(law) > 128 else law


def _whole_blocks(law: list, width: int) -> list:
    """``law`` over whole blocks of ``width`` tokens: its partial last block dropped (its weights 0), where the rest
    has mass; else as it is."""
    whole = len(law) - len(law) % width
    if whole == len(law) or sum(law[:whole]) == 0:
        return law
    return law[:whole] + [0 * law[0]] * (len(law) - whole)


def _top(law: list, keep: int = 2) -> list:
    """``law`` with all but its ``keep`` largest weights (the lower index first on ties) set to 0."""
    kept = sorted(range(len(law)), key=lambda x: (-law[x], x))[:keep]
    return [w if x in kept else 0 * w for x, w in enumerate(law)]


def exact_floats(tokens, parents, depths, p, q, drawn, u):
    """Correct: recursive rejection sampling in floats, the terminal drawn with the terminal uniform."""
    return _walk(tokens, parents, p, q, drawn, u)


def exact_law(tokens, parents, depths, p, q, drawn, u):
    """Correct: the same, returning the terminal's distribution instead of drawing it."""
    return _walk(tokens, parents, p, q, drawn, u, law_out=True)


def exact_one_coin(tokens, parents, depths, p, q, drawn, u):
    """Correct: one coin per expansion, never reading q: the coin draws a token from what is left of the
    target's row; a child holding it is descended into (a repeated token is the first holder's), any
    other token is the terminal. Each step draws from the target, so the law is the target's."""
    kids = _children(parents)
    at, path = -1, []
    while True:
        left = p[at + 1].tolist()
        coin = u.uniform(("expand", at))
        below, token = 0.0, max(x for x, w in enumerate(left) if w > 0)
        total = sum(left)
        for x, w in enumerate(left):
            below += w
            if w > 0 and coin < below / total:
                token = x
                break
        holders = [c for c in kids.get(at, []) if int(tokens[c]) == token]
        if not holders:
            return path, token
        path.append(holders[0])
        at = holders[0]


def _slip(name: str, doc: str):
    def sampler(tokens, parents, depths, p, q, drawn, u):
        return _walk(tokens, parents, p, q, drawn, u, slip=name)

    sampler.__name__ = sampler.__qualname__ = name
    sampler.__doc__ = doc
    return sampler


TREE_SLIPS = {
    "correction_at_last_uniform": "the correction drawn at the last refused child's own uniform (known to be large)",
    "no_renormalization": "without replacement, q not renormalized after a refused child is removed",
    "shared_uniform": "one uniform shared by all the siblings of a node",
    "bonus_wrong_row": "the bonus after an accepted leaf drawn from its parent's row",
    "residual_abs": "the residual |p' - q'| instead of [p' - q']_+",
    "siblings_reordered": "siblings tried in the reverse of the order they were drawn in",
    "correction_unchanged_target": "the correction drawn from the node's target row as it was, not what is left",
    "middle_level_previous_q": "a refusal under a node between the root and a third level taken against the row "
    "its parent's children were drawn from",
    # shows only where a correction has three tokens of mass: V = W' + 2 under a root of one child
    "correction_top_two": "the correction drawn from the two likeliest tokens of what is left",
    # shows only under a third child: with two, a single refusal comes before any test
    "elder_removals_forgotten": "without replacement, each refused child removed from the draft's row as it was "
    "drawn from, so only the latest refused token is gone",
    # it divides by zero where an iid sibling repeats a refused token, and returns on every other tree
    "iid_as_without_replacement": "children drawn i.i.d. verified as if drawn without replacement (q loses d)",
    # shows only where a node's children are not next to each other (nodes depth-first, an elder sibling's
    # descendants between them): breadth-first, every size's order, they always are
    "children_next_to_the_first": "a node's children taken to be the nodes right after its first child (as a "
    "breadth-first layout has them)",
    # below the root only (a walk that special-cases the root's children): under a tree of one level it is exact
    "younger_walked_as_eldest": "below the root, a kept younger sibling's walk goes on from its eldest sibling "
    "(that node's row for the bonus, its children for the next test)",
}
# Each shows, drawn without replacement or ranked, only where such a node's children, all refused, leave
# three tokens of mass (specd.oracles.samplers.coverage.WIDE_TREES: `2` at V = 5, a younger sibling's child
# and `1,1,1` at V = 4; WIDE_BELOW_THE_ROOT: `1,2` at V = 5); i.i.d. children, which may repeat a token and
# leave more, showed some of them before.
TREE_CUT_SLIPS = {
    "correction_top_two_below_the_root": "below the root, the correction drawn from the two likeliest tokens left",
    "correction_top_two_at_a_wide_node": "after two children or more are refused, the correction drawn from the two "
    "likeliest tokens left",
    "correction_top_two_under_a_younger_sibling": "below a child kept after a refused sibling, the correction "
    "drawn from the two likeliest tokens left",
    # shown by 1,2 at V = 5 alone
    "correction_top_two_at_a_wide_node_below_the_root": "below the root, after two children or more are refused, "
    "the correction drawn from the two likeliest tokens left",
}
# Each shows only at a shape or on a table the sizes above lacked (specd.oracles.samplers.coverage.SEED_TREES
# and SMALL_VALUE_TREE), or where a uniform is exactly 0 (zero_target_mass): each passed the check before.
TREE_LATER_SLIPS = {
    "elder_removals_forgotten_below_the_root": "below the root, without replacement, each refused child removed "
    "from the draft's row as drawn (a third child below the root shows it)",
    "younger_children_from_the_eldest_below_the_root": "below the root, after a younger sibling is kept, its "
    "children looked up under its eldest sibling (its rows its own)",
    "siblings_at_the_third_level_on_the_unchanged_row": "from the third level on, each sibling tested against "
    "its parent's unchanged target row",
    "draft_rows_in_a_ring_of_three": "the draft's rows kept in a ring of three by depth: the fourth level reads "
    "the row of the node three levels up",
    "correction_top_four": "the correction drawn from the four likeliest tokens of what is left",
    "kept_within_1e_9_of_a_ratio_of_one": "a child whose ratio p'/q' is within 1e-9 of 1 kept without its uniform "
    "(a fast path: the tables of small values' ratios_near_one shows it)",
    "child_of_no_target_mass_skipped": "a child the node's target row gives no mass skipped: no test, no residual "
    "step, no removal from q' (a point-mass target hides it: its residual is that point again)",
    "draft_removals_capped_at_two": "without replacement, only the first two refused children removed from q' (a "
    "fourth child is tested with the third's token still in q')",
    "ratio_with_q_clamped": "the ratio p'(d) / max(q'(d), 1e-5) (a division guard)",
    "residual_floored": "a residual of mass below 1e-6 replaced by the node's target row",
    "greedy_when_nearly_one_hot": "greedy (the argmax kept or emitted) where p' is within 1e-5 of a point mass",
    "first_child_kept_when_rows_allclose": "the first child kept untested where p' and q' are allclose (rtol 1e-5)",
    "accepts_at_u_equal_to_the_ratio": "a child kept when U <= p'(d) / q'(d): at U = 0 a child of target mass 0",
    # each passed before zero_target_mass ran on the trees 1,1,1 and 3 (a helper's)
    "accepts_at_u_equal_to_the_ratio_from_the_third_level": "from the third level on, a child kept when U <= p'/q'",
    "accepts_at_u_equal_to_the_ratio_from_the_third_child": "from a node's third child on, a child kept when "
    "U <= p'/q'",
    "draws_at_u_at_or_below_the_running_sum_from_the_fourth_level": "after three accepted nodes, the terminal the "
    "first token whose running sum is at or above U",
    "draws_at_u_at_or_below_the_running_sum": "the terminal the first token whose running sum is at or above U: "
    "at U = 0 a leading token of no mass",
}
# Each passed the check before a table with exact coincidences (a coarse grid) or a younger sibling of two
# children with a correction of three tokens.
TREE_GRID_SLIPS = {
    "residual_keeps_p_where_the_rows_are_equal": "the residual keeps p'(x) where p'(x) = q'(x) exactly (a mask "
    "p' >= q' that keeps p' instead of p' - q')",
    "correction_top_two_at_a_wide_node_under_a_younger_sibling": "below a child kept after a refused sibling, "
    "after two children or more are refused, the correction drawn from the two likeliest tokens left",
}
# Each passed every default case before the fifth child's (specd.oracles.samplers.coverage.FIFTH_SIBLING): the first
# showed only where the named tree had a node of five children (late_siblings), the second is the sixth hunt's.
TREE_FIFTH_CHILD_SLIPS = {
    "draft_removals_capped_at_three": "without replacement, only the first three refused children removed from q' "
    "(a fifth child is tested with the fourth's token still in q')",
    "renormalization_forgotten_after_four_refusals": "without replacement, q' renormalized after each of the first "
    "three refused children only (a loop unrolled for four children): a fifth child is tested on a q' of less mass",
}
# Each passed every default case before an eighth helper's hunt: a guard below the smallest draft mass of any table
# (1e-8), and a third child at the third level (specd.oracles.samplers.coverage.THIRD_AT_THE_THIRD_LEVEL).
TREE_EIGHTH_HUNT_SLIPS = {
    "ratio_with_q_clamped_at_1e_6": "the ratio p'(d) / max(q'(d), 1e-6) (a division guard)",
    "ratio_with_q_clamped_at_1e_10": "the ratio p'(d) / max(q'(d), 1e-10) (a division guard)",
    "renormalization_forgotten_from_the_second_refusal_at_the_third_level": "without replacement, at the third "
    "level and below, q' not renormalized from the second refused child on: a third child is tested on a q' of less "
    "mass",
}
# Shows only where the named tree is four levels deep or more (specd.oracles.samplers.coverage.DEEP_VOCAB).
TREE_DEEP_SLIPS = {
    "correction_top_two_after_three_accepted": "after three accepted nodes, the correction drawn from the two "
    "likeliest tokens left",
}
# Each decides the tree on its root's rows, and passed every table whose rows were all alike (a helper's).
# Shows only at V > 32 (the tree 1 at V = 65, wide_vocabulary).
TREE_WIDE_VOCAB_SLIPS = {
    "terminal_over_the_first_32_tokens": "the terminal drawn over its law's first 32 tokens only (one warp's total "
    "and running sum), where they have mass",
    "terminal_over_whole_blocks_of_eight": "the terminal drawn over whole blocks of eight tokens (V >= 8): the tail "
    "block of V % 8 tokens dropped, where the rest has mass (shows where 8 does not divide V: 65)",
}
# Each passed every size before a terminal drawn past V = 64 with a tail of one token and of two after blocks of 4
# to 64 (V = 65, 66), a bonus row whose weights do not sum to 1 (bonus_row_total; a helper's), or every depth up
# to 8 (a tree of five levels: the chain-shaped one at V = 3).
TREE_SIZE_SLIPS = {
    "correction_unchanged_target_in_a_tree_of_five_levels": "in a tree of five levels (a branch kept for one "
    "depth), the correction drawn from the node's target row as it was",
    "terminal_over_blocks_of_four_a_tail_of_one_dropped": "the terminal drawn over whole blocks of four tokens "
    "where V % 4 = 1 (V > 4): the last token dropped, where the rest has mass",
    "terminal_over_blocks_of_four_a_tail_of_two_dropped": "the terminal drawn over whole blocks of four tokens "
    "where V % 4 = 2 (V > 4): the last two tokens dropped, where the rest has mass",
    "bonus_drawn_at_u_not_times_the_total": "the bonus the first token whose running sum exceeds U, its row's "
    "total taken for 1",
}
# Each passed every size and table before a fifth helper's hunt: a bonus row not summing to 1 two levels down
# (bonus_row_total's tree 1,1), a draft within 1e-7 of a point mass at a node with two children
# (draft_nearly_point_mass), a vocabulary past 128 (V = 192).
TREE_HUNT5_SLIPS = {
    "bonus_drawn_at_u_not_times_the_total_two_levels_down": "the bonus after an accepted leaf two levels down or "
    "more the first token whose running sum exceeds U, its row's total taken for 1",
    "draft_renormalized_only_above_1e_3": "without replacement, q' renormalized after a refused child only where "
    "what is left of it sums to 1e-3 or more (a guard against a tiny divisor)",
    "terminal_over_blocks_of_128": "where V > 128, the terminal drawn over whole blocks of 128 tokens: the partial "
    "last block dropped, where the rest has mass",
}
# Each passed every size and table before draft rows of more than 32 tokens of mass (the tree 1 at V = 65 on
# wide_draft) and siblings past token 32 and 64 in a tree of more than 8 nodes (BIG_TREE at V = 65 on far_siblings;
# a fifth helper's).
TREE_WIDE_DRAFT_SLIPS = {
    "draft_rows_kept_as_their_32_likeliest": "the draft's rows kept as their 32 likeliest tokens (sparse draft "
    "probabilities): a refusal's residual formed with q' zero elsewhere",
    "draft_renormalized_over_the_first_32_tokens": "without replacement, q' renormalized after a refused child by "
    "the total of its first 32 tokens (one warp's)",
    "refused_tokens_in_a_64_bit_mask": "without replacement, refused tokens kept in a 64-bit mask whose shift wraps: "
    "a refused token d past 63 removes token d mod 64 from q'",
    "without_replacement_taken_as_iid_past_eight_nodes": "in a tree of more than 8 nodes (a batched kernel's), "
    "children drawn without replacement taken as i.i.d. (q' not updated after a refused sibling)",
}
# Each passed every size before V = 33 (the band of 17 to 64 tokens), a ninth level, and a tree of more than 16 nodes
# (a sixth helper's).
TREE_SIXTH_HUNT_SLIPS = {
    "correction_top_sixteen_where_v_is_17_to_64": "where 16 < V <= 64 (a path for one warp), the correction drawn from "
    "the 16 likeliest tokens of what is left",
    "ninth_node_refused_untested": "a ninth node on a path taken as refused without a test (a loop unrolled eight "
    "times)",
    "ranked_children_tested_as_sampled_past_16_nodes": "in a tree of more than 16 nodes, ranked children tested as if "
    "drawn without replacement from q",
}
# Each passed every size before V = 257 and rows of full support after eight accepted nodes (deep_rows; a sixth
# helper's, a seventh hunt).
TREE_SEVENTH_HUNT_SLIPS = {
    "terminal_in_float32_past_256": "past 256 tokens, the terminal's law kept in a float32 buffer (each weight "
    "rounded)",
    "correction_top_two_after_four_accepted": "after four accepted nodes, the correction drawn from the two likeliest "
    "tokens of what is left",
    "siblings_from_the_fifth_level_on_the_unchanged_row": "from the fifth level on, each sibling tested on the "
    "parent's unchanged target row (not what its refused elders left)",
}
TREE_FIRST_ROW_SLIPS = {
    "greedy_where_the_root_rows_are_both_point_masses": "the tree walked greedily where the root's target and draft "
    "rows are both point masses (a greedy request's processors leave them so; a third helper's)",
    "first_child_kept_below_where_the_root_rows_are_equal": "children drawn from q (sampled or i.i.d.): where the "
    "root's rows are equal (p = q: the draft taken to be the target), below the root each first child kept untested",
    "greedy_where_the_root_target_row_is_a_point_mass": "the tree walked greedily (each node's argmax child kept, "
    "else the argmax emitted) where the root's target row is a point mass",
}
TREE_FLAT_SLIPS = {
    "child_kept_where_the_target_row_is_flat": "a child kept untested where what is left of its node's target row "
    "is exactly uniform",
    "child_kept_where_the_draft_row_is_flat": "a child kept untested where its node's draft row is exactly uniform "
    "(taken for no draft law)",
    "ratio_memoized_by_what_is_left": "the ratio p'(d) / q'(d) memoized by what is left of the target's row and the "
    "token: a later node with both the same reuses the first one's q'(d) (rows that repeat show it)",
    "residual_memoized_by_what_is_left": "the residual [p' - q']_+ memoized by what is left of the target's row and "
    "the refused token: a later node refusing the same token under the same p' reuses the first one's (its own q' "
    "forgotten; a helper's)",
}
# Each reads a node's draft row from another's place, and passed every size before the chain-shaped tree of
# eight levels at V = 65 on sparse_rows (specd.oracles.samplers.coverage.FAR_ROWS_CASE), where such a row puts
# q'(d) = 0 under the child (a float ratio p' / 0 = inf keeps it).
TREE_FAR_ROW_SLIPS = {
    "draft_rows_in_a_ring_of_four": "the draft's rows kept in a ring of four by depth: the fifth level reads the "
    "row of the node four levels up",
    "draft_rows_in_a_ring_of_seven": "the draft's rows kept in a ring of seven by depth: the eighth level reads the "
    "row of the node seven levels up",
    "draft_rows_in_a_ring_of_eight": "the draft's rows kept in a ring of eight by depth: the ninth level reads the "
    "root's row (shown by the ninth level)",
    "draft_rows_read_at_a_stride_of_64": "where V > 64, the draft's rows read 64 tokens apart (a block's stride), "
    "not V: every row after the root's shifted",
}
# ring slips, chain and tree, by name -> the ring's size
RINGS = {
    "draft_rows_in_a_ring_of_three": 3,
    "draft_rows_in_a_ring_of_four": 4,
    "draft_rows_in_a_ring_of_seven": 7,
    "draft_rows_in_a_ring_of_eight": 8,
}
TREE_SLIP_SETS = (
    TREE_FAR_ROW_SLIPS,
    TREE_FLAT_SLIPS,
    TREE_SLIPS,
    TREE_CUT_SLIPS,
    TREE_LATER_SLIPS,
    TREE_FIFTH_CHILD_SLIPS,
    TREE_EIGHTH_HUNT_SLIPS,
    TREE_DEEP_SLIPS,
    TREE_GRID_SLIPS,
    TREE_FIRST_ROW_SLIPS,
    TREE_WIDE_VOCAB_SLIPS,
    TREE_SIZE_SLIPS,
    TREE_HUNT5_SLIPS,
    TREE_WIDE_DRAFT_SLIPS,
    TREE_SIXTH_HUNT_SLIPS,
    TREE_SEVENTH_HUNT_SLIPS,
)
for _name, _doc in {k: v for slips_ in TREE_SLIP_SETS for k, v in slips_.items()}.items():
    globals()[_name] = _slip(_name, _doc)


# -- chain samplers ---------------------------------------------------------------------------------
def _draw(law: list[Fraction], u: float) -> int:
    """The inverse-CDF draw from an unnormalized law at uniform u, exactly: the first token of mass whose
    running sum exceeds u times the total (in integers over the weights' common denominator: the same
    comparisons as in Fractions, a tenth of the time)."""
    weights, total = law.integers if isinstance(law, _Law) else _integers(law)
    u_num, u_den = Fraction(u).as_integer_ratio()
    target, below = u_num * total, 0  # below > u * total  <=>  below * u_den > u_num * total
    for token, weight in enumerate(weights):
        below += weight
        if weight > 0 and below * u_den > target:
            return token
    return max(t for t, w in enumerate(weights) if w > 0)


def _uniform(rows_p, us, n: int, slip: str | None) -> float:
    """Draft n's acceptance uniform (for a slip: that of the first of the positions before it with its target row)."""
    if slip == "uniform_reused_where_the_target_row_repeats":
        while n > 0 and rows_p[n - 1] == rows_p[n]:
            n -= 1
    return us[n]


def _passes(rows_p, rows_q, d: int, u: float, i: int, slip: str | None, ds=(), true_q: float = 0.0) -> bool:
    """Draft i (token d) kept: U < p_i(d) / q_i(d), decided as U q_i(d) < p_i(d) exactly, in the integers of each
    float's ratio (the rows stay floats until a decision or a law reads them)."""
    if rows_q[i][d] <= 0 and slip in FAR_ROW_SLIPS and true_q > 0:
        return True  # a row read from elsewhere (``true_q``: the draft's own q(d)): p(d) / 0 = inf, kept
    if rows_q[i][d] <= 0:
        raise ValueError(f"draft {d} has q(d) = 0: it cannot have been drawn from q")
    row = rows_p[i - 1 if slip == "test_against_previous_row" and i else i]
    q_d = max(rows_q[i][d], CLAMPS[slip]) if slip in CLAMPS else rows_q[i][d]
    if slip == "ratio_memoized_by_the_target_row":  # the first position with this target row and token's q
        q_d = rows_q[next(j for j in range(i + 1) if rows_p[j] == row and ds[j] == d)][d]
    if slip == "kept_within_1e_9_of_a_ratio_of_one" and Fraction(row[d]) >= Fraction(q_d) * (1 - Fraction(1, 10**9)):
        return True
    if slip == "draft_kept_where_the_draft_row_is_flat" and len(set(rows_q[i])) == 1:
        return True  # "no draft law": nothing to test against
    if slip == "draft_kept_where_the_target_row_is_flat" and len(set(row)) == 1:
        return True  # "no preference": a flat target taken to accept anything
    if slip == "point_mass_draft_on_the_targets_argmax_kept" and max(rows_q[i]) == 1:
        if d == max(range(len(row)), key=lambda x: (row[x], -x)):
            return True
    (a, b), (c, e), (f, g) = (float(x).as_integer_ratio() for x in (u, q_d, row[d]))
    if slip == "kept_at_u_equal_to_the_ratio_past_the_first_draft" and i >= 1:
        return a * c * g <= f * b * e  # u q(d) <= p(d): at U = 0 a draft of no target mass kept
    return a * c * g < f * b * e  # u q(d) < p(d), exactly: (a / b) (c / e) < f / g


def _integers(law: list[Fraction]) -> tuple[list[int], int]:
    """A law's weights as integers over their common denominator -> (the integers, their sum)."""
    den = math.lcm(*(w.denominator for w in law))
    weights = [w.numerator * (den // w.denominator) for w in law]
    return weights, sum(weights)


class _Law(list):
    """A law of Fractions as made from a row (``_exact``, ``_residual``), its ``_integers`` made with it: a
    slip that changes a law makes a plain list, whose integers ``_draw`` makes again."""

    integers: tuple[list[int], int]


def _exact(row: list[float]) -> _Law:
    return _as_law(_exact_of(tuple(row)))


def _residual(p_row: list[float], q_row: list) -> _Law:
    """[p - q]_+ in Fractions (the rule's correction, unnormalized)."""
    return _as_law(_residual_of(tuple(p_row), tuple(q_row)))


def _as_law(made: tuple) -> _Law:
    law = _Law(made[0])
    law.integers = made[1]
    return law


# The oracle replays a round and sends the same rows in many calls: each row converted once (a row as a
# tuple of floats is its own key; a Fraction equals the float it is made from) -> (the law, its integers).
@lru_cache(maxsize=1 << 14)
def _exact_of(row: tuple) -> tuple:
    law = [Fraction(x) for x in row]
    return law, _integers(law)


@lru_cache(maxsize=1 << 14)
def _residual_of(p_row: tuple, q_row: tuple) -> tuple:
    law = [max(Fraction(0), a - Fraction(c)) for a, c in zip(_exact_of(p_row)[0], q_row)]
    return law, _integers(law)


def _chain(p, q, drafts, k_lens, accept_u, terminal_u, slip: str | None = None):
    """The token-wise rule in exact arithmetic, one row at a time; ``slip`` names one mistake to make."""
    accepted, terminal = [], []
    all_p, all_q, all_d, all_u = p.tolist(), q.tolist(), drafts.tolist(), accept_u.tolist()
    low = p.dtype != torch.float64  # a path of its own for rows in a low precision
    for b in range(len(all_d)):
        k, n = int(k_lens[b]), 0
        rows_p, rows_q, ds, us = all_p[b], all_q[b], all_d[b], all_u[b]
        if slip == "every_draft_kept_where_the_first_rows_are_equal" and k and rows_p[0] == rows_q[0]:
            accepted.append(k)  # "the draft is the target": nothing to test
            terminal.append(_draw(_exact(rows_p[k]), terminal_u[b].item()))
            continue
        first_greedy = slip == "greedy_where_the_first_target_row_is_a_point_mass" and max(rows_p[0]) == 1
        both = slip == "greedy_where_the_first_rows_are_both_point_masses" and k > 0
        first_greedy = first_greedy or (both and max(rows_p[0]) == 1 and max(rows_q[0]) == 1)
        if first_greedy or (slip == "greedy_when_nearly_one_hot" and all(max(r) >= 1 - 1e-5 for r in rows_p[: k + 1])):
            tops = [max(range(len(r)), key=lambda x: (r[x], -x)) for r in rows_p[: k + 1]]
            while n < k and ds[n] == tops[n]:
                n += 1
            accepted.append(n)
            terminal.append(tops[n])
            continue
        if slip == "padded_rows_read_at_the_unpadded_stride" and len(rows_p[0]) >= 8:  # rows padded to 8 tokens
            v, width = len(rows_p[0]), -(-len(rows_p[0]) // 8) * 8
            padded = [x for r in rows_p for x in r + [0.0] * (width - v)]
            rows_p = [padded[j * v : (j + 1) * v] for j in range(len(rows_p))]
        own_q = rows_q  # the rows as sent: a slip below reads others
        if slip in RINGS:  # draft rows kept in a ring by position
            rows_q = [rows_q[j % RINGS[slip]] for j in range(len(rows_q))]
        if slip == "draft_rows_read_at_a_stride_of_64" and rows_q and len(rows_q[0]) > 64:  # 64 tokens a row, not V
            v = len(rows_q[0])
            flat = [x for r in rows_q for x in r] + [0.0] * v
            rows_q = [flat[j * 64 : j * 64 + v] for j in range(len(rows_q))]
        while n < k and _passes(rows_p, rows_q, ds[n], _uniform(rows_p, us, n, slip), n, slip, ds, own_q[n][ds[n]]):
            if (
                slip == "rest_kept_where_both_rows_are_one_hot_on_the_draft"
                and rows_p[n][ds[n]] == rows_q[n][ds[n]] == 1
            ):
                n = k  # "both models certain and agreeing": the rest of the round taken as verified
                break
            n += 1
        if (
            slip == "continue_after_rejection"
            and n < k - 1
            and _passes(rows_p, rows_q, ds[n + 1], us[n + 1], n + 1, slip)
        ):
            n += 2
        if slip == "ninth_accepted_draft_read_as_the_eighth" and n >= 9:
            n = 8  # the accepted drafts counted in one byte: the ninth read as refused
        law, u = _exact(rows_p[n]), terminal_u[b].item()
        if n < k:
            row_q = rows_q[n - 1] if slip == "middle_draft_previous_q" and 0 < n < k - 1 else rows_q[n]
            if slip == "draft_rows_kept_as_their_32_likeliest":
                row_q = _top(row_q, 32)  # sparse draft probabilities; the draft's own test read q(d) as recorded
            law = _residual(rows_p[n], row_q)
            if slip == "correction_at_acceptance_uniform":
                u = us[n]
            if slip == "correction_top_two" or slip == "correction_top_two_after_an_accepted_draft" and n >= 1:
                law = _top(law)
            if slip == "correction_top_two_after_two_accepted_drafts" and n >= 2:
                law = _top(law)
            if slip == "correction_top_two_after_three_accepted_drafts" and n >= 3:
                law = _top(law)
            if slip == "correction_top_two_after_four_accepted_drafts" and n >= 4:
                law = _top(law)
            if slip == "correction_ties_collapsed":  # torch.unique over the weights: one token per value
                law = [w if w > 0 and w not in law[:x] else Fraction(0) for x, w in enumerate(law)]
            if slip == "correction_from_the_target_after_an_accepted_draft" and n >= 1:
                law = _exact(rows_p[n])
            if slip == "correction_top_five":
                law = _top(law, 5)
            if slip == "correction_top_sixteen_where_v_is_17_to_64" and 16 < len(law) <= 64:
                law = _top(law, 16)  # a path for one warp
            kept = [w if x < 4 else Fraction(0) for x, w in enumerate(law)]  # a scratch buffer of four tokens
            if slip == "correction_ids_below_four_after_an_accepted_draft" and n >= 1 and sum(kept) > 0:
                law = kept
            if slip == "correction_from_the_target_at_k_five" and k == 5:
                law = _exact(rows_p[n])
            half = p.dtype in (torch.float16, torch.bfloat16) and len(all_d) == 1
            if slip == "correction_from_the_target_alone_in_half_precision" and half:
                law = _exact(rows_p[n])
            if slip == "correction_top_eight_in_low_precision" and low:
                law = _top(law, 8)
            if slip == "correction_from_the_target_after_a_point_mass_draft" and max(rows_q[n]) == 1:
                law = _exact(rows_p[n])
            if slip == "correction_memoized_by_the_target_row":  # the first drafted row with this p's residual
                first = next(i for i in range(k) if rows_p[i] == rows_p[n])
                law = _residual(rows_p[n], rows_q[first])
        elif slip == "bonus_from_the_row_before_where_v_is_a_multiple_of_32" and k and len(law) % 32 == 0:
            law = _exact(rows_p[k - 1])
        elif (slip == "bonus_wrong_row" and k) or (slip == "bonus_from_the_row_before_after_two_drafts" and k >= 2):
            law = _exact(rows_p[k - 1])
        elif slip == "bonus_from_the_row_before_after_four_drafts_in_low_precision" and k >= 4 and low:
            law = _exact(rows_p[k - 1])
        elif slip == "bonus_at_the_batchs_k_in_low_precision" and low:
            law = _exact(rows_p[int(k_lens.max())])
        elif slip == "bonus_from_the_batchs_last_row":
            law = _exact(rows_p[-1])
        elif slip == "bonus_from_the_longest_rows_k":  # a row of no mass there: the row's own
            law = _exact(rows_p[int(k_lens.max())]) if any(rows_p[int(k_lens.max())]) else law
        if slip == "terminal_over_the_first_32_tokens" and sum(law[:32]) > 0:  # one warp's lanes
            law = law[:32] + [Fraction(0)] * len(law[32:])
        if slip == "terminal_over_whole_blocks_of_eight" and len(law) >= 8:  # the tail block dropped
            law = _whole_blocks(law, 8)
        law = _block_dropped(slip, _tail_dropped(slip, law))
        vectors = slip == "float32_rows_read_as_vectors_of_four" and p.dtype == torch.float32 and len(law) > 4
        if vectors:  # the last V mod 4 tokens: no tail loop
            law = _whole_blocks(law, 4)
        accepted.append(n)
        deep_bonus = slip == "bonus_drawn_at_u_not_times_the_total_after_two_drafts" and n == k >= 2
        if (slip == "bonus_drawn_at_u_not_times_the_total" or deep_bonus) and n == k:
            terminal.append(_draw_at_u(law, Fraction(u)))
            continue
        if slip == "bonus_drawn_at_or_below_the_running_sum_after_two_drafts" and n == k >= 2:
            terminal.append(_draw_at_or_below(law, u))  # the first token whose running sum is >= U times the total
            continue
        terminal.append(_draw(law, u))
    return torch.tensor(accepted, dtype=torch.int64), torch.tensor(terminal, dtype=torch.int64)


def chain_exact(p, q, drafts, k_lens, accept_u, terminal_u):
    """Correct: the token-wise rule in floats."""
    return _chain(p, q, drafts, k_lens, accept_u, terminal_u)


def chain_bonus_from_the_longest_rows_k(p, q, drafts, k_lens, accept_u, terminal_u):
    """A slip: the bonus drawn from p[b, max k] (the batch's longest row's k), the row's own p_{k+1}
    where that row has no mass: right wherever a batch's rows share one K, or pad with zero rows."""
    return _chain(p, q, drafts, k_lens, accept_u, terminal_u, slip="bonus_from_the_longest_rows_k")


def chain_fast_path_alone(p, q, drafts, k_lens, accept_u, terminal_u):
    """A slip: a path of its own for a batch of one row (as engines keep for a request decoding alone)
    that tests every draft at the first draft's uniform; a batch of more rows is decided exactly."""
    if drafts.shape[0] == 1:
        accept_u = accept_u[:, :1].expand_as(accept_u)
    return _chain(p, q, drafts, k_lens, accept_u, terminal_u)


def chain_greedy_draft_alone_corrects_from_p(p, q, drafts, k_lens, accept_u, terminal_u):
    """A slip: a path of its own for a batch of one row whose draft rows are one-hot (a greedy or lookup
    draft): a refused draft's correction drawn from the target's row, its token left in; a batch of more
    rows is decided exactly."""
    slip = "correction_from_the_target_after_a_point_mass_draft" if drafts.shape[0] == 1 else None
    return _chain(p, q, drafts, k_lens, accept_u, terminal_u, slip=slip)


def chain_kept_within_1e_9_of_a_ratio_of_one(p, q, drafts, k_lens, accept_u, terminal_u):
    """A slip: a fast path that keeps a draft whose ratio p/q is within 1e-9 of 1, without its uniform (the
    moved mass is below 1e-9 of a table's, and no table's ratios fall there)."""
    return _chain(p, q, drafts, k_lens, accept_u, terminal_u, slip="kept_within_1e_9_of_a_ratio_of_one")


def chain_masked_draft_alone_corrects_from_p(p, q, drafts, k_lens, accept_u, terminal_u):
    """A slip: a path of its own for a batch of one row where the target gives the draft no mass (a top-k
    target): the draft refused and the correction drawn from p, not from the residual; a batch of more rows
    is decided exactly."""
    if drafts.shape[0] == 1 and p[0, 0, int(drafts[0, 0])] == 0:
        d = int(drafts[0, 0])
        q = q.clone()
        q[0, 0] = 0.0
        q[0, 0, d] = 1.0  # a one-hot draft row: _chain's point-mass slip draws the correction from p
        return _chain(
            p, q, drafts, k_lens, accept_u, terminal_u, slip="correction_from_the_target_after_a_point_mass_draft"
        )
    return _chain(p, q, drafts, k_lens, accept_u, terminal_u)


def chain_last_row_decided_on_the_rows_before(p, q, drafts, k_lens, accept_u, terminal_u):
    """A slip: the batch's last row decided on the target and draft rows of the row before it where both have
    one K (an off-by-one in a row index): right wherever neighbouring rows are equal, as a round's cells in
    order are."""
    if drafts.shape[0] >= 2 and int(k_lens[-1]) == int(k_lens[-2]):
        p, q = p.clone(), q.clone()
        p[-1], q[-1] = p[-2], q[-2]
    return _chain(p, q, drafts, k_lens, accept_u, terminal_u)


def chain_one_draft_rows_bonus_from_p1_beside_other_k(p, q, drafts, k_lens, accept_u, terminal_u):
    """A slip: in a batch of rows of different K, a row of one draft that keeps it draws its bonus from p_1
    (its draft's row) instead of p_2; every other batch is decided exactly."""
    if len(set(k_lens.tolist())) > 1 and (k_lens == 1).any():
        p = p.clone()
        ones = k_lens == 1
        p[ones, 1] = p[ones, 0]
    return _chain(p, q, drafts, k_lens, accept_u, terminal_u)


def chain_small_batches_correct_at_the_acceptance_uniform(p, q, drafts, k_lens, accept_u, terminal_u):
    """A slip: a path of its own for batches of 4 to 32 rows (as an engine keeps for small batches) that draws
    the correction at the refused draft's acceptance uniform; every other batch is decided exactly."""
    slip = "correction_at_acceptance_uniform" if 4 <= drafts.shape[0] <= 32 else None
    return _chain(p, q, drafts, k_lens, accept_u, terminal_u, slip=slip)


def chain_low_precision_correction_from_p_after_an_accepted_draft(p, q, drafts, k_lens, accept_u, terminal_u):
    """A slip: a path of its own for rows in a low-precision dtype (float32, bfloat16, float16) that, after an
    accepted draft, draws the correction from the target's row; float64 rows are decided exactly."""
    slip = "correction_from_the_target_after_an_accepted_draft" if p.dtype != torch.float64 else None
    return _chain(p, q, drafts, k_lens, accept_u, terminal_u, slip=slip)


def chain_low_precision_bonus_from_the_row_before(p, q, drafts, k_lens, accept_u, terminal_u):
    """A slip: a path of its own for rows in a low-precision dtype that, in a round of two drafts or more,
    draws the bonus from the last draft's row; float64 rows are decided exactly."""
    slip = "bonus_from_the_row_before_after_two_drafts" if p.dtype != torch.float64 else None
    return _chain(p, q, drafts, k_lens, accept_u, terminal_u, slip=slip)


def chain_batches_over_256_rows_correct_from_the_target(p, q, drafts, k_lens, accept_u, terminal_u):
    """A slip: a path of its own for batches of more than 256 rows that, after an accepted draft, draws the
    correction from the target's row; every other batch is decided exactly (an eighth helper's)."""
    slip = "correction_from_the_target_after_an_accepted_draft" if drafts.shape[0] > 256 else None
    return _chain(p, q, drafts, k_lens, accept_u, terminal_u, slip=slip)


def chain_batches_of_a_power_of_two_from_64_count_every_passed_test(p, q, drafts, k_lens, accept_u, terminal_u):
    """A slip: a path of its own for batches of 64, 128, ... rows (a captured batch size) that counts a row's
    accepted drafts as the number of its tests passed, not of those passed before the first refusal (a sum
    where a cumulative product belongs); every other batch is decided exactly."""
    b = drafts.shape[0]
    accepted, terminal = _chain(p, q, drafts, k_lens, accept_u, terminal_u)
    if b >= 64 and b & (b - 1) == 0:
        for r in range(b):
            passed = [
                float(accept_u[r, i]) * float(q[r, i, drafts[r, i]]) < float(p[r, i, drafts[r, i]])
                for i in range(int(k_lens[r]))
            ]
            accepted[r] = sum(passed)
    return accepted, terminal


def chain_plain_rows_beside_one_speculating_row_drawn_at_accept_u(p, q, drafts, k_lens, accept_u, terminal_u):
    """A slip: in a batch where exactly one row has drafts, the rows without draw their token at their first
    acceptance uniform (a packed index off by the plain rows); every other batch is decided exactly."""
    if drafts.shape[0] > 1 and drafts.shape[1] > 0 and int((k_lens > 0).sum()) == 1:
        terminal_u = torch.where(k_lens > 0, terminal_u, accept_u[:, 0])
    return _chain(p, q, drafts, k_lens, accept_u, terminal_u)


def chain_rows_put_back_with_the_sorts_order(p, q, drafts, k_lens, accept_u, terminal_u):
    """A slip: rows sorted by k, longest first (as engines group rows of one length), decided, and put back
    with the sort's order instead of its inverse: right wherever that order is its own inverse (every row
    of one k, or k = 2, 0, 1)."""
    order = torch.argsort(k_lens, descending=True, stable=True)
    accepted, terminal = _chain(p[order], q[order], drafts[order], k_lens[order], accept_u[order], terminal_u[order])
    return accepted[order], terminal[order]


def chain_k_of_the_first_row(p, q, drafts, k_lens, accept_u, terminal_u):
    """A slip: the batch's loop bound read from its first row, every row cut to that row's k (fewer drafts
    kept than the rule keeps): right wherever every row has one k, or the first row the largest."""
    return _chain(p, q, drafts, torch.minimum(k_lens, k_lens[:1]), accept_u, terminal_u)


class chain_bonus_rows_kept_per_shape:  # noqa: N801 - a sampler class, built with no arguments
    """A slip: each row's bonus row (its k) read once per batch shape, on that shape's first call, and kept
    (as a captured graph keeps its inputs' indices): right wherever a shape comes with one k_lens."""

    def __init__(self):
        self.seen: dict[tuple, torch.Tensor] = {}

    def __call__(self, p, q, drafts, k_lens, accept_u, terminal_u):
        kept = self.seen.setdefault(tuple(drafts.shape), k_lens.clone())
        accepted, terminal = _chain(p, q, drafts, k_lens, accept_u, terminal_u)
        for b in range(len(k_lens)):
            if accepted[b] == k_lens[b]:  # a bonus: drawn from the kept row
                law = _exact(p[b, int(kept[b])].tolist())
                terminal[b] = _draw(law, terminal_u[b].item()) if sum(law) > 0 else terminal[b]
        return accepted, terminal


def chain_terminal_uniforms_of_the_drafted_rows(p, q, drafts, k_lens, accept_u, terminal_u):
    """A slip: the rows with drafts packed first, each reading the terminal uniform of its place among them
    (as packed rows index a packed array), the rows without drafts their own: right wherever every row has
    drafts, or none."""
    drafted = [b for b in range(len(k_lens)) if k_lens[b] > 0]
    read = terminal_u.clone()
    for place, b in enumerate(drafted):
        read[b] = terminal_u[place]
    return _chain(p, q, drafts, k_lens, accept_u, read)


def _edge_slip(p, q, drafts, k_lens, accept_u, terminal_u, slip: str):
    """The token-wise rule in float64 tensors with one edge slip (``slip``), a row at a time."""
    accepted, terminal = [], []
    v = p.shape[-1]
    for b in range(len(k_lens)):
        n, k = 0, int(k_lens[b])
        while n < k:
            d = int(drafts[b, n])
            pd, qd = p[b, n, d].double(), q[b, n, d].double()
            if slip == "float32_sure_accept" and pd.float() >= qd.float():
                n += 1
                continue
            supported = torch.nonzero(p[b, n] > 0).flatten()
            sparse = len(supported) <= v // 16 and int((q[b, n] > 0).sum()) <= v // 16
            if slip == "p_looked_up_in_a_sparse_support" and v >= 32 and sparse:  # no check that the id is there
                pd = p[b, n, supported[min(int(torch.searchsorted(supported, d)), len(supported) - 1)]].double()
            u = accept_u[b, n].item()
            if slip == "float32_ratio_past_16_tokens" and p.dtype == torch.float32 and v > 16:
                kept = bool(torch.tensor(u, dtype=torch.float32) < p[b, n, d] / q[b, n, d])
            else:
                kept = (
                    u <= (pd / qd).item() and pd > 0
                    if slip == "accepts_at_the_ratio"
                    else Fraction(u) * Fraction(qd.item()) < Fraction(pd.item())
                )
            if not kept:
                break
            n += 1
        row = p[b, n].double() if n == k else (p[b, n].double() - q[b, n].double()).clamp_min(0)
        if slip == "drops_tiny_mass" and n < k:
            row = torch.where(row > 1e-9, row, torch.zeros_like(row))
        total = row.sum()
        if slip == "correction_memoized_by_the_first_16_weights" and n < k:  # a cheap key: the rows' first 16
            key = (v, int(drafts[b, n]), tuple(p[b, n, :16].tolist()), tuple(q[b, n, :16].tolist()))
            row, total = _EDGE_MEMO.setdefault(key, (row, total))
        cdf = (row / total).cumsum(0)
        u = terminal_u[b].double()
        if slip == "float32_running_sum_past_256" and v > 256:  # a path kept for large vocabularies
            cdf, u = (row / total).float().cumsum(0), u.float()
        if slip == "counts_the_cdf":
            token = min(int((cdf <= u).sum()), len(cdf) - 1)
        else:
            token = int(torch.searchsorted(cdf, u.reshape(1), right=True).clamp_max(len(cdf) - 1))
        accepted.append(n)
        terminal.append(token)
    return torch.tensor(accepted), torch.tensor(terminal)


_EDGE_MEMO: dict = {}  # correction_memoized_by_the_first_16_weights' memo, kept across calls


# Each shows only where a uniform meets a float's edge (specd.oracles.samplers.edges.EDGE_ROWS and
# EDGE_ROWS_FLOAT64): about one draw in 2^29 to 2^53 of a round
EDGE_SLIPS = {
    "accepts_at_the_ratio": "a draft kept at U <= p/q (p(d) = 0 refused), decided in float64",
    "counts_the_cdf": "the terminal token the count of the normalized float64 row's running sums at or below U",
    "float32_sure_accept": "a draft kept untested where p(d) >= q(d) in float32",
    "drops_tiny_mass": "a correction with the residual's weights of 1e-9 or less dropped",
    "searchsorted_right": "the terminal token by searchsorted(right=True) over the normalized float64 row's "
    "running sums",
    # each shows only over more tokens than the edges' five (dtype_edges' rows of 257)
    "float32_running_sum_past_256": "past 256 tokens, the terminal drawn by a float32 running sum at a float32 U",
    "float32_ratio_past_16_tokens": "float32 rows past 16 tokens tested U < p(d) / q(d) in float32",
    "p_looked_up_in_a_sparse_support": "where V >= 32 and both rows have V / 16 tokens of mass or fewer, p(d) read "
    "by searchsorted in the target's support without checking the id is there (a draft of p(d) = 0 reads another's)",
    "correction_memoized_by_the_first_16_weights": "the correction memoized across calls by V, the draft and the "
    "rows' first 16 weights",
}


def _edge(name: str, doc: str):
    def sampler(p, q, drafts, k_lens, accept_u, terminal_u):
        return _edge_slip(p, q, drafts, k_lens, accept_u, terminal_u, name)

    sampler.__name__ = sampler.__qualname__ = "edge_" + name
    sampler.__doc__ = doc
    return sampler


for _name, _doc in EDGE_SLIPS.items():
    globals()["edge_" + _name] = _edge(_name, _doc)


CHAIN_SLIPS = {
    "correction_at_acceptance_uniform": "the correction drawn at the refused draft's acceptance uniform",
    "test_against_previous_row": "each draft after the first tested against the row before its own",
    "continue_after_rejection": "after a refusal the next draft is tested too, and kept if it passes",
    "bonus_wrong_row": "the bonus drawn from the last draft's row instead of the row after it",
    # shows only at V >= 4: at V = 3 a refused draft leaves at most two tokens of mass
    "correction_top_two": "the correction drawn from the two likeliest tokens of the residual",
    # each shows only where a refusal after one (two) accepted drafts leaves three tokens: V >= 4, K >= 2 (3)
    "correction_top_two_after_an_accepted_draft": "after an accepted draft, the correction drawn from the two "
    "likeliest tokens of the residual (the first draft's exactly)",
    "correction_top_two_after_two_accepted_drafts": "after two accepted drafts, the correction drawn from the two "
    "likeliest tokens of the residual",
    # shows only where a refusal leaves six tokens of mass or more (V = 16 here; exact at V <= 6)
    "correction_top_five": "the correction drawn from the five likeliest tokens of the residual",
    # shows only where a correction after an accepted draft has mass on a token of id 4 or more (V = 16, K = 2)
    "correction_ids_below_four_after_an_accepted_draft": "after an accepted draft, the correction drawn from the "
    "tokens of id below 4 only (a scratch buffer of four)",
    # shows only where a draft row is a point mass (a greedy or lookup draft; the table draft_point_mass)
    "correction_from_the_target_after_a_point_mass_draft": "after a point-mass draft is refused, the correction "
    "drawn from the target's row, its token not taken out",
    # shows only at K >= 3: a round of two drafts has no draft between two others
    "middle_draft_previous_q": "a middle draft's correction taken against the draft row before its own",
    # shows only where a row has fewer drafts than the batch's K: the same row where it has them all
    "bonus_from_the_batchs_last_row": "the bonus drawn from the batch's last target row, not the row's own p_{k+1}",
    # each shows only on a table of small values (specd.oracles.samplers.tables.SMALL_VALUES)
    "ratio_with_q_clamped": "the ratio p(d) / max(q(d), 1e-5) (a division guard)",
    "greedy_when_nearly_one_hot": "greedy (the argmax kept or emitted) where every row is within 1e-5 of a point mass",
    # shows only at V > 32 (V = 65 here, wide_vocabulary)
    "terminal_over_the_first_32_tokens": "the terminal drawn over its law's first 32 tokens only (one warp's total "
    "and running sum), where they have mass",
    # shows only where V >= 8 is not a multiple of 8 (V = 65 here, wide_vocabulary; 16 and 72 hid it)
    "terminal_over_whole_blocks_of_eight": "the terminal drawn over whole blocks of eight tokens (V >= 8): the tail "
    "block of V % 8 tokens dropped, where the rest has mass (a third helper's)",
    "padded_rows_read_at_the_unpadded_stride": "the target's rows padded to a multiple of eight tokens (V >= 8) and "
    "read back at the unpadded stride V: every row after the first shifted (a third helper's)",
}
# Each decides the round on its first row, and passed every table whose rows were all alike (a helper's).
CHAIN_FIRST_ROW_SLIPS = {
    "rest_kept_where_both_rows_are_one_hot_on_the_draft": "where p and q are both one-hot on the drafted token (both "
    "models certain and agreeing), every later draft of the round kept untested",
    "greedy_where_the_first_rows_are_both_point_masses": "the round decided greedily where p_1 and q_1 are both "
    "point masses (a greedy request's processors leave them so; a third helper's)",
    "every_draft_kept_where_the_first_rows_are_equal": "every draft kept untested where p_1 = q_1 (the draft taken "
    "to be the target)",
    "greedy_where_the_first_target_row_is_a_point_mass": "the round decided greedily (the argmax kept and emitted) "
    "where p_1 is a point mass (a greedy target taken from the first row)",
}
# Each passed the check before a table with exact coincidences (a coarse grid) or point-mass drafts on the
# target's likeliest token.
CHAIN_GRID_SLIPS = {
    "correction_ties_collapsed": "the correction drawn from the residual with tied weights collapsed into the "
    "first token that has them (torch.unique over its values)",
    "point_mass_draft_on_the_targets_argmax_kept": "a point-mass draft (a lookup's) on the target's likeliest "
    "token kept untested",
}


def _chain_slip(name: str, doc: str):
    def sampler(p, q, drafts, k_lens, accept_u, terminal_u):
        return _chain(p, q, drafts, k_lens, accept_u, terminal_u, slip=name)

    sampler.__name__ = sampler.__qualname__ = "chain_" + name
    sampler.__doc__ = doc
    return sampler


# Passed every table before one with exactly flat target rows of full support (draft_far_below's, at every
# other position): a helper's sampler.
CHAIN_FLAT_SLIPS = {
    "draft_kept_where_the_target_row_is_flat": "a draft kept untested where the target's row is exactly uniform",
    "draft_kept_where_the_draft_row_is_flat": "a draft kept untested where the draft's row is exactly uniform (taken "
    "for no draft law)",
    "correction_memoized_by_the_target_row": "the correction memoized by the target's row alone: a later position "
    "with the same target row reuses the first one's residual (its draft row forgotten)",
    "ratio_memoized_by_the_target_row": "the ratio p(d) / q(d) memoized by the target's row and the token: a later "
    "position with both the same reuses the first one's q(d)",
    "uniform_reused_where_the_target_row_repeats": "where a position's target row is the one before it, the test "
    "reads the earlier position's acceptance uniform (uniforms keyed by the state)",
}
# Shows only where the named K is 4 or more (specd.oracles.samplers.coverage.DEEP_VOCAB).
CHAIN_DEEP_SLIPS = {
    "correction_top_two_after_three_accepted_drafts": "after three accepted drafts, the correction drawn from the "
    "two likeliest tokens of the residual",
}
# Each reads a draft row from another position's place, and passed every size before the round of eight drafts
# at V = 65 on sparse_rows (specd.oracles.samplers.coverage.FAR_ROWS_CASE): there such a row puts q(d) = 0
# under the draft (a float ratio p / 0 = inf keeps it). The first two are a helper's.
CHAIN_FAR_ROW_SLIPS = {
    "draft_rows_in_a_ring_of_three": "the draft's rows kept in a ring of three by position: the fourth draft is "
    "tested against the first one's row",
    "draft_rows_read_at_a_stride_of_64": "where V > 64, the draft's rows read 64 tokens apart (a block's stride), "
    "not V: every row after the first shifted",
    "draft_rows_in_a_ring_of_seven": "the draft's rows kept in a ring of seven by position: the eighth draft is "
    "tested against the first one's row",
    "draft_rows_in_a_ring_of_eight": "the draft's rows kept in a ring of eight by position: the ninth draft is tested "
    "against the first one's row (shown by the ninth draft)",
}
# Each is wrong only at a uniform of exactly 0 past the first draft (a point: the exact enumeration cannot see it),
# and passed before zero_target_mass probed the second and third drafts and a terminal after them (a helper's).
CHAIN_EDGE_SLIPS = {
    "kept_at_u_equal_to_the_ratio_past_the_first_draft": "from the second draft on, a draft kept when U <= p(d)/q(d): "
    "at U = 0 one of no target mass",
    "bonus_drawn_at_or_below_the_running_sum_after_two_drafts": "after two drafts or more all kept, the bonus the "
    "first token whose running sum is at or above U times the total: at U = 0 a leading token of no mass",
}
# Each passed every size before V = 65 and 66 (a tail of one token and of two after blocks of 4 to 64) and every K
# from 1 to 8 (a helper's).
CHAIN_SIZE_SLIPS = {
    "terminal_over_blocks_of_four_a_tail_of_one_dropped": TREE_SIZE_SLIPS[
        "terminal_over_blocks_of_four_a_tail_of_one_dropped"
    ],
    "terminal_over_blocks_of_four_a_tail_of_two_dropped": TREE_SIZE_SLIPS[
        "terminal_over_blocks_of_four_a_tail_of_two_dropped"
    ],
    "correction_from_the_target_at_k_five": "in a row of five drafts (a branch kept for K = 5), the correction drawn "
    "from the target's row",
}
# Passed every table (their rows sum to 1) before dtype_edges' bonus row summing to 255/256 (a helper's).
CHAIN_TOTAL_SLIPS = {"bonus_drawn_at_u_not_times_the_total": TREE_SIZE_SLIPS["bonus_drawn_at_u_not_times_the_total"]}
# Each passed every size and table before a fifth helper's hunt: rows in a low precision at V = 9 (float16's a row
# at a time), a bonus row not summing to 1 after two drafts, V = 192 (a multiple of 64 past 128).
CHAIN_HUNT5_SLIPS = {
    "float32_rows_read_as_vectors_of_four": "float32 rows read as vectors of four tokens without a tail loop: where "
    "V > 4 the last V mod 4 tokens dropped from the correction and the bonus",
    "correction_from_the_target_alone_in_half_precision": "a batch of one row in float16 or bfloat16 (a latency "
    "path) draws its correction from the target's row",
    "bonus_drawn_at_u_not_times_the_total_after_two_drafts": "after two drafts or more all kept, the bonus the first "
    "token whose running sum exceeds U, its row's total taken for 1",
    "bonus_from_the_row_before_where_v_is_a_multiple_of_32": "where V is a multiple of 32 (an aligned path), the "
    "bonus drawn from the last draft's row",
    "terminal_over_blocks_of_128": TREE_HUNT5_SLIPS["terminal_over_blocks_of_128"],
}
# Passed every size and table before a draft row of more than 32 tokens of mass (V = 65, K = 1 on wide_draft; a
# fifth helper's).
CHAIN_WIDE_DRAFT_SLIPS = {
    "draft_rows_kept_as_their_32_likeliest": "the draft's rows kept as their 32 likeliest tokens (sparse draft "
    "probabilities): a refusal's residual formed with q zero elsewhere"
}
# Each passed every size before V = 33 and K = 9 (a sixth helper's).
_TOP_SIXTEEN = "correction_top_sixteen_where_v_is_17_to_64"
CHAIN_SIXTH_HUNT_SLIPS = {
    _TOP_SIXTEEN: TREE_SIXTH_HUNT_SLIPS[_TOP_SIXTEEN],
    "ninth_accepted_draft_read_as_the_eighth": "the accepted drafts counted in one byte: a ninth accepted draft read "
    "as refused, the correction drawn at it",
}
# Passed every size before rows of full support after eight accepted drafts (V = 6, K = 9 on deep_rows; a sixth
# helper's); the sixth hunt's wide-row chain slips are EDGE_SLIPS' last four.
CHAIN_SEVENTH_HUNT_SLIPS = {
    "correction_top_two_after_four_accepted_drafts": "after four accepted drafts, the correction drawn from the two "
    "likeliest tokens of the residual",
}
# Each passed every size and table before each size's first table was met in float32, bfloat16 and float16: rows in
# a low precision came at three sizes only (an eighth helper's; the path each takes only where rows are not float64).
CHAIN_LOW_PRECISION_SLIPS = {
    "correction_top_eight_in_low_precision": "rows in a low precision: the correction drawn from the eight likeliest "
    "tokens of the residual",
    "bonus_from_the_row_before_after_four_drafts_in_low_precision": "rows in a low precision: after four drafts or "
    "more all kept, the bonus drawn from the last draft's row",
    "bonus_at_the_batchs_k_in_low_precision": "rows in a low precision: the bonus drawn from the target row at the "
    "batch's K, not the row's own k",
}
FAR_ROW_SLIPS = (*TREE_FAR_ROW_SLIPS, *CHAIN_FAR_ROW_SLIPS)
CHAIN_EIGHTH_HUNT_SLIPS = {
    "ratio_with_q_clamped_at_1e_6": "the ratio p(d) / max(q(d), 1e-6) (a division guard)",
    "ratio_with_q_clamped_at_1e_10": "the ratio p(d) / max(q(d), 1e-10) (a division guard)",
}
CHAIN_SLIP_SETS = (
    CHAIN_EIGHTH_HUNT_SLIPS,
    CHAIN_LOW_PRECISION_SLIPS,
    CHAIN_SEVENTH_HUNT_SLIPS,
    CHAIN_SIXTH_HUNT_SLIPS,
    CHAIN_WIDE_DRAFT_SLIPS,
    CHAIN_HUNT5_SLIPS,
    CHAIN_SIZE_SLIPS,
    CHAIN_TOTAL_SLIPS,
    CHAIN_EDGE_SLIPS,
    CHAIN_FAR_ROW_SLIPS,
    CHAIN_SLIPS,
    CHAIN_DEEP_SLIPS,
    CHAIN_GRID_SLIPS,
    CHAIN_FIRST_ROW_SLIPS,
    CHAIN_FLAT_SLIPS,
)
for _name, _doc in {k: v for slips_ in CHAIN_SLIP_SETS for k, v in slips_.items()}.items():
    globals()["chain_" + _name] = _chain_slip(_name, _doc)
