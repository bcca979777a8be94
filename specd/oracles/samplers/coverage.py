"""What a foreign sampler's check covers (``verify-oracle --sampler``): the sizes and tables it runs
on, the classes of slip each size can show, and the verdict in words.

A size can hide a slip. Where a node has V - 1 children, refusing them all leaves one token, so the
correction is forced and a correction drawn wrongly gives the right token all the same; at V = 2 a
second sibling's test is decided by the first's outcome; a tree of one level never reads a row past
the root's, one of two levels has no level between two others; a chain round of one draft has no
test after a refusal, one of two drafts no draft between two others; and where a refusal leaves
two tokens or fewer, no correction has three. So each class of slip (``SLIPS``, ``CHAIN_SLIPS``)
states where it is hidden, and a check covers the classes:

- by default, the size the user named (on the run's seed's table) and the smallest sizes where each
  class can show, each over every table of ``specd.oracles.samplers.tables`` (the seed's, more
  seeds, adversarial ones). For a tree whose widest sibling group has W children (W' = max(W, 2)):
  the trees ``W'`` and ``1,W'`` at V = W' + 2 (siblings, every correction a real draw, a second
  depth, a node below the root with siblings under it, so on two paths), where W' < 3 the tree
  ``3`` at V = 4 (a third sibling, tested on what two refusals left), and ``WIDE_TREES``, where a
  root's and a node below the root's correction has three tokens: ``2`` at V = 5, the tree of a
  younger sibling with a child at V = 4 (a path through a younger sibling into its children),
  ``1,1,1`` at V = 4 (a level between two others), ``1,2`` at V = 5 on the seed's table alone (a node
  below the root whose two children leave three), and ``[[0],[0,0],[1]]`` at V = 3 on the seed's table,
  its nodes handed over depth-first (every other tree's go breadth-first, where a node's children are next
  to each other). A tree named twice runs at the larger V. For a chain
  (``CHAIN_SIZES``): V = 3, K = 2 (a correction drawn, a second draft), V = 3, K = 3 (a middle
  draft), V = 4, K = 2 (a correction from three tokens, at the first position and after an accepted
  draft), V = 16, K = 1 (a correction from up to 15 tokens: a cut to a few of them shows), and V = 4,
  K = 3 on the seed's table alone (three tokens after two accepted drafts);
- with ``exact_size``, the named size only, over every table: a class that size cannot show is
  reported not applicable, with the reason and the size that would show it (never as passed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specd.core.tree_shape import TreeShape, parse_tree
from specd.oracles.fixture import OracleConfig
from specd.oracles.record import NOT_APPLICABLE
from specd.oracles.samplers.tables import Table, seeded, tables


@dataclass(frozen=True)
class Case:
    """One size a sampler is checked at, over ``tables`` of ``vocab`` tokens: a tree ``shape`` (None: a
    chain round of ``k`` drafts; a tree's K is its depth); ``named``: the size the user named."""

    vocab: int
    k: int
    shape: TreeShape | None
    tables: tuple[Table, ...]
    named: bool = False
    depth_first: bool = False  # a tree's nodes handed over depth-first (else breadth-first)

    @property
    def label(self) -> str:
        where = f"tree {self.shape.spec}" if self.shape is not None else f"K = {self.k}"
        return f"V = {self.vocab}, {where}" + (" (nodes depth-first)" if self.depth_first else "")


@dataclass(frozen=True)
class Slip:
    """A class of slip: ``hidden(vocab, shape or K)`` says why a size cannot show it (None: it can),
    ``shown_at(widest)`` the flags of the smallest size that does, for a tree whose widest sibling
    group has ``widest`` children."""

    name: str
    what: str
    hidden: Callable[[int, object], str | None]
    shown_at: Callable[[int], str]


def widest(shape: TreeShape) -> int:
    """The most children a node of the static shape has."""
    return max((c[-1] + 1 for c in shape.choices or ()), default=0)


def _siblings(vocab: int, shape) -> str | None:
    if widest(shape) < 2:
        return "no node of the tree has two children: nothing is tested on what an elder sibling left"
    if vocab < 3:
        return "at V = 2 a second sibling's test is decided by the first's outcome (what a refusal leaves is its token)"
    return None


def _third_sibling(vocab: int, shape) -> str | None:
    if widest(shape) < 3:
        return "no node of the tree has three children: no test follows two refusals"
    if vocab < 4:
        return (
            f"at V = {vocab} two refusals leave one token in what is left of both rows: the third child is kept "
            "whatever its law"
        )
    return None


def _correction(vocab: int, shape) -> str | None:
    w = widest(shape)
    if vocab <= w:
        return (
            f"at V = {vocab} a node's {w} children hold every token: the last is never refused, no correction follows"
        )
    if vocab == w + 1:
        return (
            f"at V = {vocab} a node's {w} children, all refused, leave one token: the correction is forced, and any "
            "draw of it gives that token"
        )
    return None


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"


def _wide_tree_correction(vocab: int, shape) -> str | None:
    counts = [shape.children(c) for c in ((), *shape.choices)] if shape.choices else []
    most = max(counts, default=0)  # a correction at every node, the widest included, needs three tokens left
    if vocab - most < 3:
        left = _count(max(vocab - most, 0), "token")
        return (
            f"at V = {vocab} a node has {most} children: drawn without replacement and all refused, they leave "
            f"at most {left} of mass, and no correction there has three"
        )
    return None


def _depth(vocab: int, shape) -> str | None:
    if shape.depth < 2:
        return "a tree of one level reads no row past the root's but the bonus's"
    return None


def _below(vocab: int, shape) -> str | None:
    if not any(shape.children(c) >= 2 for c in shape.choices or ()):
        return "no node below the root has two children: no sibling is tested on a later row, no node is on two paths"
    if vocab < 3:
        return "at V = 2 a second sibling's test is decided by the first's outcome (what a refusal leaves is its token)"
    return None


def _middle_level(vocab: int, shape) -> str | None:
    if shape.depth < 3:
        return f"a tree of {_count(shape.depth, 'level')} has no level between two others"
    return None


def _younger(vocab: int, shape) -> str | None:
    if not any(c[-1] >= 1 and shape.children(c) for c in shape.choices or ()):
        return "no younger sibling has children: no path goes down through a node tried after a refused one"
    return None


def _wide(w: int) -> int:
    return max(w, 2)


SLIPS = (
    Slip(
        "siblings",
        "a sibling tested on what its elder siblings left",
        _siblings,
        lambda w: f"--tree {_wide(w)} --vocab {_wide(w) + 1}",
    ),
    Slip(
        "third_sibling",
        "a third sibling tested on what two refused elders left (without replacement: both their tokens gone)",
        _third_sibling,
        lambda w: f"--tree {max(w, 3)} --vocab {max(w, 3) + 1}",
    ),
    Slip(
        "correction_draw",
        "a correction after every child is refused, drawn from two or more tokens",
        _correction,
        lambda w: f"--tree {_wide(w)} --vocab {_wide(w) + 2}",
    ),
    Slip(
        "wide_correction",
        "a correction drawn from three or more tokens (a first, a middle and a last token of its law), at every node",
        _wide_tree_correction,
        lambda w: "--tree 2 --vocab 5",
    ),
    Slip(
        "second_depth",
        "rows past the root's: a child's test and bonus on its own row",
        _depth,
        lambda w: f"--tree 1,{_wide(w)} --vocab {_wide(w) + 2}",
    ),
    Slip(
        "siblings_below_the_root",
        "siblings under a node below the root: tested on that node's row, the node on two paths",
        _below,
        lambda w: f"--tree 1,{_wide(w)} --vocab {_wide(w) + 2}",
    ),
    Slip(
        "middle_level",
        "a level between two others: children of a node with a parent, tested and refused with a level below",
        _middle_level,
        lambda w: "--tree 1,1,1 --vocab 3",
    ),
    Slip(
        "younger_sibling_subtree",
        "a path through a younger sibling into its children",
        _younger,
        lambda w: "--tree 2,1 --vocab 3",
    ),
)


def _chain_correction(vocab: int, k) -> str | None:
    if vocab < 3:
        return "at V = 2 a refused draft leaves one token: the correction is forced"
    return None


def _second_draft(vocab: int, k) -> str | None:
    if k < 2:
        return "a round of one draft has no test after the first and no row past p_2"
    return None


def _wide_correction(vocab: int, k) -> str | None:
    if vocab < 4:
        left = _count(vocab - 1, "token")
        return f"at V = {vocab} a refused draft leaves at most {left} of mass: no correction has three"
    return None


TOP_K_VOCAB = 16  # a refused draft there leaves up to 15 tokens of mass: a cut to a few of them shows


def _later_wide_correction(vocab: int, k) -> str | None:
    if k < 2:
        return "a round of one draft has no correction after an accepted draft"
    return _wide_correction(vocab, k)


def _top_k_correction(vocab: int, k) -> str | None:
    if vocab < TOP_K_VOCAB:
        return (
            f"at V = {vocab} a refused draft leaves at most {_count(vocab - 1, 'token')} of mass: a correction cut "
            f"to its {vocab - 2} likeliest is exact there, and to fewer shows only where a table leaves more"
        )
    return None


def _middle_draft(vocab: int, k) -> str | None:
    if k < 3:
        return f"a round of {_count(k, 'draft')} has no draft between two others"
    return None


CHAIN_SLIPS = (
    Slip("correction_draw", "a correction drawn from two or more tokens", _chain_correction, lambda w: "--vocab 3"),
    Slip(
        "second_draft",
        "a round's second draft: its test, its row, what follows a refusal",
        _second_draft,
        lambda w: "--k 2",
    ),
    Slip(
        "wide_correction",
        "a correction drawn from three or more tokens (a first, a middle and a last token of its law)",
        _wide_correction,
        lambda w: "--vocab 4",
    ),
    Slip(
        "later_wide_correction",
        "a correction after an accepted draft drawn from three or more tokens (a path of its own past the first)",
        _later_wide_correction,
        lambda w: "--vocab 4 --k 2",
    ),
    Slip(
        "middle_draft",
        "a draft between two others: tested after an acceptance, refused with a draft left untested",
        _middle_draft,
        lambda w: "--k 3",
    ),
    Slip(
        "top_k_correction",
        "a correction cut to a few of its likeliest tokens (a top-k of its law: the 3 to 8 likeliest, on these tables)",
        _top_k_correction,
        lambda w: f"--vocab {TOP_K_VOCAB} --k 1",
    ),
)
# The sizes a chain sampler is checked at beside the named one, (V, K), each the smallest that shows
# its classes: correction_draw and second_draft; middle_draft; wide_correction and later_wide_correction
# (a cut past the first draft only passed V = 4, K = 1); top_k_correction (at K = 2, V = 16 costs five to
# ten times the whole check). CHAIN_SEED_SIZES: V = 4, K = 3, where a correction after two accepted drafts
# has three tokens (a cut at the third position only passed V = 4, K = 2).
CHAIN_SIZES = ((3, 2), (3, 3), (4, 2), (TOP_K_VOCAB, 1))
CHAIN_SEED_SIZES = ((4, 3),)  # on the seed's table alone: every table costs the check a third more


# The cheapest trees where each kind of node has a correction of three tokens or more once its children are
# all refused (a cut to its two likeliest shows): a root of two children at V = 5, a node below the root (a
# middle level's, a younger sibling's child) at V = 4 (the younger sibling alone with a child: the tree 2,1
# costs four times as much). The sizes that show the other classes leave two or fewer.
WIDE_TREES = (("2", 5), ("[[0],[1],[1,0]]", 4), ("1,1,1", 4))
# A node below the root with two children, both refused, leaving three tokens: the tree 1,2 at V = 5, on the
# seed's table only (a correction cut at such a node shows on any table that leaves it three tokens of mass;
# every table would double the check of a tree of width 2, and 1,W' at V = W' + 3 cost 20% more at W' = 3).
WIDE_BELOW_THE_ROOT = (5, "1,2")
# An elder sibling with a child, handed over depth-first (the protocol's order is any with parents first): the
# root's children are not next to each other, so a sampler that takes a node's children to be the nodes after
# its first child walks into another's (breadth-first, every size's order, hides it). The seed's table.
DEPTH_FIRST = (3, "[[0],[0,0],[1]]")


def tree_cases(cfg: OracleConfig, shape: TreeShape, exact_size: bool = False) -> list[Case]:
    """The sizes a tree sampler is checked at (module docstring): the named one first."""
    w = widest(shape)
    if exact_size:
        return [Case(cfg.vocab, shape.depth, shape, tuple(tables(cfg, cfg.vocab, shape.depth, w)), True)]
    wide = _wide(w)
    # tree -> V: the smallest sizes of the classes, WIDE_TREES, and where W' < 3 the tree 3 at V = 4 (a third
    # sibling; from W' = 3, `W'` at V = W' + 2 has one); a tree named twice at the larger V
    vocab_of = {f"{wide}": wide + 2, f"1,{wide}": wide + 2}
    for spec, vocab in WIDE_TREES + ((("3", 4),) if wide < 3 else ()):
        vocab_of[spec] = max(vocab_of.get(spec, 0), vocab)
    smallest = [(vocab, spec) for spec, vocab in vocab_of.items()]
    named = Case(cfg.vocab, shape.depth, shape, (seeded(cfg, cfg.vocab, shape.depth, cfg.seed),), True)
    out = [named]
    for vocab, spec in smallest:
        small = parse_tree(spec)
        if (vocab, small.choices) == (cfg.vocab, shape.choices):  # the named size is one of them: every table
            out[0] = Case(vocab, small.depth, shape, tuple(tables(cfg, vocab, small.depth, widest(small))), True)
            continue
        out.append(Case(vocab, small.depth, small, tuple(tables(cfg, vocab, small.depth, widest(small)))))
    vocab, spec = WIDE_BELOW_THE_ROOT  # on the seed's table alone (every table doubles 1,2's cost)
    below = parse_tree(spec)
    if (vocab, below.choices) != (cfg.vocab, shape.choices):
        out.append(Case(vocab, below.depth, below, (seeded(cfg, vocab, below.depth, cfg.seed),)))
    vocab, spec = DEPTH_FIRST
    elder = parse_tree(spec)
    out.append(Case(vocab, elder.depth, elder, (seeded(cfg, vocab, elder.depth, cfg.seed),), depth_first=True))
    return out


def chain_cases(cfg: OracleConfig, exact_size: bool = False) -> list[Case]:
    """The sizes a chain sampler is checked at (module docstring): the named one first."""
    if exact_size:
        return [Case(cfg.vocab, cfg.k, None, tuple(tables(cfg, cfg.vocab, cfg.k, 1)), True)]
    out = [Case(cfg.vocab, cfg.k, None, (seeded(cfg, cfg.vocab, cfg.k, cfg.seed),), True)]
    for vocab, k in CHAIN_SIZES:
        if (vocab, k) == (cfg.vocab, cfg.k):  # the named size is one of them: every table
            out[0] = Case(vocab, k, None, tuple(tables(cfg, vocab, k, 1)), True)
            continue
        out.append(Case(vocab, k, None, tuple(tables(cfg, vocab, k, 1))))
    for vocab, k in CHAIN_SEED_SIZES:
        if (vocab, k) != (cfg.vocab, cfg.k):
            out.append(Case(vocab, k, None, (seeded(cfg, vocab, k, cfg.seed),)))
    return out


def slips_covered(cases: list[Case], named_widest: int) -> list[dict]:
    """Each class of slip: the cases that can show it, or (none can) not applicable at this size, with
    the reason at the named size and the size that would show it."""
    tree = cases[0].shape is not None
    out = []
    for slip in SLIPS if tree else CHAIN_SLIPS:
        shown = [c.label for c in cases if slip.hidden(c.vocab, c.shape if tree else c.k) is None]
        named = cases[0]
        if shown:
            out.append({"slip": slip.name, "what": slip.what, "shown": True, "at": shown, "detail": ""})
            continue
        reason = slip.hidden(named.vocab, named.shape if tree else named.k)
        detail = f"{NOT_APPLICABLE}{reason}; shown at {slip.shown_at(named_widest)} (without --exact-size)"
        out.append({"slip": slip.name, "what": slip.what, "shown": False, "at": [], "detail": detail})
    return out


def _listed(values: list) -> str:
    seen = list(dict.fromkeys(values))
    return ", ".join(str(v) for v in seen)


def coverage(cases: list[Case], exact_size: bool, passed: bool = True) -> dict:
    """What a check covers, as ``--json`` reports it: every case with its tables, each class of slip,
    and the claim in words: what the sampler was proved exact on (None where it is not exact)."""
    named = cases[0]
    slips = slips_covered(cases, widest(named.shape) if named.shape is not None else 1)
    count = sum(len(c.tables) for c in cases)
    sizes = f"V = {_listed(sorted(c.vocab for c in cases))}"
    if named.shape is not None:
        at: dict[str, list[int]] = {}
        for c in cases:
            at.setdefault(c.shape.spec if c.shape else "", []).append(c.vocab)
        sizes += "; trees " + ", ".join(f'"{spec}" (V = {_listed(sorted(vs))})' for spec, vs in at.items())
    sizes += f"; K = {_listed(sorted(c.k for c in cases))}"
    claim = f"exact on {count} tables at {sizes}"
    hidden = [s["slip"] for s in slips if not s["shown"]]
    if hidden:
        claim += f"; not shown at this size (n/a): {', '.join(hidden)}"
    return {
        "exact_size": exact_size,
        "tables": count,
        "cases": [
            {
                "vocab": c.vocab,
                "k": c.k,
                **({"tree": c.shape.spec} if c.shape is not None else {}),
                "named": c.named,
                **({"depth_first": True} if c.depth_first else {}),
                "tables": [t.name for t in c.tables],
            }
            for c in cases
        ],
        "slips": slips,
        "claim": claim if passed else None,
    }
