"""--generation-config: Hugging Face's defaults from generation_config.json, resolved as generate()
resolves them, and the joint specd samples equals the one generate() samples."""

import json
import shutil

import pytest
import torch

from specd.models.run.options import GenerateOptions
from specd.models.run.pipeline import Pipeline
from specd.models.run.prompts import PromptItem
from specd.oracles.engine.montecarlo import bernstein_bound
from tests.helpers import run_cli

SAMPLING = {"do_sample": True, "temperature": 0.7, "top_p": 0.9, "repetition_penalty": 1.3}  # top_k unset: 50
HORIZON = 2
PROMPT = "the quick brown"


@pytest.fixture()
def folder(tiny_models, tmp_path):
    """A copy of the tiny target whose generation_config.json asks for sampling."""
    target = tmp_path / "target"
    shutil.copytree(tiny_models[0], target)
    return target


def write_config(folder, values):
    path = folder / "generation_config.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**config, **values}))
    return path


def hf_joint(model, prompt: list[int], eos: int | None) -> dict:
    """The joint generate() samples with no arguments: its own processors over every prefix, float64."""
    config, _ = model._prepare_generation_config(None)
    assert config.do_sample and config.top_k == 50  # Hugging Face's own default when the file has none
    processors = model._get_logits_processor(config, input_ids_seq_length=len(prompt), device="cpu")
    joint = {(): 1.0}
    for _ in range(HORIZON):
        grown = {}
        for prefix, mass in joint.items():
            if prefix and prefix[-1] == eos:
                grown[prefix] = grown.get(prefix, 0.0) + mass
                continue
            ids = torch.tensor([prompt + list(prefix)])
            with torch.no_grad():
                scores = processors(ids, model(input_ids=ids).logits[:, -1].float())
            probs = torch.softmax(scores.double(), dim=-1)[0]
            for x in probs.nonzero().flatten().tolist():
                grown[prefix + (x,)] = mass * probs[x].item()
        joint = grown
    return joint


def specd_joint(pipe: Pipeline, prompt: tuple[int, ...], eos: int | None) -> dict:
    """The target chain under specd's resolved policy, float64."""
    policy = pipe.target_policy
    joint = {(): 1.0}
    for _ in range(HORIZON):
        grown = {}
        for prefix, mass in joint.items():
            if prefix and prefix[-1] == eos:
                grown[prefix] = grown.get(prefix, 0.0) + mass
                continue
            ids = torch.tensor([list(prompt + prefix)])
            with torch.no_grad():
                raw = pipe.target.model(input_ids=ids).logits[:, -1, : pipe.target.vocab_size].float()
            state = policy.initial_state(prompt)
            for t in prefix:
                state = state.advance(t)
            probs = policy.probabilities(raw, [state], dtype=torch.float64)[0]
            for x in probs.nonzero().flatten().tolist():
                grown[prefix + (x,)] = mass * probs[x].item()
        joint = grown
    return joint


def test_sampling_defaults_come_from_the_file_as_generate_resolves_them(folder, tiny_models):
    path = write_config(folder, SAMPLING)
    pipe = Pipeline.build(GenerateOptions(target=str(folder), draft=tiny_models[1], max_new_tokens=HORIZON))
    target = pipe.sampling["target"]
    assert target["temperature"].value == 0.7 and target["temperature"].source == str(path)
    assert target["top_k"].value == 50 and target["top_k"].source == "Hugging Face default"
    assert target["top_p"].value == 0.9 and target["repetition_penalty"].value == 1.3
    assert pipe.sampling["draft"]["top_k"].value == 50  # the draft follows the target
    prompt = pipe.encode(PromptItem("p", PROMPT))
    eos = pipe.tokenizer.eos_token_id
    reference = hf_joint(pipe.target.model, list(prompt), eos)
    ours = specd_joint(pipe, prompt, eos)
    assert set(ours) == set(reference)
    assert max(abs(ours[s] - reference[s]) for s in reference) <= 1e-6  # float32 logits, float64 rows
    # Seeded samples of `specd generate` (speculative, -k auto) with no sampling flags: every
    # sequence's frequency within its Bernstein bound around generate()'s probability.
    n = 1500
    run = pipe.run([PromptItem(f"s{i}", PROMPT) for i in range(n)], record_log=False)
    counts: dict = {}
    for r in run.results:
        counts[r.tokens[:HORIZON]] = counts.get(r.tokens[:HORIZON], 0) + 1
    assert set(counts) <= set(reference)  # nothing outside top-50 / top-p / the file's policy
    for seq, p in reference.items():
        assert abs(counts.get(seq, 0) / n - p) <= bernstein_bound(p, n, len(reference)), seq


def test_greedy_when_the_file_says_greedy_is_generates_greedy(folder, tiny_models, capsys):
    write_config(folder, {"do_sample": False, "repetition_penalty": 1.3})
    code, out, err = run_cli(
        ["generate", "--target", str(folder), "--draft", tiny_models[1], "-p", PROMPT]
        + ["--max-new-tokens", "24", "--json"],
        capsys,
    )
    assert code == 0, err
    doc = json.loads(out)
    pipe = Pipeline.build(GenerateOptions(target=str(folder)), with_draft=False)
    ids = list(pipe.encode(PromptItem("p", PROMPT)))
    x = torch.tensor([ids])
    with torch.no_grad():
        hf = pipe.target.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=24)
    assert doc["results"][0]["tokens"] == hf[0, len(ids) :].tolist()
    sampling = doc["manifest"]["sampling"]["target"]
    assert sampling["temperature"]["value"] == 0 and "do_sample false" in sampling["temperature"]["source"]
    assert sampling["repetition_penalty"]["value"] == 1.3


def test_flags_win_and_none_ignores_the_file(folder, tiny_models):
    write_config(folder, SAMPLING)
    opts = GenerateOptions(target=str(folder), draft=tiny_models[1], temperature=0.5, top_k=0)
    target = Pipeline.build(opts).sampling["target"]
    assert (target["temperature"].value, target["temperature"].source) == (0.5, "flag")
    assert (target["top_k"].value, target["top_k"].source) == (None, "flag")  # --top-k 0: off
    assert target["top_p"].value == 0.9  # still the file's
    none = Pipeline.build(GenerateOptions(target=str(folder), draft=tiny_models[1], generation_config="none"))
    assert none.target_policy.greedy and not none.target_policy.processors
    assert all(s.source == "specd default" for s in none.sampling["target"].values())


@pytest.mark.parametrize(
    "content,message",
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"top_k": "five"}', "top_k = 'five' is not a valid value"),
        ('{"temperature": -1}', "temperature = -1"),
    ],
)
def test_a_broken_generation_config_is_one_line_naming_the_file(folder, tiny_models, capsys, content, message):
    (folder / "generation_config.json").write_text(content)
    args = ["generate", "--target", str(folder), "--draft", tiny_models[1], "-p", "hi", "--max-new-tokens", "4"]
    code, _, err = run_cli(args, capsys)
    assert code == 2 and err.count("\n") == 1 and "generation_config.json" in err and message in err, err
    code, _, err = run_cli([*args, "--generation-config", "none"], capsys)  # not read at all
    assert code == 0, err


def test_an_unreadable_generation_config_is_one_line(folder, tiny_models, capsys):
    path = folder / "generation_config.json"
    path.unlink()
    path.mkdir()  # unreadable even as root, where chmod 0 is not
    code, _, err = run_cli(["generate", "--target", str(folder), "--draft", tiny_models[1], "-p", "hi"], capsys)
    assert code == 2 and err.count("\n") == 1 and "generation_config.json" in err, err


def test_the_summary_names_each_value_and_its_source(folder, tiny_models, capsys, tmp_path):
    write_config(folder, SAMPLING)
    config = tmp_path / "run.yaml"
    config.write_text("top_p: 0.8\n")
    args = ["generate", "--target", str(folder), "--draft", tiny_models[1], "-p", PROMPT, "--max-new-tokens", "3"]
    code, out, err = run_cli([*args, "--config", str(config), "--top-k", "7", "--seed", "1"], capsys)
    assert code == 0, err
    table = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") == 4}
    assert "0.7 (generation_config.json)" in table["temperature"]  # the file's
    assert "7 (flag)" in table["top_k"]
    assert f"0.8 ({config})" in table["top_p"]  # the YAML config beats the file
    assert "1.3 (generation_config.json)" in table["repetition_penalty"]
    assert "(as the target)" in table["temperature"]
    assert "generation_config.json sets do_sample=True, temperature=0.7, top_p=0.9" in out
    code, out, err = run_cli([*args, "--generation-config", "none"], capsys)
    assert code == 0 and "generation config not read" in out and "greedy (specd default)" in out, out


def test_bad_generation_config_mode_is_refused(tiny_models, capsys):
    code, _, err = run_cli(["generate", "--target", tiny_models[0], "--generation-config", "maybe", "-p", "x"], capsys)
    assert code == 2 and "--generation-config takes auto or none" in err


@pytest.mark.parametrize(
    "values,sampled,refused",
    [
        ({"do_sample": True, "min_p": 0.1}, True, "min_p = 0.1"),
        ({"do_sample": True, "typical_p": 0.9}, True, "typical_p = 0.9"),
        ({"do_sample": True, "epsilon_cutoff": 0.001}, True, "epsilon_cutoff"),
        ({"no_repeat_ngram_size": 3}, False, "no_repeat_ngram_size = 3"),
        ({"bad_words_ids": [[5]]}, False, "bad_words_ids"),
        ({"num_beams": 4}, False, "num_beams = 4"),
        ({"do_sample": False, "min_p": 0.1}, False, None),  # sampling-only key, greedy run: generate() skips it
        ({"do_sample": True, "typical_p": 1.0, "no_repeat_ngram_size": 0, "min_p": None}, True, None),  # neutral
    ],
)
def test_a_key_generate_would_apply_and_specd_cannot_is_refused_by_name(
    folder, tiny_models, capsys, values, sampled, refused
):
    write_config(folder, values)
    args = ["generate", "--target", str(folder), "--draft", tiny_models[1], "-p", "hi", "--max-new-tokens", "4"]
    code, _, err = run_cli(args, capsys)
    if refused is None:
        assert code == 0, err
    else:
        assert code == 2 and err.count("\n") == 1 and refused in err and "--generation-config none" in err, err
        assert run_cli([*args, "--generation-config", "none"], capsys)[0] == 0
    if not sampled and refused is None:  # with sampling asked for, the sampling-only key acts: refused
        code, _, err = run_cli([*args, "--temperature", "0.7"], capsys)
        assert code == 2 and "min_p" in err
