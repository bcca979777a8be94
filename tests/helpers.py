"""Shared fixtures: small table-model engines."""

from __future__ import annotations

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer
from specd.core.table_model import TableModel


def table_engine(
    vocab=4, k=3, layout="replay_frontier", target_temperature=1.0, draft_temperature=0.8, seed=1, **kw
) -> SpeculativeEngine:
    target = TableModel(vocab, seed=seed, name="target")
    draft = TableModel(vocab, seed=seed + 100, name="draft")
    config = EngineConfig(k=k, layout=layout, **kw)
    return SpeculativeEngine(
        target,
        ModelProposer(draft, SamplingPolicy.build(temperature=draft_temperature)),
        SamplingPolicy.build(temperature=target_temperature),
        config,
    )


def run_cli(args, capsys):
    """Run the console entry point in-process -> (exit code, stdout, stderr)."""
    import pytest

    from specd.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(args)
    out = capsys.readouterr()
    return exit_.value.code, out.out, out.err
