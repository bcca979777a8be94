"""--rule block on the commands: a sampled run decodes under it, greedy is the same text under every
rule, and a resumed file written under another rule is refused in one line."""

import json

from tests.helpers import run_cli

PROMPTS = ["the quick brown fox", "def add(a, b):"]


def generate(tiny_models, capsys, *extra):
    args = ["generate", "--target", tiny_models[0], "--draft", tiny_models[1], "--max-new-tokens", "12", "--json"]
    for p in PROMPTS:
        args += ["-p", p]
    return run_cli([*args, *extra], capsys)


def test_a_sampled_block_run_and_greedy_text_equal_under_every_rule(tiny_models, capsys):
    code, out, err = generate(tiny_models, capsys, "--temperature", "0.8", "--rule", "block", "-k", "3")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["manifest"]["rule"] == "block" and all(r["text"] for r in doc["results"])
    greedy = {}
    for rule in ("maximal", "invariant", "block"):
        code, out, err = generate(tiny_models, capsys, "--temperature", "0", "--rule", rule, "-k", "3")
        assert code == 0, err
        greedy[rule] = [r["text"] for r in json.loads(out)["results"]]
    assert greedy["block"] == greedy["maximal"] == greedy["invariant"]


def test_an_unknown_rule_is_one_line_and_exit_2(tiny_models, capsys):
    code, out, err = generate(tiny_models, capsys, "--rule", "tree")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "block" in err


def test_resuming_a_file_written_under_another_rule_is_refused_and_the_file_kept(tiny_models, capsys, tmp_path):
    out = tmp_path / "results.jsonl"
    sampled = ["--temperature", "0.8", "-k", "2", "--out", str(out)]
    code, _, err = generate(tiny_models, capsys, *sampled, "--rule", "maximal")
    assert code == 0, err
    before = out.read_bytes()
    code, _, err = generate(tiny_models, capsys, *sampled, "--rule", "block", "--resume")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "rule" in err and "maximal" in err and "block" in err
    assert out.read_bytes() == before


def test_verify_oracle_sampler_under_the_block_rule_bad_inputs(tmp_path, monkeypatch, capsys):
    """A sampler that raises fails its check (exit 1, named); --rule invariant or all with --sampler is
    one line and exit 2 (the invariant rule has no sampler protocol)."""
    (tmp_path / "raising_block.py").write_text("def sample(*args):\n    raise RuntimeError('not today')\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(
        ["verify-oracle", "--sampler", "raising_block:sample", "--rule", "block", "--json"], capsys
    )
    doc = json.loads(out)
    assert code == 1 and not doc["passed"] and "raised" in doc["findings"] and doc["config"]["rule"] == "block"
    for rule in ("invariant", "all"):
        code, out, err = run_cli(["verify-oracle", "--sampler", "specd", "--rule", rule], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "maximal or block" in err
    code, out, err = run_cli(["verify-oracle", "--sampler", "specd-block", "--rule", "block", "--vocab", "3"], capsys)
    assert code == 0, err


def test_trace_run_and_sweep_k_measure_run_under_the_block_rule(tiny_models, capsys, tmp_path):
    log = tmp_path / "log.jsonl"
    pair = ["--target", tiny_models[0], "--draft", tiny_models[1], "--temperature", "0.9", "--rule", "block"]
    code, _, err = run_cli(
        ["trace", "run", *pair, "-k", "3", "--max-new-tokens", "8", "-p", "hi", "--trace", str(log)], capsys
    )
    assert code == 0, err
    header = json.loads(log.read_text().splitlines()[0])
    assert header["manifest"]["rule"] == "block"
    out_csv = tmp_path / "measured.csv"
    # sweep-k --measure samples only where the target's generation_config asks (these models: greedy)
    models = ["--target", tiny_models[0], "--draft", tiny_models[1], "--rule", "block"]
    args = ["sweep-k", "--measure", *models, "--k", "1,2", "--batch", "1", "--max-new-tokens", "6", "--repeats", "1"]
    code, _, err = run_cli([*args, "--out", str(out_csv)], capsys)
    assert code == 0, err
    assert out_csv.read_text().count("\n") >= 3  # a header and a row per K
