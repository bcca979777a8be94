"""Helpers shared by commands: option parsing and output streams."""

from __future__ import annotations

import json
import math
import sys

import yaml
from rich.console import Console

from specd.errors import UsageError, shown
from specd.files import MAX_CONFIG_BYTES, read_text

stdout = Console(highlight=False, soft_wrap=False)
if not stdout.is_terminal:  # piped or captured: wide enough that tables keep their headers
    stdout = Console(highlight=False, soft_wrap=False, width=150)
stderr = Console(stderr=True, highlight=False)


def parse_bias(items: list[str] | None, option: str) -> dict[int, float]:
    """['0=0.5', '3=-1'] -> {0: 0.5, 3: -1.0}."""
    out: dict[int, float] = {}
    for item in items or []:
        token, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[int(token)] = float(value)
        except ValueError:
            raise UsageError(f"{option} takes TOKEN=VALUE (e.g. 0=0.5), got {shown(item)}") from None
    return out


class StrictLoader(yaml.SafeLoader):
    """YAML for configs: safe tags only, no anchors or aliases (a few lines of aliases can stand
    for billions of values), and no key given twice (which one would win is a guess)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.constructor.ConstructorError(
                None, None, "anchors and aliases (*name) are not allowed in a specd config", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {shown(key)} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml_mapping(path: str | None, allowed: set[str], what: str) -> dict:
    """A YAML file holding a mapping of known keys ('-' and '_' alike), or {} without a path.
    Read strictly (``StrictLoader``), at most MAX_CONFIG_BYTES."""
    if not path:
        return {}
    text = read_text(path, "config file", allow_empty=True, limit=MAX_CONFIG_BYTES)
    try:
        data = yaml.load(text, Loader=StrictLoader) or {}  # noqa: S506 - StrictLoader is a SafeLoader
    except yaml.MarkedYAMLError as err:
        line = f":{err.problem_mark.line + 1}" if err.problem_mark is not None else ""
        raise UsageError(f"{path}{line}: not valid YAML ({err.problem or err.context})") from None
    except yaml.YAMLError as err:
        raise UsageError(f"{path}: not valid YAML ({' '.join(str(err).split())})") from None
    except ValueError:  # an integer longer than Python converts
        raise UsageError(f"{path}: a number with too many digits ({sys.get_int_max_str_digits()} at most)") from None
    except RecursionError:
        raise UsageError(f"{path}: YAML nested too deeply") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: {what} must be a mapping of option names to values")
    data = {str(k).replace("-", "_"): v for k, v in data.items()}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise UsageError(f"{path}: unknown option(s) {', '.join(unknown)}")
    return data


def finite(value):
    """The document with every NaN or infinity replaced by null: --json is always strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def print_json(document: dict) -> None:
    sys.stdout.write(json.dumps(finite(document), indent=2, sort_keys=False, default=str, allow_nan=False) + "\n")
