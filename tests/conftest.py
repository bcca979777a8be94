"""Shared fixtures. Every test runs offline and with a temporary specd cache, so the
embedded model is converted into a folder of this test session, never into ~/.cache.

``make test`` runs the suite on every core (pytest-xdist): each worker then runs torch on one
thread (two processes of two threads each on two cores collapse) and the oracle on one process
(its own forks would only repeat its memoized work while the other workers hold the cores;
tests/oracles/test_parallel.py runs the forked path on purpose), the workers share one
specd cache (the embedded models are converted once, under specd's own lock), and the
longest tests start first, shared among the workers, so no worker is left with one of them at
the end; the tests that start Ray run on one worker, which starts it once and ends it after the
last; and after collection the cyclic collector leaves the session's own objects alone and runs
less often."""

import gc
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if WORKER:
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # and in every process a test starts
        os.environ[name] = "1"
    import torch

    torch.set_num_threads(1)

# The longest tests (minutes) first, then every other test marked slow, then the rest; with n
# workers the ranked list is dealt like cards (worker i's share is every n-th test from the i-th),
# because ``--dist worksteal`` gives each worker one contiguous share to start with and balances
# only the tails: each worker starts with its share of the longest tests. The first two convert
# the two embedded models (SmolLM2 about 7 s, Gemma about 17 s, each under its own lock) side by
# side: the README groups all run SmolLM2, and a second one first would wait for the first's copy.
LONGEST = (  # measured on the 2-core machine: 38, 34, 46, 24 and 26 s
    "tests/test_readme.py::test_every_readme_command_runs_as_written[readme-generate]",
    "tests/models/test_embedded.py::test_embedded_gemma_greedy_is_hugging_faces",
    "tests/test_readme.py::test_every_readme_command_runs_as_written[choosing-k-prompt-sets-oracle]",
    "tests/test_readme.py::test_every_readme_command_runs_as_written[traces-sweep-k]",
    "tests/test_python_docs.py::test_every_python_example_runs_as_written",
)


# The README group whose commands run --ray: Ray, started in a worker, stays up there; every test that
# starts Ray (the ray_local fixture) is dealt to that worker, where it finds Ray running.
RAY_GROUP = "tests/test_readme.py::test_every_readme_command_runs_as_written[choosing-k-prompt-sets-oracle]"


def starts_ray(item) -> bool:
    return item.nodeid == RAY_GROUP or "ray_local" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config, items):
    def rank(item):
        if item.nodeid in LONGEST:
            return LONGEST.index(item.nodeid)
        return len(LONGEST) + (0 if item.get_closest_marker("slow") else 1)

    ranked = sorted(items, key=rank)  # stable: within a rank, the collection order
    n = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    shares = [ranked[i::n] for i in range(n)]
    home = next((i for i, share in enumerate(shares) if any(item.nodeid == RAY_GROUP for item in share)), 0)
    for i, share in enumerate(shares):  # a Ray test of another share swaps places with one of the Ray share's
        for j, item in enumerate(share):
            if i != home and starts_ray(item):
                m = next((m for m in range(j, len(shares[home])) if not starts_ray(shares[home][m])), None)
                if m is not None:
                    share[j], shares[home][m] = shares[home][m], item
    items[:] = [item for share in shares for item in share]
    config.stash[RAY_TESTS] = sum(starts_ray(item) for item in items)


RAY_TESTS = pytest.StashKey[int]()  # the session's tests that start Ray
_ray_tests_run = [0]  # of them, those this process has run


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """Ray ended once this process has run every test that starts it: its daemons and idle workers
    would otherwise hold a share of a core for the rest of the session (about 4% of one, on a suite
    that keeps both cores busy). Where another process ran one of them (a test taken by another worker)
    Ray stays up here until the session ends, as the fixture's teardown ends it."""
    if not starts_ray(item):
        return
    _ray_tests_run[0] += 1
    if _ray_tests_run[0] == item.config.stash.get(RAY_TESTS, -1):
        import sys

        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            ray.shutdown()


def pytest_collection_finish(session):
    """The modules the session imported (torch, transformers, pandas, every test module: millions of
    objects) are frozen out of the cyclic collector, and it runs less often: its full collections walked
    them all again and again, about 8% of a worker's time. The cycles that the tests make are still
    collected; the oracle pauses the collector on its own, as it does for a user."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


@pytest.fixture(scope="session", autouse=True)
def oracle_on_one_process():
    """Under xdist, the oracle's default is one process (the module docstring says why)."""
    if not WORKER:
        yield
        return
    from specd.oracles import parallel

    default = parallel.usable_cores
    parallel.usable_cores = lambda: 1
    yield
    parallel.usable_cores = default


@pytest.fixture(scope="session", autouse=True)
def specd_cache_dir(tmp_path_factory):
    """SPECD_CACHE_DIR for the whole session: a temporary folder (one for all of a run's workers)."""
    if WORKER:
        folder = tmp_path_factory.getbasetemp().parent / "specd-cache"
        folder.mkdir(exist_ok=True)
    else:
        folder = tmp_path_factory.mktemp("specd-cache")
    previous = os.environ.get("SPECD_CACHE_DIR")
    os.environ["SPECD_CACHE_DIR"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("SPECD_CACHE_DIR", None)
    else:
        os.environ["SPECD_CACHE_DIR"] = previous


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """(target folder, draft folder): tiny random-weight Llamas sharing a trained tokenizer."""
    from tests.hf_helpers import save_tiny_pair

    target, draft = save_tiny_pair(tmp_path_factory.mktemp("tiny"), noise=0.15)
    return str(target), str(draft)


@pytest.fixture(scope="session")
def hf_pair():
    """(target, draft) HFCausalLM: a 64-token tiny Llama and a noisy copy of it."""
    from specd.models.hf.model import HFCausalLM
    from tests.hf_helpers import noisy_copy, tiny_llama

    target = tiny_llama(64, seed=0)
    return HFCausalLM(target, "target"), HFCausalLM(noisy_copy(target, 0.25, seed=1), "draft")
