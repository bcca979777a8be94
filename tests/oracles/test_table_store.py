"""specd.oracles.samplers.table_store: a table made once a process, its target chains kept on it."""

from collections import OrderedDict
from dataclasses import replace

from specd.oracles.fixture import OracleConfig
from specd.oracles.reference import chain_joint
from specd.oracles.samplers import table_store
from specd.oracles.samplers.table_store import completion, made
from specd.oracles.samplers.tables import adversarial, seeded


def test_a_table_is_made_once_a_process_and_its_target_chains_are_kept_on_it():
    cfg = OracleConfig(vocab=3, target_bias={0: 0.3})
    table = seeded(cfg, 3, 2, 0)
    assert seeded(replace(cfg, target_bias={0: 0.3}), 3, 2, 0) is table
    assert adversarial(table, "near_ties", 0) is adversarial(seeded(cfg, 3, 2, 0), "near_ties", 0)
    other = seeded(replace(cfg, target_bias={0: 0.4}), 3, 2, 0)  # another configuration: its own rows
    assert other is not table and other.p(other.prompt) != table.p(table.prompt)
    joint = completion(table, table.prompt, 3)
    assert completion(table, table.prompt, 3) is joint and joint == chain_joint(table.p, table.prompt, 3)
    assert abs(sum(joint.values()) - 1) < 1e-12


def test_the_store_keeps_the_tables_used_last(monkeypatch):
    monkeypatch.setattr(table_store, "_MADE", OrderedDict())
    monkeypatch.setattr(table_store, "_MADE_MOST", 2)
    made("a", lambda: 1), made("b", lambda: 2)
    assert made("a", lambda: 9) == 1  # kept, not made again; "b" is now the oldest
    made("c", lambda: 3)
    assert list(table_store._MADE) == ["a", "c"]
