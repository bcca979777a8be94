"""Rendering of run statistics (rich tables) and their JSON form."""

from __future__ import annotations

import re
from pathlib import Path

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from specd.core.stats import RunStats
from specd.errors import printable


def stats_table(columns: dict[str, RunStats], title: str = "Speculation summary") -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("")
    for name in columns:
        table.add_column(name, justify="right")

    figures = {name: s.figures() for name, s in columns.items()}

    def row(label, fn):
        table.add_row(label, *[fn(s) for s in columns.values()])

    def fig(label, fn):
        table.add_row(label, *[fn(f) for f in figures.values()])

    row("tokens generated", lambda s: str(s.emitted))
    row("decode tokens/s", lambda s: f"{s.tokens_per_second:.1f}")
    row("time per output token", lambda s: f"{1000 * s.decode_time / s.emitted:.1f} ms" if s.emitted else "-")
    fig("request rounds", lambda f: str(f["rounds"]))
    fig("mean accepted length", lambda f: _num(f["mean_accepted_length"]))
    fig("acceptance by position", lambda f: " ".join(_num(a) for a in f["acceptance_by_position"].values()) or "-")
    fig("K chosen (rounds)", lambda f: " ".join(f"{k}:{n}" for k, n in f["k_histogram"].items()) or "-")
    fig("draft source (rounds)", lambda f: _sources(f["source_histogram"]))
    fig("share of rounds at K = 0", lambda f: f"{100 * f['share_k0']:.0f}%" if f["rounds"] else "-")
    fig("vLLM: mean acceptance length", lambda f: _num(f["mean_acceptance_length"]))
    fig("vLLM: draft acceptance rate", lambda f: _num(f["draft_acceptance_rate"], percent=True))
    fig(
        "vLLM: drafts / draft tokens / accepted",
        lambda f: f"{f['num_drafts']} / {f['num_draft_tokens']} / {f['num_accepted_tokens']}",
    )
    row("draft / verify / state", lambda s: _split(s))
    row("prefill", lambda s: f"{s.prefill_time:.2f} s")
    row("target / draft forwards", lambda s: f"{s.target_forwards} / {s.draft_forwards}")
    row("K/V rows temp / committed", lambda s: f"{s.kv_temporary_rows} / {s.kv_committed_rows}")
    return table


def policy_table(sampling: dict) -> Group:
    """The effective sampling values, target and draft, each with where it came from, and a line
    saying what the model's generation config set."""
    generation = sampling["generation_config"]
    sets = ", ".join(f"{k}={v}" for k, v in generation["values"].items()) or "no sampling value"
    if generation["mode"] == "auto":
        said = f"generation_config.json sets {sets}: {_home(generation['file'])}"
    else:
        said = "generation config not read"
    table = Table(title=f"Sampling (--generation-config {generation['mode']})", title_justify="left")
    roles = [r for r in ("target", "draft") if r in sampling]
    table.add_column("")
    for role in roles:
        table.add_column(role)
    for name in ("temperature", "top_k", "top_p", "repetition_penalty"):
        cells = []
        for role in roles:
            setting = sampling[role].get(name)
            if setting is None:
                cells.append("-")
                continue
            value = setting["value"]
            shown = "greedy" if name == "temperature" and value == 0 else ("off" if value is None else f"{value:g}")
            cells.append(f"{shown} [dim]({escape(printable(_short(setting['source']), newlines=False))})[/]")
        table.add_row(name, *cells)
    return Group(table, Text(printable(said, newlines=False), style="dim"))


def _short(source: str) -> str:
    """A value's source; a generation config file by its name only (the caption holds its path)."""
    return re.sub(r"\S*generation_config\.json", "generation_config.json", source)


def _home(path: str) -> str:
    """A path with the home directory written as ~."""
    home = str(Path.home())
    return "~" + path[len(home) :] if path.startswith(home + "/") else path


def _sources(histogram: dict[str, int]) -> str:
    return " ".join(f"{_source(s)}:{n}" for s, n in histogram.items()) or "-"


def _source(identity: str) -> str:
    """A draft source as the user named it: suffix, ngram:3, or a model's name (self:bf16(...) and
    folders shortened to their last part)."""
    name = identity[3:].rsplit(":", 3)[0] if identity.startswith("hf:") else identity  # hf:NAME:dtype:device:cfg
    if name.startswith("self:"):  # self:bf16(target), self:vocab=N(target): the spec as written
        return printable(name.split("(", 1)[0], newlines=False)
    return printable(name.rsplit("/", 1)[-1], newlines=False)


def _num(value: float | None, percent: bool = False) -> str:
    """A figure for the table: "-" where it is undefined (no round drafted, no round reached it)."""
    if value is None:
        return "-"
    return f"{100 * value:.1f}%" if percent else f"{value:.2f}"


def _split(s: RunStats) -> str:
    total = s.decode_time
    if total <= 0:
        return "-"
    return f"{100 * s.draft_time / total:.0f}% / {100 * s.verify_time / total:.0f}% / {100 * s.state_time / total:.0f}%"
