"""The unclean cases of the newer surface: an output inside a model folder named anywhere (a draft
list's element, --target, sweep-k's models, the embedded cache), integers too long to convert,
penalties past their range, a resume under another draft list, and one source spelled twice.
Every case: the exit code, one ``specd: error:`` line, no traceback, and every input (and an old
output) byte-identical after the run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli.test_bad_input import one_line, snapshot
from tests.helpers import run_cli


def tree(folder: Path) -> dict:
    """Every file under a folder (through the symlinks the test made), as snapshot() sees it."""
    return {str(p.relative_to(folder)): snapshot(p) for p in sorted(folder.rglob("*"))}


@pytest.fixture
def models(tmp_path, tiny_models, monkeypatch):
    """The tiny pair as ./T and ./D (symlinks: the rule must see through them), a prompts file and an
    old results file, in a working folder."""
    monkeypatch.chdir(tmp_path)
    os.symlink(tiny_models[0], tmp_path / "T")
    os.symlink(tiny_models[1], tmp_path / "D")
    (tmp_path / "p.jsonl").write_text('{"prompt": "hello world"}\n')
    (tmp_path / "old.jsonl").write_text("an old output\n")
    return tmp_path


def everything(folder: Path, tiny_models) -> dict:
    return {"work": tree(folder), "T": tree(Path(tiny_models[0])), "D": tree(Path(tiny_models[1]))}


GENERATE = ["--target", "T", "--prompts-file", "p.jsonl", "--max-new-tokens", "4"]
INSIDE_A_MODEL = [
    # (command, words the one line must hold)
    (["generate", *GENERATE, "--draft", "suffix,D", "--out", "D/config.json"], "--draft (its source D)"),
    (["generate", *GENERATE, "--draft", "ngram:2,D", "--out", "D/config.json"], "model folder's config.json"),
    (["generate", *GENERATE, "--draft", "suffix,D", "--trace", "D/tokenizer.json"], "model folder's tokenizer.json"),
    (["generate", *GENERATE, "--draft", "suffix,./D", "--out", "D/new-results.jsonl"], "the model folder of --draft"),
    (["generate", *GENERATE, "--draft", "suffix", "--out", "T/new-results.jsonl"], "the model folder of --target"),
    (["generate", *GENERATE, "--draft", "D", "--trace", "./D/./log.jsonl"], "inside"),
    (["trace", "run", *GENERATE, "--draft", "suffix,D", "--trace", "D/config.json"], "--draft (its source D)"),
    (["sweep-k", "--measure", "--target", "T", "--draft", "suffix", "--out", "T/config.json"], "--target"),
    (["sweep-k", "--measure", "--target", "T", "--draft", "D", "--out", "D/config.json"], "--draft"),
    (["sweep-k", "--measure", "--target", "T", "--draft", "ngram:2,D", "--plot", "D/speedup.png"], "--draft"),
    (["sweep-k", "--measure", "--target", "T", "--out", "T/results.csv"], "the model folder of --target"),
]


@pytest.mark.parametrize("args,message", INSIDE_A_MODEL)
def test_no_output_inside_a_model_folder_of_any_command(models, tiny_models, capsys, args, message):
    before = everything(models, tiny_models)
    code, out, err = run_cli(args, capsys)
    one_line(code, err)
    assert message in err and out == "", err
    assert everything(models, tiny_models) == before


def test_no_output_inside_the_embedded_models_cache(models, tiny_models, capsys, specd_cache_dir):
    """The embedded target's folders in specd's cache are model folders too (the converted copy, the
    assembled GGUF), and so are the packages its GGUF comes from: a results file there is refused,
    with or without --target embedded:NAME."""
    from specd.models.run.embedded import EMBEDDED

    for name, extra in (("smollm2-135m", []), ("gemma-3-270m", ["--target", "embedded:gemma-3-270m"])):
        for folder in EMBEDDED[name].cache_folders():
            folder.mkdir(parents=True, exist_ok=True)
            out = folder / "results.jsonl"
            code, _, err = run_cli(["generate", *extra, "-p", "hi", "--draft", "suffix", "--out", str(out)], capsys)
            one_line(code, err)
            assert f"the model folder of --target embedded:{name} (specd's cache {folder.name})" in err
            assert not out.exists()
        # and the installed packages its GGUF is read from: never written over, nor into
        packages = EMBEDDED[name].package_folders()
        assert packages, f"{name}'s packages are installed by make install"
        for package, folder in packages.items():  # a new file inside (never risk the model's own files here)
            out = folder / "results.jsonl"
            code, _, err = run_cli(["generate", *extra, "-p", "hi", "--draft", "suffix", "--out", str(out)], capsys)
            one_line(code, err)
            assert f"the model folder of --target embedded:{name} (its package {package})" in err, err
            assert not out.exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--draft", "ngram:" + "9" * 5000], "a number of 5000 digits is out of range"),
        (["--draft", "suffix,self:vocab=" + "1" * 5000], "out of range"),
        (["--draft", "self:layers=" + "7" * 5000], "out of range"),
        (["--draft", "ngram:" + "0" * 5000 + "3,suffix", "--out", "old.jsonl"], None),  # 3, spelled long
        (["-k", "4" * 5000], "-k: a number of 5000 digits is out of range"),
        (["--presence-penalty", "1e39"], "--presence-penalty must be in [-2, 2]"),
        (["--frequency-penalty", "1e39"], "--frequency-penalty must be in [-2, 2]"),
        (["--frequency-penalty", "-2.5"], "--frequency-penalty must be in [-2, 2]"),
        (["--draft", "self:bf16,self:bfloat16"], "'self:bfloat16' is named twice ('self:bf16' is the same source)"),
        (["--draft", "ngram:2,ngram:02"], "'ngram:02' is named twice ('ngram:2' is the same source)"),
        (["--draft", "D,./D"], "'./D' is named twice ('D' is the same source)"),
        (["--draft", "suffix,suffix"], "'suffix' is named twice"),
        # issue 50: a name too long for any path is bad input (exit 2), not a failed run (exit 1)
        (["--draft", "x" * 10000], "--draft 'xxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxx' (10000 characters) is too long"),
        (["--draft", "suffix," + "x" * 300], "--draft 'xxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxx' (300 characters)"),
        (["--target", "x" * 10000], "--target 'xxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxx' (10000 characters) is too long"),
        (["--draft", "suffix", "--out", "x" * 10000], "results file 'xxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxx'"),
        (["--draft", "suffix", "--trace", "d/" + "x" * 300], "acceptance log 'd/xxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxx'"),
        (["--prompts-file", "x" * 10000], "prompts file 'xxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxx' (10000 characters)"),
    ],
)
def test_values_a_user_can_type_are_one_line_never_an_internal_error(models, tiny_models, capsys, args, message):
    before = everything(models, tiny_models)
    code, out, err = run_cli(["generate", *GENERATE, "--temperature", "0.7", *args], capsys)
    if message is None:  # a long spelling of a small number is that number
        assert code == 0, err
        return
    one_line(code, err)
    assert message in err and "internal error" not in err and out == "", err
    assert everything(models, tiny_models) == before


@pytest.mark.parametrize("penalty", ["-2", "-0.5", "2"])
def test_penalties_take_vllms_range(models, capsys, penalty):
    """vLLM and the OpenAI API take presence and frequency penalties in [-2, 2]; so does specd."""
    args = ["generate", *GENERATE, "--draft", "suffix", "--temperature", "0.8", "--json"]
    code, out, err = run_cli([*args, "--presence-penalty", penalty, "--frequency-penalty", penalty], capsys)
    assert code == 0, err
    policy = json.dumps(json.loads(out)["manifest"]["target_policy"])
    assert f'"presence": {float(penalty)}' in policy and f'"frequency": {float(penalty)}' in policy, policy


def test_resume_under_another_draft_list_is_refused_naming_the_field(models, tiny_models, capsys):
    """Under the maximal rule the drafts decide the sampled text: a results file written with one draft
    list cannot be resumed with another (``draft_sources``), and the file is left as it was."""
    common = ["generate", *GENERATE, "--temperature", "0.8", "--rule", "maximal", "--out", "r.jsonl"]
    code, _, err = run_cli([*common, "--draft", "ngram:1"], capsys)
    assert code == 0, err
    before = everything(models, tiny_models)
    code, _, err = run_cli([*common, "--draft", "ngram:1,suffix:run", "--resume"], capsys)
    one_line(code, err)
    assert "its draft_sources is" in err and everything(models, tiny_models) == before
    code, _, err = run_cli([*common, "--draft", "ngram:1", "--resume"], capsys)  # the same list resumes
    assert code == 0, err


def test_resume_accepts_another_spelling_of_the_same_draft_list(models, tiny_models, capsys):
    common = ["generate", *GENERATE, "--temperature", "0.8", "-k", "2", "--out", "r.jsonl"]
    code, _, err = run_cli([*common, "--draft", f"ngram:2,{tiny_models[1]}"], capsys)
    assert code == 0, err
    code, _, err = run_cli([*common, "--draft", "ngram:02,./D", "--resume"], capsys)
    assert code == 0, err


def test_no_output_inside_a_hub_models_cached_snapshot(models, tiny_models, capsys, monkeypatch):
    """A hub id is read from its snapshot in the Hugging Face cache: that folder is a model folder too."""
    import shutil

    from huggingface_hub import constants

    hub = models / "hub"
    snapshot = hub / "models--someone--tiny" / "snapshots" / "0123abc"
    shutil.copytree(tiny_models[1], snapshot)
    (hub / "models--someone--tiny" / "refs").mkdir()
    (hub / "models--someone--tiny" / "refs" / "main").write_text("0123abc")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    before = tree(hub)
    for out, message in (
        (snapshot / "config.json", "--draft (its source someone/tiny) (the model folder's config.json)"),
        (snapshot / "new.jsonl", "the model folder of --draft (its source someone/tiny)"),
    ):
        code, _, err = run_cli(["generate", *GENERATE, "--draft", "suffix,someone/tiny", "--out", str(out)], capsys)
        one_line(code, err)
        assert message in err, err
    assert tree(hub) == before


# -- issue 61: the tree and llama.cpp surface -------------------------------------------------------------
@pytest.fixture
def hostile(models, tmp_path_factory):
    """Files a user may hand the tree options by mistake or on purpose: a choices file whose rank has
    5000 digits, a row-costs file keyed by a superscript digit; and, outside the working folder (it is
    never read, not even by the snapshot), a 3 GiB sparse file."""
    (models / "digits.json").write_text("[[0], [1" + "0" * 5000 + "]]")
    (models / "rc.json").write_text('{"schema": "specd.row-costs/v1", "target": {"1": 1.0, "²": 2.0}}')
    huge = tmp_path_factory.mktemp("huge") / "huge.json"
    with open(huge, "wb") as fh:
        fh.truncate(3 << 30)
    return huge


TREE_INPUTS = [
    # (command, words the one line must hold): each refused before any model loads or any node is built
    (["generate", *GENERATE, "--tree", "²,2"], "--tree '²,2': '²' is not a digit here"),
    (["generate", *GENERATE, "--tree", "1000,1000,1000"], "--tree '1000,1000,1000': 1001001000 nodes"),
    (["generate", *GENERATE, "--tree", "digits.json"], "a number with too many digits"),
    (["generate", *GENERATE, "--tree", "HUGE"], "larger than 1 MiB"),
    (["trace", "run", *GENERATE, "--tree", "nodes=²", "--trace", "t.jsonl"], "--tree 'nodes=²': expected nodes=N"),
    (["verify-oracle", "--tree", "²"], "--tree '²': '²' is not a digit here"),
    (["verify-oracle", "--tree", "1000,1000,1000"], "1001001000 nodes"),
    (["verify-oracle", "--sampler", "specd", "--tree", "1000,1000,1000"], "1001001000 nodes"),
    (["sweep-k", "--tree", "1000,1000,1000"], "1001001000 nodes"),
    (["sweep-k", "--tree", "HUGE"], "larger than 1 MiB"),
    (["sweep-k", "--row-costs", "rc.json"], "row count '²' is not a whole number"),
    (["sweep-k", "--k", "1.." + "9" * 5000], "--k takes values in 1..256"),
    (["sweep-k", "--batch", "٣"], "--batch takes a range like 1..8"),
    (["generate", *GENERATE, "--device-map", "auto", "--max-memory", "²=1GiB"], "--max-memory takes DEVICE=SIZE"),
    (["generate", *GENERATE, "--device-map", "auto", "--max-memory", "0=٣GiB"], "is not a size like 512MiB"),
]


@pytest.mark.parametrize("args,message", TREE_INPUTS, ids=[" ".join(a)[-40:] for a, _ in TREE_INPUTS])
def test_a_tree_or_number_a_user_can_type_is_one_line(models, hostile, tiny_models, capsys, args, message):
    before = everything(models, tiny_models)
    code, out, err = run_cli([str(hostile) if a == "HUGE" else a for a in args], capsys)
    one_line(code, err)
    assert message in err and "internal error" not in err and out == "", err
    assert everything(models, tiny_models) == before


CHOICES_AS_OUTPUT = [
    # an EAGLE choices file is an input: no output may name it, however it is spelled
    (["generate", *GENERATE, "--tree", "c.json", "--out", "c.json"], "--out c.json is the same file as --tree c.json"),
    (["generate", *GENERATE, "--tree", "rank:./c.json", "--trace", "link.json"], "same file as --tree"),
    (["generate", *GENERATE, "--config", "tree.yaml", "--out", "./c.json"], "same file as --tree"),
    (["trace", "run", *GENERATE, "--tree", "c.json", "--trace", "c.json"], "same file as --tree c.json"),
    (["sweep-k", "--tree", "c.json", "--out", "c.json"], "--out c.json is the same file as --tree c.json"),
    (["sweep-k", "--tree", "2", "--tree", "iid:link.json", "--plot", "c.json"], "same file as --tree (#2)"),
]


@pytest.mark.parametrize("args,message", CHOICES_AS_OUTPUT, ids=[" ".join(a[-4:]) for a, _ in CHOICES_AS_OUTPUT])
def test_no_output_names_the_tree_choices_file(models, tiny_models, capsys, args, message):
    (models / "c.json").write_text("[[0], [1], [0, 0]]\n")
    os.symlink(models / "c.json", models / "link.json")
    (models / "tree.yaml").write_text("tree: c.json\n")
    before = everything(models, tiny_models)
    code, out, err = run_cli(args, capsys)
    one_line(code, err)
    assert message in err and out == "", err
    assert everything(models, tiny_models) == before


def test_from_python_no_output_names_the_tree_choices_file(models, tiny_models):
    import specd

    (models / "c.json").write_text("[[0], [1], [0, 0]]\n")
    pair = specd.Pair.load(tiny_models[0], tiny_models[1], max_new_tokens=2)
    with pytest.raises(specd.UsageError, match="out c.json is the same file as --tree c.json"):
        pair.generate("hi", tree="c.json", out="c.json")
    assert (models / "c.json").read_text() == "[[0], [1], [0, 0]]\n"


def test_resume_under_another_tree_is_refused_and_the_same_shape_resumes(models, tiny_models, capsys):
    """Under the maximal rule the tree decides the sampled text: a file of --tree 2,1's results cannot be
    resumed with --tree 3 (it would hold texts of two runs), nor without a tree, nor with another node
    budget for --tree auto; the same shape from a choices file resumes."""
    (models / "p.jsonl").write_text('{"prompt": "a b"}\n{"prompt": "c d"}\n{"prompt": "e f"}\n')
    (models / "c.json").write_text("[[0], [1], [0, 0], [1, 0]]\n")
    common = ["generate", *GENERATE, "--temperature", "0.8", "--rule", "maximal", "--seed", "3", "--out", "r.jsonl"]
    code, _, err = run_cli([*common, "--tree", "2,1"], capsys)
    assert code == 0, err
    manifest = json.loads((models / "r.jsonl").read_text().splitlines()[0])["manifest"]
    assert manifest["tree"] == {"spec": "2,1", "drawn": None, "choices": [[0], [1], [0, 0], [1, 0]]}
    assert manifest["tree_budget"] is None
    before = everything(models, tiny_models)
    for other, words in (
        (["--tree", "3"], 'its tree is "2,1" (4 nodes), this run\'s is "3" (3 nodes)'),
        (["--tree", "rank:2,1"], "its tree is"),
        ([], "this run's is null"),
    ):
        code, _, err = run_cli([*common, *other, "--resume"], capsys)
        one_line(code, err)
        assert words in err and everything(models, tiny_models) == before, err
    code, _, err = run_cli([*common, "--tree", "c.json", "--resume"], capsys)
    assert code == 0 and "3 were already complete" in err, err
    auto = [*common[:-1], "auto.jsonl", "--tree", "auto"]
    code, _, err = run_cli([*auto, "--tree-budget", "4"], capsys)
    assert code == 0, err
    code, _, err = run_cli([*auto, "--tree-budget", "8", "--resume"], capsys)
    one_line(code, err)
    assert "its tree_budget is 4, this run's is 8" in err


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--tree", "2,2", "--baseline"], "--tree needs a draft: target-only decoding (--baseline) drafts nothing"),
        (["--tree", "auto", "--baseline"], "--tree needs a draft"),
        (["--tree", "2,2", "--k-max", "4"], "--k-max bounds -k auto's K; --tree 2,2 fixes each round's depth"),
        (["--tree", "nodes=8", "--config", "kmax.yaml"], "kmax.yaml: k_max bounds -k auto's K; --tree nodes=8"),
    ],
)
def test_a_tree_flag_the_run_would_ignore_is_refused(models, tiny_models, capsys, extra, message):
    (models / "kmax.yaml").write_text("k_max: 4\n")
    before = everything(models, tiny_models)
    code, out, err = run_cli(["generate", *GENERATE, *extra], capsys)
    one_line(code, err)
    assert message in err and out == "", err
    assert everything(models, tiny_models) == before


def test_tree_auto_takes_k_max_and_python_refuses_what_the_command_line_does(models, tiny_models, capsys):
    """--tree auto is -k auto choosing shapes, which --k-max bounds; from Python, a tree with baseline=True
    or beside k_max is the same refusal (naming the keyword's flag)."""
    import specd

    code, _, err = run_cli(["generate", *GENERATE, "--tree", "auto", "--k-max", "4"], capsys)
    assert code == 0, err
    pair = specd.Pair.load(tiny_models[0], tiny_models[1], max_new_tokens=2)
    for call, words in (
        (lambda: pair.generate("hi", tree="2,2", baseline=True), r"--tree needs a draft: .*\(baseline=True\)"),
        (lambda: pair.stream("hi", tree="2,2", baseline=True), r"--tree needs a draft"),
        (lambda: pair.generate("hi", tree="2,2", k_max=4), r"--k-max bounds -k auto's K; --tree 2,2"),
        (lambda: pair.generate("hi", tree="²,2"), r"--tree '²,2': '²' is not a digit here"),
        (lambda: pair.generate("hi", tree="1000,1000,1000"), r"1001001000 nodes"),
        (lambda: pair.generate("hi", tree=5), r"--tree must be a string, got 5"),
        (lambda: specd.Pair.load(tiny_models[0], tiny_models[1], tree="2,2", k_max=4), r"--k-max bounds"),
    ):
        with pytest.raises(specd.UsageError, match=words):
            call()
    assert pair.generate("hi", baseline=True).mode == "target-only"  # the pair's own options stay usable


def test_resume_compares_the_k_schedules_replayed_not_the_files_name(models, tiny_models, capsys):
    """--k-schedule decides every round's K (and so the sampled text under the maximal rule): a resume
    replaying other schedules is refused, the same schedules from another spelling of the path resume."""
    (models / "p.jsonl").write_text('{"prompt": "a b"}\n{"prompt": "c d"}\n')
    common = ["generate", *GENERATE, "--temperature", "0.8", "--rule", "maximal"]
    code, _, err = run_cli([*common, "--out", "rec.jsonl"], capsys)
    assert code == 0, err
    lines = (models / "rec.jsonl").read_text().splitlines()
    other = [lines[0]]
    for line in lines[1:]:
        record = json.loads(line)
        record["acceptance"]["k_schedule"] = [1] * len(record["acceptance"]["k_schedule"])
        other.append(json.dumps(record))
    (models / "other.jsonl").write_text("\n".join(other) + "\n")
    code, _, err = run_cli([*common, "--k-schedule", "rec.jsonl", "--out", "r.jsonl"], capsys)
    assert code == 0, err
    code, _, err = run_cli([*common, "--k-schedule", "./rec.jsonl", "--out", "r.jsonl", "--resume"], capsys)
    assert code == 0, err
    before = everything(models, tiny_models)
    code, _, err = run_cli([*common, "--k-schedule", "other.jsonl", "--out", "r.jsonl", "--resume"], capsys)
    one_line(code, err)
    assert 'its k_schedule is "rec.jsonl" (schedules ' in err and everything(models, tiny_models) == before
