"""Options shared by ``generate`` and ``trace run``, and the YAML config merge."""

from __future__ import annotations

import typer

from specd.cli.common import load_yaml_mapping
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
    return load_yaml_mapping(path, CONFIG_FIELDS, "a config")


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
