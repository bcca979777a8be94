"""What a foreign sampler's check covers (``verify-oracle --sampler``): the sizes and tables it runs
on, the classes of slip each size can show, and the verdict in words.

A size can hide a slip, and a table too (``specd.oracles.samplers.slip_classes`` says where each class
of slip is hidden and where it shows), so a check covers the classes:

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
  to each other); ``SEED_TREES`` on the seed's table alone (a third child below the root, a younger
  sibling below the root with a child, siblings at the third level, a fourth level, a correction of up
  to 15 tokens, a younger sibling's two children at V = 5); ``4`` at V = 5 on the draft_apart table
  alone (a fourth sibling, ``FOURTH_SIBLING``), and
  ``n`` at V = n + 1 on it for each n from 5 to W (each later sibling: ``late_siblings``), or where W < 5, ``5``
  at V = 6 on draft_misses_target alone, its children drawn without replacement, ranked or a lookup's
  (``FIFTH_SIBLING``; ``Case.drawings``), and so ``1,1,3`` at V = 4 (``THIRD_AT_THE_THIRD_LEVEL``); ``1,2`` at V = 4
  also on the two first-row tables (``FIRST_ROW``); ``1`` at V = 65 and 66 on draft_point_mass
  (``WIDE_VOCAB_CASE``, ``TAIL_CASES``) and at V = 65 on wide_draft (``WIDE_DRAFT_CASE``); ``2,1,1,1,1,1,1,1,1`` at
  V = 65 on far_siblings (``BIG_TREE_CASE``); ``1`` at V = 33 on draft_point_mass (``MID_CASE``); the chain-shaped
  tree of 9 levels at V = 65 on sparse_rows (``NINTH_CASE``); ``1`` at V = 192 on sparse_rows (``ALIGNED_CASE``); the
  chain-shaped tree of 8 levels at V = 65 on sparse_rows
  (``FAR_ROWS_CASE``); ``1`` at V = 257 on sparse_rows (``PAST_BYTE_CASE``); ``1,1,1,1,1,1,1,1,2`` at V = 6 on
  deep_rows (``DEEP_ROWS_CASE``); the chain-shaped tree of every other depth below 8 at V = 3 on draft_point_mass
  (``EVERY_K``);
  and ``1,2`` at V = 4 over the tables of small values; where the named tree is four levels deep or more,
  the chain-shaped tree of its depth (at most DEEP_MAX) at V = 4 on draft_point_mass. A tree named twice
  runs at the larger V. For a chain
  (``CHAIN_SIZES``): V = 3, K = 2 (a correction drawn, a second draft), V = 3, K = 3 (a middle
  draft), V = 4, K = 2 (a correction from three tokens, at the first position and after an accepted
  draft), V = 16, K = 1 (a correction from up to 15 tokens: a cut to a few of them shows), and V = 4,
  K = 3 on the seed's table alone (three tokens after two accepted drafts), V = 4, K = 2 over the
  tables of small values, V = 3, K = 2 also on the two first-row tables, V = 65 and 66, K = 1 on
  draft_point_mass, V = 65, K = 1 on wide_draft, V = 33, K = 1 on draft_point_mass, V = 192, K = 1 and V = 65,
  K = 8 and 9 on sparse_rows, V = 257, K = 1 on sparse_rows, V = 6, K = 9 on deep_rows, V = 3 at
  every other K below 8 on draft_point_mass (``EVERY_K``), and where the named K is 4 or more, V = 4 at that K
  (at most DEEP_MAX) on draft_point_mass;
- with ``exact_size``, the named size only, over every table (those of small values too): a class
  that size cannot show is reported not applicable, with the reason and the size that would show it
  (never as passed).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specd.core.tree_shape import TreeShape, parse_tree
from specd.oracles.fixture import OracleConfig
from specd.oracles.record import NOT_APPLICABLE
from specd.oracles.samplers.chain_slip_classes import CHAIN_SLIPS
from specd.oracles.samplers.size_classes import (
    ALIGNED_VOCAB,
    DEEP_ROWS_VOCAB,
    FAR_DEPTH,
    MID_VOCAB,
    NINTH,
    PAST_BYTE_VOCAB,
    TAIL_VOCABS,
    WIDE_VOCAB,
)
from specd.oracles.samplers.slip_classes import (
    BIG_TREE,
    DEEP_SIBLINGS_TREE,
    SLIPS,
    TOP_K_VOCAB,
    third_at_the_third_level,
    widest,
    widest_shown,
)
from specd.oracles.samplers.tables import MADE_ANEW, Table, adversarial, seeded, small_value_tables, tables


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
    drawings: tuple[str, ...] | None = None  # a tree's constructions it runs under (None: every one asked)

    @property
    def label(self) -> str:
        where = f"tree {self.shape.spec}" if self.shape is not None else f"K = {self.k}"
        only = f" ({drawn_only(self.drawings)})" if self.drawings is not None else ""
        return f"V = {self.vocab}, {where}" + (" (nodes depth-first)" if self.depth_first else "") + only

    @property
    def size(self) -> tuple:
        """What makes two cases one size (``_beside`` adds the tables of one to the other)."""
        return (self.vocab, self.k, self.shape.choices if self.shape else None, self.drawings)


def drawn_only(drawings: tuple[str, ...]) -> str:
    """How a case made for some constructions says so, in its label and in the claim."""
    return f"{', '.join(drawings)} only"


# The sizes a chain sampler is checked at beside the named one, (V, K), each the smallest that shows
# its classes: correction_draw and second_draft; middle_draft; wide_correction and later_wide_correction
# (a cut past the first draft only passed V = 4, K = 1); top_k_correction (at K = 2, V = 16 costs five to
# ten times the whole check). CHAIN_SEED_SIZES: V = 4, K = 3, where a correction after two accepted drafts
# has three tokens (a cut at the third position only passed V = 4, K = 2).
CHAIN_SIZES = ((3, 2), (3, 3), (4, 2), (TOP_K_VOCAB, 1))
CHAIN_SEED_SIZES = ((4, 3),)  # on the seed's table alone: every table costs the check a third more
# A named round deeper than these (K or a tree's depth >= 4): the same depth at V = 4, up to DEEP_MAX, on the
# draft_point_mass table alone (one draft a position, each accepted with p(d) > 0, a refusal leaving the
# target's other three tokens), so a correction after three accepted drafts or more is drawn from three
# tokens (a cut to two there passed --vocab 2 and 3 at --k 4 and 5, where the named size is all that reaches
# that deep). V = 4 costs 4^(K + 1) sequences: 0.3 s at K = 5, 1 s at K = 6; deeper, the named size alone.
DEEP_VOCAB, DEEP_MAX, DEEP_TABLE = 4, 6, "draft_point_mass"
# A correction after an accepted draft (or node) drawn from up to 15 tokens: a chain of two at V = 16 on the
# draft_point_mass table alone (one draft a position, so the cost is the target's joint: 16^3 sequences). A
# correction cut to the few tokens a buffer holds (ids below 4), or to its five likeliest, after an accepted
# draft passed every other size (V = 16 had one position, the sizes with two had V <= 4).
WIDE_AFTER_ONE_ACCEPTED = (TOP_K_VOCAB, "1,1", "draft_point_mass")


# The cheapest trees where each kind of node has a correction of three tokens or more once its children are
# all refused (a cut to its two likeliest shows): a root of two children at V = 5, a node below the root (a
# middle level's, a younger sibling's child) at V = 4 (the younger sibling alone with a child: the tree 2,1
# costs four times as much). The sizes that show the other classes leave two or fewer.
WIDE_TREES = (("2", 5), ("[[0],[1],[1,0]]", 4), ("1,1,1", 4))
# A node below the root with two children, both refused, leaving three tokens: the tree 1,2 at V = 5, on the
# seed's table only (a correction cut at such a node shows on any table that leaves it three tokens of mass;
# every table would double the check of a tree of width 2, and 1,W' at V = W' + 3 cost 20% more at W' = 3).
WIDE_BELOW_THE_ROOT = (5, "1,2")
# The trees of the other shape classes, each on the seed's table alone (a slip of its class showed there on
# every sampler written with one; every table would add 60% to the check of a tree of width 2): a node below
# the root with three children (its third child tested on what two refusals left of both rows), a younger
# sibling below the root with a child, siblings at the third level, a fourth level, a correction of up to
# 15 tokens, and a younger sibling of two children at V = 5, both refused, leaving three tokens (a cut to two
# there passed every other size: ranked and lookup children leave three on any table whose target has every
# token). A tree checked already at the same or a larger V is not checked again.
SEED_TREES = (
    (4, "1,3"),
    (3, "1,2,1"),
    (3, "1,1,2"),
    (3, "1,1,1,1"),
    (TOP_K_VOCAB, "1"),
    (5, "[[0],[1],[1,0],[1,1]]"),
)
# A fourth child, tested on what three refusals left (V = 5: at V = 4 they leave p' all on its token), and each
# later child up to the named tree's widest node's last: the tree n at V = n + 1 for n from 4, on the
# draft_apart table alone. There n - 1 refusals are likely and leave p' below q' on one of the two tokens left,
# so a q' or p' that is wrong at the n-th child moves its test; a slip at the n-th child shows at n alone (at a
# wider node the n-th child's test is decided). A removal from q' capped at two refused children passed the
# seed's table at V = 5, 6 and 7, and the near_ties table on seeds 1, 3 and 5. (The tree 6 at V = 7 costs
# 3.4 s in one process, 7 about seven times that: no more than the named tree's own check at its width.)
FOURTH_SIBLING = (5, "4", "draft_apart")


# Not i.i.d. (its trees cost seconds of a sampler in Fractions, the docs'), where the named tree has no such node: a
# fifth child (5 at V = 6 on draft_misses_target: five tokens of draft mass, so four refusals leave q' one token, p'
# two or more; q' not renormalized after the fourth removal passed every other case) and a third child at the third
# level (1,1,3 at V = 4, the seed's table: ""; q' not renormalized from the second removal there passed every case).
NOT_IID = ("sampled", "rank", "lookup")
FIFTH_SIBLING = (6, "5", "draft_misses_target", NOT_IID)
THIRD_AT_THE_THIRD_LEVEL = (4, "1,1,3", "", NOT_IID)


def late_siblings(w: int) -> list[tuple[int, str, str]]:
    """(V, tree, table) for the fourth child and every later one of a node of ``w`` children (above)."""
    _, first, kind = FOURTH_SIBLING
    return [(n + 1, str(n), kind) for n in range(int(first), max(int(first), w) + 1)]


# A terminal drawn over more tokens than a warp (32 lanes) or a wavefront (64) holds: one draft (a chain of K = 1,
# the tree 1) at V = WIDE_VOCAB on the draft_point_mass table alone (one path: a refusal's correction from 64 tokens,
# a bonus from 65; the target's joint 65^2 sequences). A total summed over the first 32 tokens passed every size up
# to V = 16 (a helper's sampler). No block width from 2 to 64 divides 65: a law cut into blocks of 8 (16, 32, 64)
# has a last block of one token, which a block loop that drops it, or a row padded to the block and read back at
# the unpadded stride, gets wrong (a third helper's samplers passed at V = 16 and 72). The same at V = 66, whose
# last block holds two tokens (TAIL_CASES; a loop dropping a last block of two passed every other size).
WIDE_VOCAB_CASE = (WIDE_VOCAB, "1", "draft_point_mass")
TAIL_CASES = tuple((vocab, "1", "draft_point_mass") for vocab in TAIL_VOCABS if vocab != WIDE_VOCAB)
# A vocabulary a multiple of 64 past 128 (ALIGNED_VOCAB): one draft (K = 1, the tree 1) on the sparse_rows table
# alone (two tokens of target mass a row, so its cost is its rows' width, not its cells; the draft's tokens,
# V - 1 and V - 30, lie in the partial last block of 128).
ALIGNED_CASE = (ALIGNED_VOCAB, "1", "sparse_rows")
# Rows read from another position's place: row buffers kept in a ring by position (of up to FAR_DEPTH - 1), rows
# wider than 64 tokens read at a stride of 64 (a block's) or of any width but V. A round of FAR_DEPTH drafts (a
# chain-shaped tree of that depth) at V = WIDE_VOCAB on the sparse_rows table alone: one draft a position, each a
# point mass on a token of its own, so a row read from elsewhere has q(d) = 0 under the draft and keeps it
# untested; two tokens of target mass a row, so its joint is 2^(FAR_DEPTH + 1) sequences. A ring of three rows
# (K = 4 shows it) and a stride of 64 at V > 64 (K = 2 does) passed every other size (a helper's samplers).
FAR_ROWS_CASE = (WIDE_VOCAB, FAR_DEPTH, "sparse_rows")
# A draft row with mass on more than 32 tokens: one draft (K = 1, the tree 1) at V = WIDE_VOCAB on the wide_draft
# table (the draft's mass on every token, the target's on three, two of them past the draft's 32 likeliest). Every
# other table's draft past V = 32 was a point mass, so a draft row kept as its 32 likeliest tokens passed every size
# (a fifth helper's chain and tree samplers). Its V paths cost about as much as the rest of the wide case.
WIDE_DRAFT_CASE = (WIDE_VOCAB, "1", "wide_draft")
# Siblings drawn without replacement whose token ids are past 32 and 64, in a tree of more than 16 nodes: BIG_TREE (two
# children at the root, a chain of eight point-mass drafts below each: 18 nodes) at V = WIDE_VOCAB on the far_siblings
# table alone. q' renormalized over the first 32 tokens after a refusal, refused tokens kept in a 64-bit mask whose
# shift wraps, children drawn without replacement taken as i.i.d. in a tree of more than 8 nodes, and ranked children
# tested as if drawn without replacement in one of more than 16, passed every size (siblings were checked at V <= 5,
# trees of at most 8 nodes but the named one; a fifth and a sixth helper's samplers).
BIG_TREE_CASE = (WIDE_VOCAB, BIG_TREE, "far_siblings")
# The band of vocabularies no other size reaches, 17 to 64 tokens: one draft (K = 1, the tree 1) at V = MID_VOCAB on
# the draft_point_mass table alone (one path: a correction from up to 32 tokens, a bonus from 33). A correction cut to
# its 16 likeliest where 16 < V <= 64 (a path for one warp) passed every size (a sixth helper's samplers).
MID_CASE = (MID_VOCAB, "1", "draft_point_mass")
# A ninth draft (NINTH): a round of nine drafts (the chain-shaped tree of nine levels) at V = WIDE_VOCAB on sparse_rows
# alone (2^10 sequences). A mask of accepted drafts kept in one byte, and a ninth node taken as refused untested,
# passed every size (every K up to 8; a sixth helper's samplers); a ring of eight rows shows there too.
NINTH_CASE = (WIDE_VOCAB, NINTH, "sparse_rows")
# A vocabulary past 256 (PAST_BYTE_VOCAB): one draft (K = 1, the tree 1) on sparse_rows alone (two tokens of target
# mass a row, the draft's at V - 1: its cost is the rows' width; on draft_point_mass, V cells each a run over V tokens
# doubled the check of the docs' samplers). A terminal's law kept in a float32 buffer past 256
# tokens passed every size (a sixth helper's tree sampler; a chain's float32 paths show in dtype_edges' wide rows).
PAST_BYTE_CASE = (PAST_BYTE_VOCAB, "1", "sparse_rows")
# Rows of full support after eight accepted drafts (deep_rows, its first eight rows point masses): a round of nine
# drafts at V = DEEP_ROWS_VOCAB, and for a tree DEEP_SIBLINGS_TREE there (two children under a chain of eight). A
# correction cut to its two likeliest after four accepted drafts, and siblings from the fourth level on tested on
# their parent's unchanged row, passed every size (a sixth helper's samplers: deep rounds were all point masses).
DEEP_ROWS_CASE = (DEEP_ROWS_VOCAB, DEEP_SIBLINGS_TREE, "deep_rows")
# Every K (a tree's depth) from 1 to FAR_DEPTH: a chain sampler with a branch of its own for one K (a kernel
# unrolled or a graph captured per K) wrong at K = 5 passed every size (K = 1, 2, 3 and 8), and was shown only
# where --k 5 was named. The K no other size has (for a tree, the chain-shaped tree of that depth), at V = 3 on
# the draft_point_mass table alone (one draft a position: 3^(K + 1) sequences, a refusal leaving a correction of
# two tokens).
EVERY_K = (3, "draft_point_mass")


# One token refused at two levels of a path under equal target rows, each time against another draft row (a
# residual memoized by what is left of p' and the token, its q' forgotten): a younger sibling with a child, at
# V = 4 on repeated_target alone (the target's first row at every row), where the root's elder child and the
# younger one's child can be the same token, both refused. The seed's rows never repeat, and on draft_far_below's
# flat rows no path of seed 0 refused one token twice (a helper's sampler passed every size).
REPEATED_ROWS_TREE = (4, "[[0],[1],[1,0]]", "repeated_target")


# A round decided on its first row (greedy where p_1 is a point mass, every draft kept where p_1 = q_1): the
# tables equal_first_row and point_mass_first_row, whose later rows are the seed's, at a chain of two (V = 3) and
# the tree 1,2 (V = 4), two levels past the root. Each such path passed every table whose rows were all alike.
FIRST_ROW = ("equal_first_row", "point_mass_first_row")
FIRST_ROW_CHAIN, FIRST_ROW_TREE = (3, 2), (4, "1,2")


# The tables of small values (specd.oracles.samplers.tables.SMALL_VALUES) at one size each: a tree with
# siblings below the root, and a chain of two drafts; with --exact-size, at the named size.
SMALL_VALUE_TREE = (4, "1,2")
SMALL_VALUE_CHAIN = (4, 2)
# An elder sibling with a child, handed over depth-first (the protocol's order is any with parents first): the
# root's children are not next to each other, so a sampler that takes a node's children to be the nodes after
# its first child walks into another's (breadth-first, every size's order, hides it). The seed's table.
DEPTH_FIRST = (3, "[[0],[0,0],[1]]")


def tree_cases(cfg: OracleConfig, shape: TreeShape, exact_size: bool = False) -> list[Case]:
    """The sizes a tree sampler is checked at (module docstring): the named one first."""
    w = widest(shape)
    if exact_size:
        every = tables(cfg, cfg.vocab, shape.depth, w)
        return [Case(cfg.vocab, shape.depth, shape, tuple(every + small_value_tables(every[0], cfg.seed)), True)]
    wide = widest_shown(w)
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
    for vocab, spec in (WIDE_BELOW_THE_ROOT, *SEED_TREES):  # the seed's table, where not checked yet
        tree = parse_tree(spec)
        if not any(tree.choices == c.shape.choices and vocab <= c.vocab for c in out):
            out.append(Case(vocab, tree.depth, tree, (seeded(cfg, vocab, tree.depth, cfg.seed),)))
    first_row = [(FIRST_ROW_TREE[0], FIRST_ROW_TREE[1], kind) for kind in FIRST_ROW]
    # the chain-shaped trees of the chain's deep cases
    far, ninth = ((vocab, TreeShape.chain(depth).spec, kind) for vocab, depth, kind in (FAR_ROWS_CASE, NINTH_CASE))
    made = [
        *late_siblings(w),
        WIDE_AFTER_ONE_ACCEPTED,
        WIDE_VOCAB_CASE,
        *TAIL_CASES,
        ALIGNED_CASE,
        far,
        WIDE_DRAFT_CASE,
        BIG_TREE_CASE,
        MID_CASE,
        ninth,
        REPEATED_ROWS_TREE,
        *first_row,
        PAST_BYTE_CASE,
        DEEP_ROWS_CASE,
    ]
    for vocab, spec, kind in made:  # each on a table made for its class
        tree = parse_tree(spec)
        out = _beside(out, Case(vocab, tree.depth, tree, (_made(cfg, vocab, tree.depth, kind),)))
    named = ((FIFTH_SIBLING, w >= 5), (THIRD_AT_THE_THIRD_LEVEL, third_at_the_third_level(cfg.vocab, shape) is None))
    for (vocab, spec, kind, drawings), shown in named:  # (a named node of five: late_siblings, every construction)
        tree = parse_tree(spec)
        if not shown and not any(tree.choices == c.shape.choices and vocab <= c.vocab for c in out):
            out.append(Case(vocab, tree.depth, tree, (_made(cfg, vocab, tree.depth, kind),), drawings=drawings))
    vocab, spec = SMALL_VALUE_TREE
    small = parse_tree(spec)
    values = small_value_tables(seeded(cfg, vocab, small.depth, cfg.seed), cfg.seed)
    out.append(Case(vocab, small.depth, small, tuple(values)))
    vocab, spec = DEPTH_FIRST
    elder = parse_tree(spec)
    out.append(Case(vocab, elder.depth, elder, (seeded(cfg, vocab, elder.depth, cfg.seed),), depth_first=True))
    return _with_every_k(_with_deep(out, cfg, shape.depth, shape), cfg, tree=True)


def chain_cases(cfg: OracleConfig, exact_size: bool = False) -> list[Case]:
    """The sizes a chain sampler is checked at (module docstring): the named one first."""
    if exact_size:
        every = tables(cfg, cfg.vocab, cfg.k, 1)
        return [Case(cfg.vocab, cfg.k, None, tuple(every + small_value_tables(every[0], cfg.seed)), True)]
    out = [Case(cfg.vocab, cfg.k, None, (seeded(cfg, cfg.vocab, cfg.k, cfg.seed),), True)]
    for vocab, k in CHAIN_SIZES:
        if (vocab, k) == (cfg.vocab, cfg.k):  # the named size is one of them: every table
            out[0] = Case(vocab, k, None, tuple(tables(cfg, vocab, k, 1)), True)
            continue
        out.append(Case(vocab, k, None, tuple(tables(cfg, vocab, k, 1))))
    for vocab, k in CHAIN_SEED_SIZES:
        if (vocab, k) != (cfg.vocab, cfg.k):
            out.append(Case(vocab, k, None, (seeded(cfg, vocab, k, cfg.seed),)))
    vocab, k = SMALL_VALUE_CHAIN
    out.append(Case(vocab, k, None, tuple(small_value_tables(seeded(cfg, vocab, k, cfg.seed), cfg.seed))))
    vocab, spec, kind = WIDE_AFTER_ONE_ACCEPTED
    out = _beside(out, Case(vocab, len(spec.split(",")), None, (_made(cfg, vocab, len(spec.split(",")), kind),)))
    vocab, k = FIRST_ROW_CHAIN
    for kind in FIRST_ROW:
        out = _beside(out, Case(vocab, k, None, (_made(cfg, vocab, k, kind),)))
    one_draft = [
        (vocab, 1, kind)
        for vocab, _, kind in (WIDE_VOCAB_CASE, *TAIL_CASES, ALIGNED_CASE, WIDE_DRAFT_CASE, MID_CASE, PAST_BYTE_CASE)
    ]
    deep_vocab, _, deep_kind = DEEP_ROWS_CASE  # a chain of NINTH drafts where a tree has its ninth level
    for vocab, k, kind in (*one_draft, FAR_ROWS_CASE, NINTH_CASE, (deep_vocab, NINTH, deep_kind)):
        out = _beside(out, Case(vocab, k, None, (_made(cfg, vocab, k, kind),)))
    return _with_every_k(_with_deep(out, cfg, cfg.k, None), cfg, tree=False)


def _with_every_k(out: list[Case], cfg: OracleConfig, tree: bool) -> list[Case]:
    """``out`` with a round of every K (a tree's depth) from 1 to FAR_DEPTH that none of its cases has
    (EVERY_K above; a tree's chain-shaped)."""
    vocab, kind = EVERY_K
    for k in range(1, FAR_DEPTH):
        if all(c.k != k for c in out):
            out = out + [Case(vocab, k, TreeShape.chain(k) if tree else None, (_made(cfg, vocab, k, kind),))]
    return out


def _with_deep(out: list[Case], cfg: OracleConfig, depth: int, shape: TreeShape | None) -> list[Case]:
    """``out`` with the deep case (DEEP_VOCAB above) where the named round is 4 levels deep or more."""
    if depth < 4:
        return out
    k = min(depth, DEEP_MAX)
    tree = TreeShape.chain(k) if shape is not None else None
    return _beside(out, Case(DEEP_VOCAB, k, tree, (_made(cfg, DEEP_VOCAB, k, DEEP_TABLE),)))


def _made(cfg: OracleConfig, vocab: int, depth: int, kind: str) -> Table:
    """The table ``kind`` made from the run's seed's at ``vocab``, ``depth`` (a kind made anew reads only its
    prompt: the seed's rows of one level, so that a depth past what the seed's rows could enumerate holds; "": the
    seed's own)."""
    base = seeded(cfg, vocab, 1 if kind in MADE_ANEW else depth, cfg.seed)
    return adversarial(base, kind, cfg.seed) if kind else base


def _beside(out: list[Case], case: Case) -> list[Case]:
    """``out`` with ``case``: its tables added to a case of the same size where there is one."""
    at = next((i for i, c in enumerate(out) if c.size == case.size), None)
    if at is None:
        return out + [case]
    out[at] = replace(out[at], tables=out[at].tables + case.tables)
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
        at: dict[tuple, list[int]] = {}
        for c in cases:
            at.setdefault((c.shape.spec if c.shape else "", c.drawings), []).append(c.vocab)
        sizes += "; trees " + ", ".join(
            f'"{spec}" (V = {_listed(sorted(vs))}{"" if only is None else "; " + drawn_only(only)})'
            for (spec, only), vs in at.items()
        )
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
                **({"drawings": list(c.drawings)} if c.drawings is not None else {}),
                "tables": [t.name for t in c.tables],
            }
            for c in cases
        ],
        "slips": slips,
        "claim": claim if passed else None,
    }
