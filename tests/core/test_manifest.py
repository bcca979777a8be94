import dataclasses
import json

import pytest

from specd.core.manifest import COORDINATE_FIELDS, RoundCoordinate, ensure_current
from specd.core.state import Request
from specd.errors import StaleCoordinate
from tests.helpers import table_engine

MUTATIONS = {
    "target_model": "table:target:other-revision",
    "draft_model": "table:draft:other-revision",
    "event_space": "shared-ids:V=5",
    "target_policy": '{"greedy":true,"processors":[]}',
    "draft_policy": '{"greedy":true,"processors":[]}',
    "rng": (1, "r", (0, 1, 0)),
    "start_state": ("r", 7, (1, 2, 3), 2),
    "layout": "retained_frontier",
}


def coordinate() -> RoundCoordinate:
    engine = table_engine()
    session = engine.start([Request("r", (1, 2), 4)])
    return engine.coordinate(session.states()[0])


def test_every_field_is_covered():
    assert set(MUTATIONS) == set(COORDINATE_FIELDS)


@pytest.mark.parametrize("field", COORDINATE_FIELDS)
def test_mutating_each_field_gives_its_named_failure(field):
    current = coordinate()
    stale = dataclasses.replace(current, **{field: MUTATIONS[field]})
    assert stale.digest() != current.digest()
    with pytest.raises(StaleCoordinate) as err:
        ensure_current(current, stale, "proposal")
    assert err.value.field == field
    assert f"'{field}'" in str(err.value) and "stale proposal" in str(err.value)


def test_canonical_serialization_is_stable():
    a, b = coordinate(), coordinate()
    assert a.canonical() == b.canonical() and a.digest() == b.digest()
    doc = json.loads(a.canonical())
    assert list(doc) == sorted(doc)
    assert a.canonical() == json.dumps(doc, sort_keys=True, separators=(",", ":"))
    ensure_current(a, b, "verification")  # equal coordinates pass
