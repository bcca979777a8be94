"""Options shared by ``generate`` and ``trace run``, and the YAML config merge."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml

from specd.errors import UsageError
from specd.models.pipeline import GenerateOptions

CONFIG_FIELDS = {f for f in GenerateOptions.__dataclass_fields__} | {
    "prompt",
    "prompts_file",
    "baseline",
    "compare",
    "trace",
    "json",
}


def load_config(path: str | None) -> dict:
    if not path:
        return {}
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise UsageError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a config must be a mapping of option names to values")
    data = {str(k).replace("-", "_"): v for k, v in data.items()}
    unknown = sorted(set(data) - CONFIG_FIELDS)
    if unknown:
        raise UsageError(f"{path}: unknown option(s) {', '.join(unknown)}")
    return data


def merged(ctx: typer.Context, values: dict, config: dict) -> dict:
    """Flags typed on the command line win; then the config file; then defaults."""
    out = dict(values)
    for name, value in config.items():
        source = ctx.get_parameter_source(name) if name in ctx.params else None
        if source is None or source.name in ("DEFAULT", "DEFAULT_MAP"):
            if name == "prompt" and isinstance(value, str):
                value = [value]
            if name == "stop" and isinstance(value, str):
                value = [value]
            out[name] = value
    return out


def options_from(values: dict) -> GenerateOptions:
    fields = GenerateOptions.__dataclass_fields__
    kwargs = {k: v for k, v in values.items() if k in fields}
    kwargs["stop"] = tuple(kwargs.get("stop") or ())
    try:
        return GenerateOptions(**kwargs)
    except TypeError as err:
        raise UsageError(str(err)) from None
