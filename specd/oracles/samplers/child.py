"""The sampler's own process (specd.oracles.samplers.sandbox forks it): load the sampler under test, then
answer each call, or each tree round, until specd's side closes the channel. Its replies are JSON (specd's
side never unpickles what this process writes); a copy of it the sampler forks never answers."""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
from multiprocessing.connection import Connection

import torch

from specd.errors import SamplerFailed, UsageError
from specd.oracles.lifeline import die_with_parent
from specd.oracles.samplers.protocol import as_sampler, described, load_sampler
from specd.oracles.samplers.tree_checks import round_law
from specd.oracles.samplers.tree_protocol import as_tree_sampler, load_tree_sampler


def load(spec, input_rounding: float = 0.0, tree: bool = False):
    """A shipped adapter's name or ``module:attr`` (imported), or a callable (a class is built); with
    ``tree``, under the tree-sampler protocol (specd.oracles.samplers.tree_protocol)."""
    if tree:
        return load_tree_sampler(spec) if isinstance(spec, str) else as_tree_sampler(spec)
    return load_sampler(spec) if isinstance(spec, str) else as_sampler(spec, input_rounding=input_rounding)


def serve(conn: Connection, parent: int, spec, input_rounding: float, tree: bool = False) -> None:
    """Load the sampler, then answer calls until this side closes: each reply is JSON, a list whose
    first item says what it is ("ready", "refused", "ok", "law" (a tree round's), "failed", "aborted")."""
    die_with_parent(parent)
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    os.dup2(2, 1)  # what the sampler prints goes to standard error: standard output is the report's
    sys.stdout = sys.stderr
    torch.set_num_threads(1)
    me = os.getpid()
    name = spec if isinstance(spec, str) else getattr(spec, "__qualname__", type(spec).__name__)
    try:
        sampler = load(spec, input_rounding, tree)
    except UsageError as err:  # SamplerUnloadable, SamplerUnavailable, a bad module:attr
        reply(conn, me, name, ["refused", type(err).__name__, str(err)])
        return
    except BaseException as err:  # noqa: BLE001 - loading ran the user's code
        reply(conn, me, name, ["refused", "SamplerUnloadable", f"cannot load the sampler: {described(err)}"])
        return
    rounding = getattr(sampler, "input_rounding", 0.0)
    reply(conn, me, sampler.name, ["ready", sampler.name, sampler.description, rounding])
    while True:
        try:
            tensors = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        try:
            if tree:
                law, accepted, reads, runs = round_law(sampler, tensors)
                answer = ["law", [[list(k), v] for k, v in law.items()], accepted, reads, runs]
            else:
                result = sampler(*tensors)
                rows = None if result.terminal_rows is None else result.terminal_rows.tolist()
                answer = ["ok", result.accepted, result.terminal, rows]
        except SamplerFailed as err:
            answer = ["failed", str(err), err.finding]
        except BaseException as err:  # noqa: BLE001 - e.g. a KeyboardInterrupt the sampler raised itself
            answer = ["failed", f"sampler {sampler.name} raised {described(err)}", "raised"]
        reply(conn, me, sampler.name, answer)


def reply(conn: Connection, me: int, name: str, answer: list) -> None:
    """Send ``answer``, from the child itself only: a copy the sampler forked ends here, unheard,
    and a child that has a child of its own (running, or ended and not waited for) forked."""
    if os.getpid() != me:
        os._exit(0)
    try:
        os.waitpid(-1, os.WNOHANG)
        forked = True
    except ChildProcessError:
        forked = False
    if forked:
        answer = ["aborted", f"sampler {name} forked a process (specd cannot vouch for what it does)", "forked"]
    conn.send_bytes(json.dumps(answer).encode())
