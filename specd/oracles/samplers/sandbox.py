"""The sampler under test in a child process of its own (``verify-oracle --sampler``,
``specd.check_sampler``): whatever it does there, this process's report and exit code stay its own.

A call that ends the child (``os._exit``, a crash), forks it, or does not return within the
time limit (``--sampler-timeout``) is ``SamplerAborted``: the check it was in fails naming what
it did (``exited``, ``crashed``, ``forked``, ``timed_out``), and nothing more is asked of it.
The child's standard output is its standard error, so the report is all standard output holds.

The child is forked: it inherits the sampler (nothing of it is pickled), loads it there (the
import of ``module:attr``, or building a class, runs the user's code there too), and answers
each call's tensors, pickled to it, with plain data as JSON (this process never unpickles what
the sampler's process writes). It runs under a keeper (specd.oracles.lifeline.keep): a process of
specd's code between this one and the child, which ends the child and every process it started,
in whatever session or group (``start_new_session=True``, a daemon's double fork), when the child
ends, when this process asks, or when this process dies, and exits as the child did (this process
reads the child's end from the keeper's). A copy of it the sampler forks never answers: it ends as
soon as the sampler returns in it.

specd's own tree rule (``--sampler specd --tree ...``) runs in this process: its code is specd's, and
it decides a batch of rounds in one call there (``specd.oracles.samplers.tree_protocol.SpecdTreeRule``).
Where a fork is not safe or not available (not Linux; a process that initialized CUDA, which
does not survive a fork) the sampler runs in this process, isolated as far as Python allows
(``SamplerUnderTest``: what it raises, ``sys.exit`` included, is a failed check).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing import Pipe
from multiprocessing.connection import Connection, wait

import torch

from specd.errors import SamplerAborted, SamplerFailed, SamplerUnavailable, SamplerUnloadable, UsageError
from specd.oracles.lifeline import keep
from specd.oracles.samplers.child import load, serve
from specd.oracles.samplers.protocol import SamplerResult, SamplerUnderTest

DEFAULT_TIMEOUT = 60.0  # seconds a call (or loading the sampler) may take before it is a finding
LOOK = 0.1  # seconds between looks at whether the child still lives, while an answer is awaited
ENDING = 5.0  # seconds a keeper may take to end what the child left, and itself
REFUSALS = {e.__name__: e for e in (UsageError, SamplerUnavailable, SamplerUnloadable)}  # raised again here
# A tree sampler's child is sent AHEAD rounds behind the one it works on, so it never waits for this
# process between rounds (one is enough for that; more would leave the other children idle at the end),
# and holds IN_FLIGHT bytes of requests unanswered at most: below a pipe's capacity (64 KiB on Linux), so
# that sending never blocks while the child waits to send an answer this process has not read yet.
AHEAD = 1
IN_FLIGHT = 32 * 1024


# The dtypes a request's tensors go as numpy arrays in (not bfloat16: numpy has none, torch pickles it).
_NUMPY_DTYPES = frozenset(
    (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    )
)


class _RequestPickler(pickle.Pickler):
    """A request's tensors pickled as numpy arrays (a tensor of a dtype numpy has), rebuilt by
    ``torch.from_numpy``: the same values, dtype and shape. torch's own pickling of a tensor costs
    about a tenth of a millisecond each way, most of a small call's round trip."""

    def reducer_override(self, obj):
        if type(obj) is torch.Tensor and obj.dtype in _NUMPY_DTYPES and obj.device.type == "cpu":
            try:
                return torch.from_numpy, (obj.detach().resolve_conj().resolve_neg().numpy(),)
            except (RuntimeError, TypeError):
                pass
        return NotImplemented


def _request_bytes(request) -> bytes:
    out = io.BytesIO()
    _RequestPickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(request)
    return out.getvalue()


def can_fork() -> bool:
    return sys.platform.startswith("linux") and not torch.cuda.is_initialized()


@contextmanager
def sampler_session(
    spec, input_rounding: float = 0.0, timeout: float = DEFAULT_TIMEOUT, tree: bool = False, processes: int = 1
) -> Iterator:
    """The sampler ``spec`` loaded and ready to call: in a child process where one can be forked
    (its calls limited to ``timeout`` seconds each), else here. ``tree``: a tree sampler, whose unit
    of work in the child is one round's law (``round_law``: the uniform stream it reads calls back into
    the oracle on every comparison, so it lives beside the sampler); its rounds are independent, so
    it is loaded in ``processes`` children, each round dealt to the next free one."""
    if not can_fork() or (tree and spec == "specd"):  # specd's own tree rule: its code is specd's
        yield load(spec, input_rounding, tree)
        return
    children = [SamplerProcess(spec, input_rounding, timeout, tree) for _ in range(max(1, processes) if tree else 1)]
    try:
        loaded = [child.start() for child in children]
        yield ChildTreeSampler(children) if tree else loaded[0]
    finally:
        for child in children:
            child.close()


class ChildSampler(SamplerUnderTest):
    """The sampler as the checks see it, each call answered by its process."""

    def __init__(self, process: SamplerProcess, name: str, description: str, input_rounding: float):
        super().__init__(name, process.call, description, input_rounding)
        self.process = process

    def __call__(self, p, q, drafts, k_lens, accept_u, terminal_u) -> SamplerResult:
        return self.fn((p, q, drafts, k_lens, accept_u, terminal_u))

    def each(self, calls: list[tuple]) -> list[SamplerResult]:
        """Each call's six tensors, a call of its own each, answered in turn (``SamplerProcess.calls``)."""
        return self.process.calls(calls)


class ChildTreeSampler:
    """A tree sampler as the tree checks see it: each round's law computed by one of its processes
    (each has loaded the sampler; the rounds are independent)."""

    def __init__(self, processes: list[SamplerProcess]):
        self.processes = processes
        self.name, self.description = processes[0].name, processes[0].description  # each loaded the same

    def round_law(self, rnd) -> tuple[dict, float, float, int]:
        """specd.oracles.samplers.tree_checks.round_law, run in the sampler's process."""
        return self.round_laws([rnd])[0]

    def round_laws(self, rounds: list) -> list[tuple[dict, float, float, int]]:
        """Each round's law, in the order given, the rounds dealt in order to whichever process is
        free. A process is sent the round after the one it works on before it answers (``AHEAD``), so
        it never waits for this one between rounds; each round's time limit runs from when its
        process turns to it (its answer to the round before). The errors are a serial run's: where
        rounds fail (SamplerFailed), no round after the first failure seen is sent, those in flight
        are finished, and the earliest failure is raised; a process that ends, hangs or forks
        (SamplerAborted) ends them all at once."""
        laws: list = [None] * len(rounds)
        failures: dict[int, SamplerFailed] = {}
        queue = iter(range(len(rounds)))
        waiting: list[tuple[int, bytes] | None] = [None]  # a round taken from the queue, not sent yet
        held = {process.conn: process for process in self.processes}
        sent: dict[Connection, deque[tuple[int, int]]] = {conn: deque() for conn in held}  # (round, its bytes)

        def send_more(process: SamplerProcess, most: int = AHEAD + 1) -> None:
            ahead = sent[process.conn]
            while not failures and len(ahead) < most:
                if waiting[0] is None:
                    i = next(queue, None)
                    if i is None:
                        return
                    waiting[0] = (i, _request_bytes(rounds[i]))
                i, request = waiting[0]
                if ahead and sum(n for _, n in ahead) + len(request) > IN_FLIGHT:
                    return
                process.send_bytes(request, starts=not ahead)
                ahead.append((i, len(request)))
                waiting[0] = None

        try:
            for most in (1, AHEAD + 1):  # a round to each process first, then one more behind it
                for process in self.processes:
                    send_more(process, most)
            while any(sent.values()):
                busy = [conn for conn, ahead in sent.items() if ahead]
                ready = wait(busy, timeout=LOOK)
                for conn in busy:  # one that hangs while the others answer, too
                    if conn not in ready and (not ready or time.monotonic() >= held[conn].deadline):
                        held[conn].still_working("instead of returning")
                for conn in ready:
                    process, (i, _) = held[conn], sent[conn].popleft()
                    reply = process.answer("instead of returning")
                    if sent[conn]:  # it has turned to the next round sent it: that round's time starts
                        process.deadline = time.monotonic() + process.timeout
                    try:
                        laws[i] = process.law(reply)
                    except SamplerFailed as err:
                        failures[i] = err
                    send_more(process)
        except SamplerAborted as err:
            for process in self.processes:
                process.abort(str(err), err.finding)
            raise
        if failures:
            raise failures[min(failures)]
        return laws


class SamplerProcess:
    """This side of the child: it starts it, sends it calls, and reads what became of it."""

    def __init__(self, spec, input_rounding: float, timeout: float, tree: bool = False):
        self.spec, self.rounding, self.timeout, self.tree = spec, input_rounding, timeout, tree
        self.name = spec if isinstance(spec, str) else getattr(spec, "__qualname__", type(spec).__name__)
        self.description = ""
        self.pid: int | None = None
        self.conn: Connection | None = None
        self.aborted: SamplerAborted | None = None
        self.deadline: float | None = None  # when the request in the child's hands is past its time limit

    def start(self):
        """Fork the child and wait for it to load the sampler: -> the sampler, or the loading's own
        error (SamplerUnloadable, exit 2) whatever became of it."""
        ours, theirs = Pipe()
        parent = os.getpid()
        for stream in (sys.stdout, sys.stderr):  # what is buffered here is not the child's to write
            stream.flush()
        pid = os.fork()
        if pid == 0:  # the keeper, then the child: neither returns into this process's code
            try:
                ours.close()
                keep(parent, lambda keeper: serve(theirs, keeper, self.spec, self.rounding, self.tree), theirs.close)
            finally:
                os._exit(0)
        theirs.close()
        self.pid, self.conn = pid, ours  # the keeper's pid: it ends as the child did
        try:
            reply = self.answer("while it was loaded")
        except SamplerAborted as err:
            raise SamplerUnloadable(f"cannot load the sampler: {err}") from None
        if reply[0] == "refused":
            raise REFUSALS.get(reply[1], SamplerUnloadable)(reply[2])
        if reply[0] == "aborted":  # it forked while it was loaded
            self.abort(reply[1], reply[2])
            raise SamplerUnloadable(f"cannot load the sampler: {reply[1]}")
        if reply[0] != "ready":
            raise self.abort(f"sampler {self.name}'s process answered out of turn", "broke_the_channel")
        self.name, self.description = reply[1], reply[2]
        if self.tree:
            return self
        return ChildSampler(self, reply[1], reply[2], reply[3])

    def law(self, reply: list) -> tuple[dict, float, float, int]:
        """The child's reply to a tree round -> its law (as ``call``: SamplerFailed, SamplerAborted)."""
        try:
            if reply[0] == "law":
                law = {tuple(int(t) for t in tokens): float(mass) for tokens, mass in reply[1]}
                return law, float(reply[2]), float(reply[3]), int(reply[4])
            if reply[0] == "failed":
                raise SamplerFailed(str(reply[1]), str(reply[2]))
            if reply[0] == "aborted":
                raise self.abort(str(reply[1]), str(reply[2]))
        except (TypeError, ValueError, IndexError):
            pass
        raise self.abort(f"sampler {self.name}'s process answered what is not specd's reply", "broke_the_channel")

    def ask(self, request) -> list:
        """Send one request to the child -> its reply (or SamplerAborted: this call and every later one)."""
        self.send(request)
        return self.answer("instead of returning")

    def send(self, request) -> None:
        """Send one request to the child; its time limit starts now."""
        self.send_bytes(_request_bytes(request))

    def send_bytes(self, request: bytes, starts: bool = True) -> None:
        """Send one request, pickled (``_request_bytes``), to the child; its time limit starts now, or
        (``starts`` False: queued behind requests the child has not answered) when the child turns to it."""
        if self.aborted is not None:
            raise self.aborted
        if starts:
            self.deadline = time.monotonic() + self.timeout
        try:
            self.conn.send_bytes(request)
        except OSError:  # gone: answer() says how
            pass

    def still_working(self, doing: str) -> None:
        """SamplerAborted if the child has ended, or is past its time limit for the request it holds."""
        if (ended := self.ended()) is not None:
            raise self.abort(*ended(doing))
        if time.monotonic() >= self.deadline:
            raise self.abort(
                f"sampler {self.name} did not return within {self.timeout:g} s, its time limit per call", "timed_out"
            )

    def call(self, tensors: tuple) -> SamplerResult:
        """One call's tensors to the child -> its result, SamplerFailed (it raised, or returned what
        the protocol does not allow), or SamplerAborted (this call and every later one)."""
        return self.result(self.ask(tensors))

    def calls(self, requests: list[tuple]) -> list[SamplerResult]:
        """Each call's tensors to the child, in order, each a call of its own -> a result per call, as
        ``call`` on each in turn gives. The child is sent the call after the one it works on (``AHEAD``,
        within IN_FLIGHT bytes), so it never waits for this process between them; each call's time limit
        runs from when the child turns to it. The first failure (SamplerFailed) is raised once the calls
        in flight behind it are answered; none is sent after it."""
        out: list = [None] * len(requests)
        in_flight: deque[tuple[int, int]] = deque()  # (call, its bytes)
        failure, at, request = None, 0, b""
        while True:
            while failure is None and at < len(requests) and len(in_flight) <= AHEAD:
                request = request or _request_bytes(requests[at])
                if in_flight and sum(n for _, n in in_flight) + len(request) > IN_FLIGHT:
                    break
                self.send_bytes(request, starts=not in_flight)
                in_flight.append((at, len(request)))
                at, request = at + 1, b""
            if not in_flight:
                break
            i, _ = in_flight.popleft()
            reply = self.answer("instead of returning")
            if in_flight:  # it has turned to the next call sent it: that call's time starts
                self.deadline = time.monotonic() + self.timeout
            try:
                out[i] = self.result(reply)
            except SamplerFailed as err:
                failure = failure or err
        if failure is not None:
            raise failure
        return out

    def result(self, reply: list) -> SamplerResult:
        """The child's reply to a call -> its result (as ``call``: SamplerFailed, SamplerAborted)."""
        try:
            if reply[0] == "ok":
                rows = None if reply[3] is None else torch.tensor(reply[3], dtype=torch.float64)
                tokens = None if reply[2] is None else [int(t) for t in reply[2]]
                return SamplerResult([int(a) for a in reply[1]], tokens, rows)
            if reply[0] == "failed":
                raise SamplerFailed(str(reply[1]), str(reply[2]))
            if reply[0] == "aborted":
                raise self.abort(str(reply[1]), str(reply[2]))
        except (TypeError, ValueError, IndexError):
            pass
        raise self.abort(f"sampler {self.name}'s process answered what is not specd's reply", "broke_the_channel")

    def answer(self, doing: str) -> list:
        """The child's next reply, or SamplerAborted: it ended (``doing``: instead of returning, ...),
        or gave no answer within the time limit (from the request's ``send``; from now for loading)."""
        if self.deadline is None:
            self.deadline = time.monotonic() + self.timeout
        while not self.conn.poll(max(0.0, min(LOOK, self.deadline - time.monotonic()))):
            self.still_working(doing)
        self.deadline = None
        try:
            reply = json.loads(self.conn.recv_bytes())
        except (EOFError, OSError):  # it closed its end: it is ending, or broke the channel
            ended, wait_until = self.ended(), time.monotonic() + ENDING
            while ended is None and time.monotonic() < wait_until:  # its keeper ends what it left, then itself
                time.sleep(LOOK / 10)
                ended = self.ended()
            if ended is None:
                raise self.abort(f"sampler {self.name} closed specd's channel {doing}", "broke_the_channel") from None
            raise self.abort(*ended(doing)) from None
        except ValueError:
            reply = None
        if not isinstance(reply, list) or not reply:
            raise self.abort(f"sampler {self.name}'s process answered what is not specd's reply", "broke_the_channel")
        return reply

    def ended(self) -> Callable[[str], tuple[str, str]] | None:
        """How the child ended (a message maker and its finding), or None while it runs. The child is
        not reaped here (``close`` does): the keeper's pid, which tells, stays its own until then."""
        state = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if state is None or state.si_pid == 0:
            return None
        name = self.name
        if state.si_code == os.CLD_EXITED:
            status = state.si_status
            return lambda doing: (
                f"sampler {name} ended its process (exit status {status}) {doing}",
                "exited",
            )
        try:
            signame = signal.Signals(state.si_status).name
        except ValueError:
            signame = f"signal {state.si_status}"
        return lambda doing: (f"sampler {name} crashed its process ({signame}) {doing}", "crashed")

    def abort(self, message: str, finding: str) -> SamplerAborted:
        """The child's end: it and all it started ended, and every later call refused with the same finding."""
        self.kill()
        self.aborted = SamplerAborted(message, finding)
        return self.aborted

    def kill(self) -> None:
        """Ask the keeper to end the child and anything it left running (specd.oracles.lifeline.keep)."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except OSError:
                pass

    def close(self) -> None:
        """End the child and whatever it left running; reap its keeper (killed if it does not end in
        ENDING seconds; the child dies with it)."""
        if self.conn is not None:
            self.conn.close()
        if self.pid is not None:
            self.kill()
            wait_until = time.monotonic() + ENDING
            while os.waitpid(self.pid, os.WNOHANG)[0] == 0:
                if time.monotonic() >= wait_until:
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
                    break
                time.sleep(LOOK / 20)
            self.pid = None
