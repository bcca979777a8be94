"""The range checks of a generation run's own options, each a ``Check`` (value, where it came from)
that ``GenerateOptions`` declares beside its option (specd.models.run.options); the sampling controls'
checks are the core's (specd.core.controls), made optional here."""

from __future__ import annotations

from collections.abc import Callable

from specd.core.tree_shape import parse_tree
from specd.errors import UsageError, shown
from specd.files import check_path_name
from specd.models.run.drafts import parse_drafts
from specd.models.run.option_spec import Check

MAX_BATCH_SIZE = 4096
AUTO_TREE = "auto"  # --tree auto: -k auto chooses each round's shape, a chain or a tree within --tree-budget


def batch_size_value(value, where):
    """--batch-size (a run argument, not an option: outputs do not depend on it)."""
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BATCH_SIZE
    ):
        raise UsageError(f"{where} must be in 1..{MAX_BATCH_SIZE} (an integer), got {shown(value)}")


def stop_strings(value, where):
    if any(not s for s in value):
        raise UsageError(f"{where}: a stop string must not be empty")


def device_map_value(value, where):
    if value not in (None, "auto"):
        raise UsageError(f"{where} takes auto, got {shown(value)}")


def path_value(value, where):
    if value is not None:
        check_path_name(value, where)  # a folder, a hub id or a file


def draft_value(value, where):
    parse_drafts(value)  # an unknown, repeated or empty source is refused by name


def tree_value(value, where):
    if value is not None and value != AUTO_TREE:
        parse_tree(value, where)


def sampling(check: Callable) -> Check:
    """A core sampling check (temperature, top-k, top-p, penalty) for an optional value."""
    return lambda value, where: value is None or check(value, where)
