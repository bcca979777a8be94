"""``specd generate`` (placeholder until the generate issue lands)."""

from __future__ import annotations

import typer

from specd.cli.common import not_available


def generate(ctx: typer.Context) -> None:
    """Speculative generation with a target/draft pair of Hugging Face models."""
    not_available("generate", "speculative generation on Hugging Face models is being built")
