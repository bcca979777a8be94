"""Prompt sets past one process: Ray actors, each holding one loaded pipeline.

The driver cuts the prompt set into chunks and keeps every actor busy with one
chunk at a time; each result comes back to the driver, which writes the same
files as a local run (in input order, see ``specd.models.run.results``). A request's
output depends only on its own random streams (seed, request id) and prompt, so
it is the same whichever actor, batch or machine ran it. If an actor dies, its
unfinished chunk goes to another actor (a replacement is started in its place):
nothing is lost, and since results are kept by request id, nothing is written twice.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from specd.errors import UsageError, shown
from specd.models.numbers import digits_only
from specd.models.run.manifest import run_manifest
from specd.models.run.pipeline import Pipeline
from specd.models.run.results import manifest_difference

CHUNK = 8  # requests per task: small enough to spread the load, large enough to batch
INSTALL_HINT = "--ray needs Ray: pip install 'specd[ray]' (make install includes it)"


def require_ray():
    if importlib.util.find_spec("ray") is None:
        raise UsageError(INSTALL_HINT)
    import ray

    return ray


JOIN_SECONDS = 6
_PROBE = """
import logging, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level=logging.ERROR)
ray.shutdown()
"""


_joined: dict[str, str] = {}  # the cluster this process joined, so a second connect is free


def connect(address: str, num_cpus: int | None = None):
    """Start a local Ray instance ("local") or join the cluster at HOST:PORT.

    Joining is tried first in a short-lived subprocess, bounded in time, because a wrong
    address can make Ray retry for minutes (and its core logs to stderr while it does).
    """
    ray = require_ray()
    if ray.is_initialized() and address in ("local", _joined.get("address")):  # checked before models load
        return ray
    if address == "local":
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        return ray
    host, sep, port = address.rpartition(":")
    if not sep or not host or not (digits_only(port, 5) and int(port) <= 65535):
        raise UsageError(f"--ray takes HOST:PORT (a running cluster's address) or nothing; got {shown(address)}")
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
    except OSError as err:
        raise UsageError(f"cannot reach a Ray cluster at {address} within 3 s: {err.strerror or err}") from None
    try:
        probe = subprocess.run(
            [sys.executable, "-c", _PROBE, address], capture_output=True, text=True, timeout=JOIN_SECONDS
        )
    except subprocess.TimeoutExpired:
        raise UsageError(f"no Ray cluster answered at {address} within {JOIN_SECONDS} s") from None
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["it refused"])[-1]
        raise UsageError(f"cannot join the Ray cluster at {address}: {last}")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    _joined["address"] = address
    return ray


class Worker:
    """What each actor runs: one pipeline, built once, generating chunk after chunk."""

    def __init__(self, options, baseline: bool, threads: int):
        torch.set_num_threads(max(1, threads))
        self.pipe = Pipeline.build(options, with_draft=not baseline)
        self.baseline = baseline

    def manifest(self) -> dict:
        return run_manifest(self.pipe, baseline=self.baseline)

    def generate(self, items, k, max_new_tokens, record_log: bool, batch_size: int | None):
        finished = []
        run = self.pipe.run(
            items,
            baseline=self.baseline,
            k=k,
            max_new_tokens=max_new_tokens,
            record_log=record_log,
            batch_size=batch_size,
            on_finish=lambda result, log: finished.append((result, log)),
        )
        return finished, run.result.stats, run.notes

    def call(self, fn, *args):
        """Run ``fn(pipeline, *args)`` here (sweep-k --measure sends its cells this way)."""
        return fn(self.pipe, *args)


@dataclass
class RayRun:
    results: list  # RequestResult per request, input order
    stats: list  # RunStats per chunk
    notes: list[str]
    actors: int
    retried_chunks: int


@dataclass(frozen=True)
class ActorPlan:
    count: int  # actors
    resources: dict  # what Ray reserves for each (num_gpus, num_cpus)
    device: str  # the --device each actor runs with

    @property
    def on_gpus(self) -> bool:
        return "num_gpus" in self.resources


def actor_plan(resources: Mapping[str, float], device: str) -> ActorPlan:
    """The actors a cluster with ``resources`` (Ray's cluster_resources) gets for ``--device``: one per
    GPU, each reserving it (Ray then shows each actor its own GPU alone, as cuda:0), unless the run
    is on the CPU; else one per CPU. Without a GPU, an actor that reserves none sees none: that is
    why a GPU actor must ask for one."""
    gpus = int(resources.get("GPU", 0))
    if gpus and device != "cpu":
        return ActorPlan(gpus, {"num_gpus": 1, "num_cpus": 1}, "cuda")
    if device.startswith("cuda"):
        raise UsageError(f"--ray with --device {device}: the cluster has no GPU (Ray counts none); use --device cpu")
    return ActorPlan(max(1, int(resources.get("CPU", 1))), {"num_cpus": 1}, "cpu")


def actors(ray, options, baseline: bool) -> tuple[Callable[[], object], list]:
    """The plan's actors (``actor_plan``), each with one thread and one pipeline on its device ->
    (a function that starts one more, the actors)."""
    plan = actor_plan(ray.cluster_resources(), options.device)
    remote = ray.remote(max_restarts=0, **plan.resources)(Worker)
    on_device = dataclasses.replace(options, device=plan.device)

    def spawn():
        return remote.remote(on_device, baseline, 1)

    return spawn, [spawn() for _ in range(plan.count)]


def check_manifests(ray, pool, manifest: dict) -> None:
    """Every actor holds the models and policies the driver's ``manifest`` names, or UsageError. The
    device may differ (a driver on a CPU, actors on their GPUs); what determines the output may not."""
    for got in ray.get([a.manifest.remote() for a in pool]):
        difference = manifest_difference(got, manifest, ignore=("device",))
        if difference is not None:
            raise UsageError(
                f"--ray: a worker loaded another {difference[0]} than the driver; same models on every node"
            )


def run_on_ray(
    ray,
    options,
    items: Sequence,
    *,
    baseline: bool,
    k: int | None,
    max_new_tokens: int | None,
    record_log: bool,
    batch_size: int | None,
    manifest: dict,
    on_finish: Callable | None = None,
    after_chunk: Callable | None = None,
) -> RayRun:
    """Generate ``items`` over the cluster; on_finish(result, log) per request, in the driver.

    ``after_chunk(busy)`` runs after each finished chunk with the actors still running one
    (tests kill an actor through it).
    Every actor must hold the same models and policies as ``manifest`` says.
    """
    spawn, pool = actors(ray, options, baseline)
    check_manifests(ray, pool, manifest)
    chunks = [list(items[i : i + CHUNK]) for i in range(0, len(items), CHUNK)]
    todo = list(range(len(chunks)))
    running: dict = {}  # object ref -> (actor, chunk index)
    done: dict[str, object] = {}
    stats, notes, retried = [], [], 0
    idle = list(pool)
    while todo or running:
        while todo and idle:
            actor = idle.pop()
            index = todo.pop(0)
            ref = actor.generate.remote(chunks[index], k, max_new_tokens, record_log, batch_size)
            running[ref] = (actor, index)
        ready, _ = ray.wait(list(running), num_returns=1)
        actor, index = running.pop(ready[0])
        try:
            finished, chunk_stats, chunk_notes = ray.get(ready[0])
        except (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError):
            retried += 1
            todo.insert(0, index)  # its requests go to another actor
            replacement = spawn()
            pool[pool.index(actor)] = replacement
            idle.append(replacement)
            continue
        idle.append(actor)
        stats.append(chunk_stats)
        notes += chunk_notes
        for result, log in finished:
            if result.request_id in done:
                continue
            done[result.request_id] = result
            if on_finish is not None:
                on_finish(result, log)
        if after_chunk is not None:
            after_chunk([a for a, _ in running.values()])
    return RayRun([done[i.request_id] for i in items], stats, notes, len(pool), retried)
