import pytest

from specd.core.kv import KVCache, KVRows
from specd.core.model import RowInput
from specd.core.table_model import TableModel
from specd.errors import CacheIdentityError


def test_ledger_commits_a_prefix_and_counts_traffic():
    cache = KVCache()
    cache.open(0)
    cache.stage(KVRows(0, (5, 6, 7), (0, 1, 2)))
    cache.commit(0, 2)
    assert cache.committed(0) == (5, 6) and cache.temporary(0) == ()
    cache.stage(KVRows(0, (9,), (2,)))
    cache.discard(0)
    assert cache.committed(0) == (5, 6)
    assert (cache.counts.staged, cache.counts.committed, cache.counts.discarded) == (4, 2, 2)


def test_duplicate_or_shifted_positions_are_refused():
    cache = KVCache()
    cache.open(0)
    cache.stage(KVRows(0, (5, 6), (0, 1)))
    cache.commit(0, 2)
    with pytest.raises(CacheIdentityError):
        cache.stage(KVRows(0, (6,), (1,)))  # replaying a row the cache holds
    with pytest.raises(CacheIdentityError):
        cache.stage(KVRows(0, (6,), (3,)))  # a gap


def test_table_rows_depend_only_on_prefix_not_query_order():
    a, b = TableModel(5, seed=3), TableModel(5, seed=3)
    x1 = a.raw_logits((1, 2)).clone()
    b.raw_logits((4,))
    assert (b.raw_logits((1, 2)) == x1).all()
    assert not (a.raw_logits((2, 1)) == x1).all()


def test_table_step_conditions_on_cache_plus_inputs():
    model = TableModel(4, seed=0)
    cache = model.new_cache()
    cache.open(0)
    out = model.step(cache, [RowInput(0, (1, 2, 3), (0, 1, 2))])
    cache.commit(0, 2)
    again = model.step(cache, [RowInput(0, (3,), (2,))])
    assert (again.logits[0][0] == out.logits[0][2]).all()
    assert again.kv[0] == KVRows(0, (3,), (2,))


def test_slots_open_once_and_close():
    cache = KVCache()
    cache.open(3)
    with pytest.raises(CacheIdentityError):
        cache.open(3)
    cache.close(3)
    assert not cache.is_open(3)
    cache.open(3)  # a closed slot id may be opened again, empty
    assert cache.committed(3) == ()


def test_a_slots_rows_are_an_outputs_prefix_by_their_count_and_last_rows():
    from specd.core.kv import TAIL

    cache = KVCache()
    cache.open(0)
    tokens = tuple(range(40))
    cache.stage(KVRows(0, tokens[:30], tuple(range(30))))
    cache.commit(0, 30)
    assert cache.prefix_held(0, tokens) == 30 and cache.committed_length(0) == 30
    assert cache.prefix_held(0, tokens[:29]) == 0  # more rows than the output has
    assert cache.prefix_held(0, tokens[:29] + (99,) + tokens[30:]) == 0  # its last row is not the output's
    shifted = tokens[1:] + (40,)
    assert cache.prefix_held(0, shifted) == 0 and TAIL >= 2


def test_a_round_start_cache_whose_last_row_is_not_the_outputs_is_refused():
    from specd.core.layouts import make_layout
    from specd.core.state import Request
    from specd.core.tree import DraftTree
    from tests.helpers import table_engine

    session = table_engine().start([Request("r", (0, 1, 2, 3), 4, seed=0)])
    state = session.store.get("r")
    layout = make_layout("replay_frontier")
    assert layout.verification_input(state, DraftTree.chain(())).tokens == (3,)
    bad = state.evolve(cache_tokens=(0, 1, 3))  # the right count, a wrong last row
    with pytest.raises(CacheIdentityError, match="round-start cache"):
        layout.verification_input(bad, DraftTree.chain(()))
