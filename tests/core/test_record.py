"""specd.core.record: a frozen dataclass with a constructor storing into the instance's __dict__."""

from dataclasses import FrozenInstanceError, dataclass, field, replace

import pytest

from specd.core.record import record


def sample_class(decorate, name: str):
    """One set of fields under ``decorate``: every kind of field a dataclass takes, and a __post_init__
    (``name``: the module-level name it is bound to, where pickle finds it)."""

    class Sample:
        name: str
        count: int = 2
        tags: tuple = ()
        seen: list = field(default_factory=list)
        hidden: int = field(default=7, compare=False)
        derived: int = field(init=False, compare=False, default=0)
        later: list = field(init=False, compare=False, default_factory=lambda: [1])
        flag: bool = field(default=False, kw_only=True)

        def __post_init__(self):
            object.__setattr__(self, "derived", self.count * 10)

    Sample.__qualname__ = Sample.__name__ = name
    return decorate(Sample)


Sample = sample_class(record, "Sample")
Plain = sample_class(dataclass(frozen=True), "Plain")  # the same fields under the dataclass's own constructor


@pytest.mark.parametrize(
    "args, kwargs",
    [(("a",), {}), (("a", 3, (1,), [4]), {"hidden": 9, "flag": True}), ((), {"name": "b", "seen": [1, 2]})],
)
def test_a_record_holds_what_the_dataclass_would(args, kwargs):
    fast, plain = Sample(*args, **kwargs), Plain(*args, **kwargs)
    assert vars(fast) == vars(plain)


def test_defaults_factories_and_post_init_apply_per_instance():
    a, b = Sample("a"), Sample("b", 4)
    assert a.seen == [] and a.seen is not b.seen and a.later == [1] and a.later is not b.later
    assert (a.derived, b.derived, a.hidden, a.flag) == (20, 40, 7, False)


def test_a_record_stays_frozen_and_compares_hashes_and_replaces_as_a_dataclass():
    a = Sample("a", tags=(1,))
    with pytest.raises(FrozenInstanceError):
        a.count = 3  # type: ignore[misc]
    assert a == Sample("a", tags=(1,), hidden=0) and a != Sample("a", 3, (1,))
    assert hash(Sample("a", tags=(1,), seen=None)) == hash(Sample("a", tags=(1,), seen=None))  # type: ignore[arg-type]
    b = replace(a, count=5)
    assert (b.count, b.derived, b.tags) == (5, 50, (1,))


def test_arguments_are_checked_as_a_dataclass_checks_them():
    with pytest.raises(TypeError):
        Sample()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Sample("a", 1, (), [], 7, True)  # type: ignore[misc]  # flag is keyword-only
    with pytest.raises(TypeError):
        Sample("a", derived=3)  # type: ignore[call-arg]  # not an argument of the constructor


def test_a_record_pickles_and_a_hand_written_constructor_stays():
    import pickle

    a = Sample("a", 3, (1,), [2], flag=True)
    b = pickle.loads(pickle.dumps(a))
    assert vars(b) == vars(a)

    @record
    class Own:
        x: int

        def __init__(self, y: int):
            object.__setattr__(self, "x", y * 2)

    assert Own(2).x == 4
