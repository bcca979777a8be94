"""Exact-rational mode: the rule in Fractions, no processors, difference exactly 0.

Probability tables are rational distributions per prefix. This is an
independent implementation of the rule's mathematics (torch has no rationals):
it shows the identity holds with no rounding at all, while the float64 oracle
shows the production code realizes it.
"""

from __future__ import annotations

import random
from fractions import Fraction

from specd.oracles.reference import block_branch, chain_joint

Table = dict[tuple[int, ...], list[Fraction]]


class RationalTable:
    """Seeded rational distribution per prefix: integer weights 0..6 (some zero) normalized."""

    def __init__(self, vocab: int, seed: int):
        self.vocab, self.seed = vocab, seed
        self._rows: Table = {}

    def __call__(self, prefix: tuple[int, ...]) -> list[Fraction]:
        if prefix not in self._rows:
            rng = random.Random(f"{self.seed}:{prefix}")
            weights = [rng.randint(0, 6) for _ in range(self.vocab)]
            if sum(weights) == 0:
                weights[rng.randrange(self.vocab)] = 1
            total = sum(weights)
            self._rows[prefix] = [Fraction(w, total) for w in weights]
        return self._rows[prefix]


def completer(p: RationalTable, prompt, horizon: int, out: dict):
    """add(prefix, mass): ``prefix`` emitted with ``mass``, completed by the target chain to ``horizon``
    (each sequence's mass summed into ``out``)."""

    def add(prefix: tuple[int, ...], mass: Fraction) -> None:
        if len(prefix) >= horizon:
            out[prefix[:horizon]] = out.get(prefix[:horizon], 0) + mass
            return
        for x, px in enumerate(p(prompt + prefix)):
            if px:
                add(prefix + (x,), mass * px)

    return add


def rational_speculative_joint(p: RationalTable, q: RationalTable, prompt, k: int, horizon: int) -> dict:
    """One speculative round with k drafts, completed by the target chain to ``horizon``."""
    out: dict = {}
    add = completer(p, prompt, horizon, out)

    def draft(path: tuple[int, ...], mass: Fraction) -> None:
        i = len(path)
        if i == k:
            add(path, mass)  # all accepted: the bonus from p_{k+1} is the chain's next token
            return
        qi, pi = q(prompt + path), p(prompt + path)
        for d, qd in enumerate(qi):
            if not qd:
                continue
            ratio = min(Fraction(1), pi[d] / qd)
            draft(path + (d,), mass * qd * ratio)
            reject = mass * qd * (1 - ratio)
            if reject:
                residual = [max(Fraction(0), a - b) for a, b in zip(pi, qi)]
                z = sum(residual)
                for x, rx in enumerate(residual):
                    if rx:
                        add(path + (x,), reject * rx / z)

    draft((), Fraction(1))
    return out


def rational_difference(vocab: int, k: int, horizon: int, seed: int, prompt=(0,)) -> Fraction:
    p, q = RationalTable(vocab, seed), RationalTable(vocab, seed + 7919)
    target = chain_joint(p, tuple(prompt), horizon, Fraction(1))
    spec = rational_speculative_joint(p, q, tuple(prompt), k, horizon)
    return max(abs(target.get(s, Fraction(0)) - spec.get(s, Fraction(0))) for s in set(target) | set(spec))


def rational_block_joint(p: RationalTable, q: RationalTable, prompt, k: int, horizon: int) -> dict:
    """One block-verified round with k drafts (every draft path from q, every accepted length A with
    its mass, the terminal from its law), completed by the target chain to ``horizon``."""
    out: dict = {}
    add = completer(p, prompt, horizon, out)
    one = Fraction(1)

    def draft(path: tuple[int, ...], mass: Fraction) -> None:
        if len(path) < k:
            for d, qd in enumerate(q(prompt + path)):
                if qd:
                    draft(path + (d,), mass * qd)
            return
        p_rows = [p(prompt + path[:i]) for i in range(k + 1)]
        q_rows = [q(prompt + path[:i]) for i in range(k)]
        for accepted in range(k + 1):
            found = block_branch(p_rows, q_rows, path, accepted, one)
            if found is None:
                continue
            _, branch_mass, law = found
            z = sum(law)
            for x, lx in enumerate(law):
                if lx:
                    add(path[:accepted] + (x,), mass * branch_mass * lx / z)

    draft((), one)
    return out


def rational_block_difference(vocab: int, k: int, horizon: int, seed: int, prompt=(0,)) -> Fraction:
    p, q = RationalTable(vocab, seed), RationalTable(vocab, seed + 7919)
    target = chain_joint(p, tuple(prompt), horizon, Fraction(1))
    spec = rational_block_joint(p, q, tuple(prompt), k, horizon)
    return max(abs(target.get(s, Fraction(0)) - spec.get(s, Fraction(0))) for s in set(target) | set(spec))
