"""trace summarize --plot: acceptance by position with intervals and the accepted-length histogram."""

import sys

import pytest

from specd.traces.plot import wilson
from tests.helpers import run_cli


def test_wilson_intervals_cover_the_rate_and_narrow_with_trials():
    lo, hi = wilson(8, 10)
    assert lo < 0.8 < hi and 0 <= lo and hi <= 1
    lo2, hi2 = wilson(800, 1000)
    assert lo2 < 0.8 < hi2 and hi2 - lo2 < hi - lo
    assert wilson(0, 0) == (0.0, 1.0) and wilson(10, 10)[1] == pytest.approx(1.0) and wilson(0, 10)[0] == 0.0


@pytest.fixture(scope="module")
def tagged_log(tiny_models, tmp_path_factory):
    folder = tmp_path_factory.mktemp("plot")
    prompts = folder / "p.jsonl"
    prompts.write_text('{"prompt": "the quick brown", "tag": "a"}\n{"prompt": "def add(a, b):", "tag": "b"}\n')
    log = folder / "log.jsonl"
    from specd.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(
            ["trace", "run", "--target", tiny_models[0], "--draft", tiny_models[1], "--prompts-file", str(prompts)]
            + ["--max-new-tokens", "24", "-k", "3", "--trace", str(log)]
        )
    assert exit_.value.code == 0
    return log


@pytest.mark.parametrize("by", [None, "tag"])
def test_the_plot_is_written_and_not_empty(tagged_log, tmp_path, capsys, by):
    png = tmp_path / "acc.png"
    code, out, err = run_cli(
        ["trace", "summarize", str(tagged_log), "--plot", str(png), *(["--by", by] if by else [])], capsys
    )
    assert code == 0, err
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000 and "written to" in out


def test_plotting_without_matplotlib_says_how_to_get_it(tagged_log, tmp_path, capsys, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    png = tmp_path / "acc.png"
    code, _, err = run_cli(["trace", "summarize", str(tagged_log), "--plot", str(png)], capsys)
    assert code == 2 and err.count("\n") == 1 and "pip install 'specd[plot]'" in err
    assert not png.exists()


def test_a_bad_plot_path_is_refused_before_reading(tagged_log, tmp_path, capsys):
    code, _, err = run_cli(["trace", "summarize", str(tagged_log), "--plot", str(tmp_path / "no" / "x.png")], capsys)
    assert code == 2 and err.count("\n") == 1


def test_the_summary_shows_the_policy_the_log_was_sampled_from(tagged_log, capsys):
    code, out, err = run_cli(["trace", "summarize", str(tagged_log)], capsys)
    assert code == 0, err
    assert "Sampling (--generation-config auto)" in out and "greedy (" in out and "(as the target)" in out
