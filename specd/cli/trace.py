"""``specd trace`` (placeholder until the generate issue lands)."""

from __future__ import annotations

import typer

from specd.cli.common import not_available

app = typer.Typer(
    help="Per-token acceptance logs and their summaries.", no_args_is_help=False, invoke_without_command=True
)


@app.callback(invoke_without_command=True, context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def trace(ctx: typer.Context) -> None:
    """Per-token acceptance logs and their summaries."""
    not_available("trace", "acceptance logs are being built")
