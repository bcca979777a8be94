"""specd.cli.interrupt: a stop signal is never lost in a finalizer."""

import signal
import sys
import time

import pytest

from specd.cli import interrupt


@pytest.fixture
def fresh_stop(monkeypatch):
    """A process that has not been stopped yet; SIGALRM's handler and timer as they were, after."""
    monkeypatch.setattr(interrupt, "_received", [])
    before = signal.getsignal(signal.SIGALRM)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, before)


class Finalized:
    """An object whose finalizer is where a signal's handler happens to run."""

    def __init__(self, handler, signum):
        self.handler, self.signum = handler, signum

    def __del__(self):
        self.handler(self.signum, sys._getframe())


@pytest.mark.parametrize(
    "handler,signum,received",
    [(interrupt._stop, signal.SIGTERM, [signal.SIGTERM]), (interrupt._interrupt, signal.SIGINT, [])],
    ids=["SIGTERM", "Ctrl-C"],
)
def test_a_signal_that_lands_in_a_finalizer_is_raised_once_it_returns(fresh_stop, capsys, handler, signum, received):
    obj = Finalized(handler, signum)
    with pytest.raises(KeyboardInterrupt):
        del obj  # raised here, CPython would print "Exception ignored in ... __del__" and go on
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.001)
    assert interrupt._received == received  # Ctrl-C records none: its exit is 130, "interrupted"
    assert "Exception ignored" not in capsys.readouterr().err


def test_a_stop_elsewhere_is_raised_at_once(fresh_stop):
    with pytest.raises(KeyboardInterrupt):
        interrupt._stop(signal.SIGHUP, sys._getframe())
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # nothing deferred


def test_a_second_signal_during_the_clean_up_is_ignored(fresh_stop):
    with pytest.raises(KeyboardInterrupt):
        interrupt._stop(signal.SIGTERM, sys._getframe())
    interrupt._stop(signal.SIGHUP, sys._getframe())  # returns: the first one's clean-up goes on
    assert interrupt._received == [signal.SIGTERM]


def test_every_ctrl_c_press_raises(fresh_stop):
    for _ in range(2):  # a second press, during a clean-up, still raises
        with pytest.raises(KeyboardInterrupt):
            interrupt._interrupt(signal.SIGINT, sys._getframe())
    assert interrupt._received == []


def test_the_handlers_are_installed_only_over_the_defaults(monkeypatch):
    installed = {}
    monkeypatch.setattr(interrupt.signal, "signal", lambda signum, handler: installed.__setitem__(signum, handler))
    defaults = {signal.SIGTERM: signal.SIG_DFL, signal.SIGHUP: signal.SIG_IGN}  # run under nohup
    defaults[signal.SIGINT] = signal.default_int_handler
    monkeypatch.setattr(interrupt.signal, "getsignal", defaults.get)
    interrupt.handle_stop_signals()
    assert installed == {signal.SIGTERM: interrupt._stop, signal.SIGINT: interrupt._interrupt}  # nohup's SIGHUP kept
