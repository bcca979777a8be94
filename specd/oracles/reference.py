"""The oracle's own rule on chains, shared by every part of the oracle: its rows (``Reference``: the
target's processed rows and the *declared* draft policy's rows, computed from the tables in float64,
never production's numbers), the target chain's joint, and the cells of a round's uniforms (each
token's interval of a row's inverse CDF, a branch's acceptance intervals and mass, and the same
under block verification), in floats or in Fractions.

The engine's exact enumeration (specd.oracles.engine.exact) runs production on these cells; the
sampler oracle (specd.oracles.samplers) runs a sampler under test on them."""

from __future__ import annotations

from fractions import Fraction

from specd.oracles.rig import Rig, fold

Joint = dict[tuple[int, ...], float]
# The injected value of a uniform whose cell must not matter (an unreached test, a draft past the
# first rejection). 0 makes every unreached acceptance test pass, so an engine that reads one shows it.
UNUSED = 0.0


class Reference:
    """The oracle's own rows at any output: target p (processed) and declared draft q, float64 lists."""

    def __init__(self, rig: Rig):
        self.rig = rig
        self._p: dict[tuple[int, ...], list[float]] = {}
        self._q: dict[tuple[int, ...], list[float]] = {}

    def serves(self, rig: Rig) -> bool:
        """Whether these rows are ``rig``'s too: the same models, policies, prompt and arithmetic (a
        failure-lab variant replaces a component of the engine, never what the rows are made of)."""
        mine = self.rig
        return all(
            getattr(mine, name) is getattr(rig, name)
            for name in ("target", "draft", "target_policy", "draft_policy", "prompt", "backend", "prob_dtype")
        )

    def _row(self, memo, model, policy, output: tuple[int, ...]) -> list[float]:
        if output not in memo:
            rig = self.rig
            state = fold(policy.initial_state(rig.prompt), output[len(rig.prompt) :])
            raw = model.raw_logits(output).unsqueeze(0)
            memo[output] = policy.probabilities(raw, [state], rig.backend, rig.prob_dtype)[0].double().tolist()
        return memo[output]

    def p(self, output: tuple[int, ...]) -> list[float]:
        return self._row(self._p, self.rig.target, self.rig.target_policy, output)

    def q(self, output: tuple[int, ...]) -> list[float]:
        return self._row(self._q, self.rig.draft, self.rig.draft_policy, output)


def chain_joint(p, start: tuple[int, ...], horizon: int, one=1.0, eos: frozenset[int] = frozenset()) -> Joint:
    """The target chain p(x_1 | start) p(x_2 | start, x_1) ... over ``horizon`` tokens: the one
    enumerator of a target joint. ``p(output)`` gives the row after an output (floats, or Fractions
    with ``one`` = Fraction(1) for an exact joint). A token of ``eos`` ends its sequence: the text
    stops there, shorter than the horizon, with the mass of every way it could have gone on."""
    out: Joint = {}

    def walk(seq: tuple[int, ...], mass) -> None:
        if len(seq) == horizon or (seq and seq[-1] in eos):
            out[seq] = out.get(seq, 0) + mass
            return
        for x, px in enumerate(p(start + seq)):
            if px > 0:
                walk(seq + (x,), mass * px)

    walk((), one)
    return out


def target_joint(rig: Rig, horizon: int, prefix: tuple[int, ...] | None = None, ref: Reference | None = None) -> Joint:
    """The rig's target chain over ``horizon`` tokens after ``prefix`` (default: its prompt), stopped
    at the first of the rig's EOS tokens."""
    return chain_joint((ref or Reference(rig)).p, rig.prompt if prefix is None else prefix, horizon, eos=rig.eos_ids)


PROBES = ("centre", "left", "right")


def probe(lo, hi, where: str) -> float:
    """A float uniform inside the cell [lo, hi) (float or Fraction ends): its centre, or just inside
    one end (far enough from the end that float64 rounding of a correct engine's cumulative sums
    cannot cross it)."""
    exact = isinstance(lo, Fraction) or isinstance(hi, Fraction)
    lo, hi = (Fraction(lo), Fraction(hi)) if exact else (float(lo), float(hi))
    if where == "centre":
        return float((lo + hi) / 2)
    tiny = (Fraction(1, 10**6), Fraction(1, 10**13)) if exact else (1e-6, 1e-13)
    margin = min((hi - lo) / 4, max((hi - lo) * tiny[0], tiny[1]))
    return float(lo + margin if where == "left" else hi - margin)


def cells_of(row: list) -> list[tuple[int, object, object]]:
    """[(token, lo, hi)]: each positive entry's interval of the inverse CDF of a (possibly
    unnormalized) row, in the row's own arithmetic (float or Fraction)."""
    total = sum(row)
    out, below = [], 0
    for x, mass in enumerate(row):
        if mass > 0:
            out.append((x, below / total, (below + mass) / total))
        below += mass
    return out


def branch(p_rows: list, q_rows: list, drafts: tuple[int, ...], rejected: bool, one=1.0):
    """One branch of a round along ``drafts``: every draft accepted but, when ``rejected``, the last.
    ``p_rows[i]``, ``q_rows[i]``: the target's and the draft's rows before draft i (p_rows has one
    more, for the bonus). -> (the acceptance uniforms' intervals, the branch's mass given the drafts,
    the terminal token's law up to normalization: [p - q]_+ at the rejection, else p), or None when
    the branch has no mass. In the arithmetic of ``one`` (1.0, or Fraction(1))."""
    accepted = len(drafts) - 1 if rejected else len(drafts)
    intervals, mass = [], one
    for i, d in enumerate(drafts):
        pd, qd = p_rows[i][d], q_rows[i][d]
        r = min(one, pd / qd) if qd > 0 else one * 0
        intervals.append((one * 0, r) if i < accepted else (r, one))
        mass *= r if i < accepted else one - r
    if mass <= 0:
        return None
    p_next = p_rows[accepted]
    if rejected:
        law = [max(one * 0, a - b) for a, b in zip(p_next, q_rows[accepted])]
    else:
        law = list(p_next)
    return intervals, mass, law


def block_thresholds(p_rows: list, q_rows: list, drafts: tuple[int, ...], one=1.0) -> tuple[list, list]:
    """Block verification's running prefix ratios rho_0..rho_k and thresholds h_1..h_k along
    ``drafts`` (specd.core.block defines them), in the arithmetic of ``one``."""
    k = len(drafts)
    rho, rhos, hs = one, [one], []
    for i, d in enumerate(drafts):
        rho = min(one, rho * p_rows[i][d] / q_rows[i][d])
        rhos.append(rho)
        if i < k - 1:
            z = sum((max(one * 0, rho * a - b) for a, b in zip(p_rows[i + 1], q_rows[i + 1])), one * 0)
            hs.append(one if rho == one else z / (z + one - rho))
        else:
            hs.append(rho)
    return rhos, hs


def block_branch(p_rows: list, q_rows: list, drafts: tuple[int, ...], accepted: int, one=1.0):
    """One branch of a block-verified round along ``drafts``: A = ``accepted``. -> (the acceptance
    uniforms' intervals: eta_A below h_A, every later eta at or above its h, the earlier ones free;
    the branch's mass given the drafts, h_A prod_{i > A} (1 - h_i); the terminal's law up to
    normalization: p_{k+1} at A = k, else [rho_A p_{A+1} - q_{A+1}]_+), or None without mass."""
    k = len(drafts)
    rhos, hs = block_thresholds(p_rows, q_rows, drafts, one)
    intervals, mass = [], one
    for i in range(k):  # i is 0-based: the test of d_{i+1}
        if i < accepted - 1:
            intervals.append((one * 0, one))
        elif i == accepted - 1:
            intervals.append((one * 0, hs[i]))
            mass *= hs[i]
        else:
            intervals.append((hs[i], one))
            mass *= one - hs[i]
    if mass <= 0:
        return None
    if accepted == k:
        return intervals, mass, list(p_rows[k])
    rho = rhos[accepted]
    return intervals, mass, [max(one * 0, rho * a - b) for a, b in zip(p_rows[accepted], q_rows[accepted])]
