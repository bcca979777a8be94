"""``specd sweep-k`` (placeholder until the sweep issue lands)."""

from __future__ import annotations

import typer

from specd.cli.common import not_available


def sweep_k(ctx: typer.Context) -> None:
    """The cost/speedup ledger over K and batch size."""
    not_available("sweep-k", "the speedup ledger is being built")
