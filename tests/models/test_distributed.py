"""Prompt sets over Ray: the same files as a local run, and nothing lost when an actor dies."""

import importlib.util
import json
import time

import pytest

from specd.errors import UsageError
from tests.helpers import run_cli

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")

PROMPTS = [f"the quick brown fox {word}" for word in ("jumps", "sleeps", "runs", "waits", "hides", "eats")] * 3


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray instance for the session's Ray tests (its start takes seconds; tests/conftest.py
    gives every test that starts Ray to one worker). A README command's ``--ray`` may have started it."""
    from specd.models.run.distributed import connect

    ray = connect("local", num_cpus=2)
    yield ray
    ray.shutdown()


@pytest.fixture
def prompt_set(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p, "id": f"r{i}"}) + "\n" for i, p in enumerate(PROMPTS)))
    return path


def args(tiny_models, prompt_set, out, trace, *extra):
    return [
        "generate",
        "--target",
        tiny_models[0],
        "--draft",
        tiny_models[1],
        "--prompts-file",
        str(prompt_set),
        "--max-new-tokens",
        "16",
        "--temperature",
        "0.9",
        "-k",
        "3",  # byte-identical files need a fixed K (-k auto's schedule follows each process's timing)
        "--out",
        str(out),
        "--trace",
        str(trace),
        *extra,
    ]


def request_events(path):
    return [
        (x["request_id"], x["tokens"], x["acceptance"])
        for x in map(json.loads, path.read_text().splitlines()[1:])
        if x["type"] == "request"
    ]


@needs_ray
@pytest.mark.slow
def test_a_prompt_set_on_ray_writes_the_local_runs_results(ray_local, tiny_models, prompt_set, tmp_path, capsys):
    """The same bytes as a local run at the same K; and, the default rule being the invariant one, the
    same texts as the target alone sampling locally (the seed decides the text, wherever it runs)."""
    local = (tmp_path / "local.jsonl", tmp_path / "local-trace.jsonl")
    assert run_cli(args(tiny_models, prompt_set, *local, "--batch-size", "4"), capsys)[0] == 0
    on_ray = (tmp_path / "ray.jsonl", tmp_path / "ray-trace.jsonl")
    code, _, err = run_cli(args(tiny_models, prompt_set, *on_ray, "--ray"), capsys)
    assert code == 0, err
    assert on_ray[0].read_bytes() == local[0].read_bytes()
    assert request_events(on_ray[1]) == request_events(local[1])
    alone = (tmp_path / "alone.jsonl", tmp_path / "alone-trace.jsonl")
    baseline = args(tiny_models, prompt_set, *alone, "--baseline")
    for flag in ("-k", "--trace"):  # --baseline drafts nothing: no K, no acceptance log
        del baseline[baseline.index(flag) : baseline.index(flag) + 2]
    code, _, err = run_cli(baseline, capsys)
    assert code == 0, err
    assert texts(alone[0]) == texts(on_ray[0]) and len(texts(on_ray[0])) == len(PROMPTS)


def texts(path):
    return [x["text"] for x in map(json.loads, path.read_text().splitlines()) if x.get("type") == "result"]


@needs_ray
@pytest.mark.slow
def test_a_killed_actor_loses_nothing_and_duplicates_nothing(ray_local, tiny_models, prompt_set, tmp_path, capsys):
    from specd.models.run.distributed import run_on_ray
    from specd.models.run.manifest import run_manifest
    from specd.models.run.options import GenerateOptions
    from specd.models.run.pipeline import Pipeline
    from specd.models.run.prompts import prompt_items

    options = GenerateOptions(target=tiny_models[0], draft=tiny_models[1], max_new_tokens=16, temperature=0.9, k=3)
    pipe = Pipeline.build(options)
    items = prompt_items([], str(prompt_set))
    expected = [r.as_dict() for r in pipe.run(items).results]
    retried = 0
    for _ in range(3):  # the kill must land while the actor still works on its chunk: try again if it did not
        killed, finished = [], []

        def kill_one(busy, killed=killed):  # after the first chunk, kill an actor that is busy with another
            if not killed and busy:
                ray_local.kill(busy[0])
                killed.append(busy[0])

        out = run_on_ray(
            ray_local,
            options,
            items,
            baseline=False,
            k=None,
            max_new_tokens=None,
            record_log=False,
            batch_size=None,
            manifest=run_manifest(pipe),
            on_finish=lambda result, log, finished=finished: finished.append(result.request_id),
            after_chunk=kill_one,
        )
        assert killed
        assert sorted(finished) == sorted(i.request_id for i in items)  # each once: nothing lost, nothing twice
        assert [r.as_dict() for r in out.results] == expected
        retried = out.retried_chunks
        if retried:
            break
    assert retried >= 1  # a dead actor's chunk was run again elsewhere


@needs_ray
def test_sweep_cells_run_on_ray_actors(ray_local, tiny_models, capsys):
    code, out, err = run_cli(
        [
            "sweep-k",
            "--measure",
            "--target",
            tiny_models[0],
            "--draft",
            tiny_models[1],
            "--k",
            "1..2",
            "--batch",
            "1,2",
            "--max-new-tokens",
            "6",
            "--repeats",
            "1",
            "--ray",
            "--json",
        ],
        capsys,
    )
    doc = json.loads(out)
    assert code == 0, err
    assert len(doc["rows"]) == 6 and all(r["measured_speedup"] > 0 for r in doc["rows"])  # K = 1, 2, auto


def test_without_ray_the_flag_says_how_to_get_it(monkeypatch, tiny_models, capsys):
    import specd.models.run.distributed as distributed

    real = importlib.util.find_spec
    monkeypatch.setattr(
        distributed.importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )
    code, _, err = run_cli(["generate", "--target", tiny_models[0], "--draft", "ngram:2", "-p", "hi", "--ray"], capsys)
    assert code == 2 and err.count("\n") == 1 and "pip install 'specd[ray]'" in err


@needs_ray
@pytest.mark.parametrize("address", ["127.0.0.1:1", "not-an-address"])
def test_an_unreachable_cluster_is_one_line_within_seconds(tiny_models, capsys, address):
    t0 = time.perf_counter()
    code, _, err = run_cli(
        ["generate", "--target", tiny_models[0], "--draft", "ngram:2", "-p", "hi", "--ray", address], capsys
    )
    assert code == 2 and err.count("\n") == 1 and time.perf_counter() - t0 < 10
    assert "Ray" in err or "--ray" in err


@pytest.mark.parametrize("address", ["nohostport", "host:²", "host:" + "9" * 5000, "host:65536", "host:"])
def test_the_connect_check_refuses_a_bad_address_shape(address):
    """A port is 0..65535 in ASCII digits: '²' passes isdigit() and fails int(); a longer one fails the socket."""
    from specd.models.run.distributed import connect

    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed")
    with pytest.raises(UsageError, match="HOST:PORT"):
        connect(address)


def test_a_cluster_with_gpus_gets_one_actor_per_gpu_each_reserving_it():
    """Ray hides every GPU from an actor that reserves none: a GPU node's actors ask for one each
    and run on their own (cuda, which Ray maps to that GPU); a CPU-only run keeps one per CPU."""
    from specd.errors import UsageError
    from specd.models.run.distributed import actor_plan

    gpu_node = {"CPU": 16.0, "GPU": 2.0}
    for device in ("auto", "cuda", "cuda:1"):
        plan = actor_plan(gpu_node, device)
        assert (plan.count, plan.resources, plan.device, plan.on_gpus) == (
            2,
            {"num_gpus": 1, "num_cpus": 1},
            "cuda",
            True,
        )
    assert actor_plan(gpu_node, "cpu").resources == {"num_cpus": 1} and actor_plan(gpu_node, "cpu").count == 16
    assert actor_plan({"CPU": 4.0}, "auto") == actor_plan({"CPU": 4.0}, "cpu")
    with pytest.raises(UsageError, match="no GPU"):
        actor_plan({"CPU": 4.0}, "cuda")


def test_gpu_actors_reserve_a_gpu_each_and_run_on_cuda():
    """``actors`` on a cluster that reports two GPUs (a stand-in for Ray: its accounting is Ray's):
    two actors, each created reserving one GPU, each building its pipeline with --device cuda."""
    from specd.models.run.distributed import actors
    from specd.models.run.options import GenerateOptions

    created = []

    class FakeActorClass:
        def __init__(self, resources):
            self.resources = resources

        def remote(self, options, baseline, threads):
            created.append((self.resources, options.device, baseline, threads))
            return object()

    class FakeRay:
        def cluster_resources(self):
            return {"CPU": 8.0, "GPU": 2.0}

        def remote(self, **resources):
            return lambda cls: FakeActorClass(resources)

    spawn, pool = actors(FakeRay(), GenerateOptions(target="x", device="auto"), baseline=False)
    spawn()  # a replacement for a dead actor is made the same way
    assert len(pool) == 2 and len(created) == 3
    assert all(c == ({"max_restarts": 0, "num_gpus": 1, "num_cpus": 1}, "cuda", False, 1) for c in created)
