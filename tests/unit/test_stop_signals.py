"""runtime.stop_signals: SIGINT and SIGTERM set a command's stop event from a thread of their
own, so a signal landing while the main thread holds the event's lock (a second Ctrl-C during
the first one's ``Event.set``) cannot deadlock the command; the previous handlers come back."""

from __future__ import annotations

import signal
import sys
import threading
import time

import pytest

from runtime.stop_signals import STOP_SIGNALS, stop_on_signals

pytestmark = pytest.mark.timeout(30)  # the bug this guards against is a hang


@pytest.mark.parametrize("sig", STOP_SIGNALS)
def test_a_signal_sets_the_stop_and_the_handlers_come_back(sig: signal.Signals) -> None:
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    stop = threading.Event()
    with stop_on_signals(stop) as given:
        assert given is stop
        assert not stop.is_set()
        signal.raise_signal(sig)
        assert stop.wait(10)
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before


def test_a_signal_while_the_main_thread_holds_the_events_lock_does_not_deadlock() -> None:
    """Python runs a handler in the main thread wherever it is: here, inside the lock that
    ``Event.set`` and ``Event.wait`` take (where a second Ctrl-C found ``horde-chat up``). A
    handler that set the event itself would wait for that lock forever."""
    stop = threading.Event()
    with stop_on_signals(stop):
        with stop._cond:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
            assert not stop.is_set()  # the relay waits for the lock, not this thread
        assert stop.wait(10)


@pytest.mark.parametrize("sig", STOP_SIGNALS)
def test_a_signal_another_thread_takes_still_stops_a_main_thread_that_waits(
    sig: signal.Signals,
) -> None:
    """The kernel may hand a signal sent to the process to any thread; Python runs its
    handler only when the main thread runs bytecode again, which a main thread blocked in
    ``stop.wait()`` (``serve_until``) does not: a front once ignored SIGTERM so. Here the
    signal is sent to another thread (``pthread_kill``) once the main thread waits."""
    stop = threading.Event()
    main = threading.get_ident()

    def send_once_the_main_thread_waits() -> None:
        while (frame := sys._current_frames().get(main)) is None or frame.f_code.co_name != "wait":
            time.sleep(0.01)
        time.sleep(0.05)  # from the frame's name to its blocking acquire
        signal.pthread_kill(threading.get_ident(), sig)

    with stop_on_signals(stop):
        elsewhere = threading.Thread(target=send_once_the_main_thread_waits, name="elsewhere")
        elsewhere.start()
        assert stop.wait(10)
        elsewhere.join()


def test_another_signal_with_a_handler_does_not_stop() -> None:
    """A signal of another handler (SIGUSR1 prints the stacks) writes its number to the same
    wakeup fd; it is not a stop."""
    stop = threading.Event()
    seen: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    try:
        with stop_on_signals(stop):
            signal.raise_signal(signal.SIGUSR1)
            assert seen == [signal.SIGUSR1]
            assert not stop.wait(0.5)
            signal.raise_signal(signal.SIGTERM)
            assert stop.wait(10)
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_many_signals_never_block_the_handler() -> None:
    stop = threading.Event()
    with stop_on_signals(stop):
        for _ in range(200):
            signal.raise_signal(signal.SIGTERM)
        assert stop.wait(10)


def test_a_block_ended_without_a_signal_leaves_the_stop_unset_and_its_thread_gone() -> None:
    stop = threading.Event()
    with stop_on_signals(stop):
        assert "stop-signals" in {t.name for t in threading.enumerate()}
    assert not stop.is_set()
    assert "stop-signals" not in {t.name for t in threading.enumerate()}


def test_off_the_main_thread_no_handler_is_installed() -> None:
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    seen: list[object] = []

    def elsewhere() -> None:
        with stop_on_signals(threading.Event()):
            seen.append({s: signal.getsignal(s) for s in STOP_SIGNALS})

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(10)
    assert seen == [before]


def test_a_hangup_stops_a_command_unless_it_is_ignored() -> None:
    """A closed terminal (SIGHUP) stops a command gracefully, as Ctrl-C does; under nohup
    (SIGHUP ignored) it is meant to outlive the terminal."""
    before = signal.getsignal(signal.SIGHUP)
    try:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        stop = threading.Event()
        with stop_on_signals(stop):
            signal.raise_signal(signal.SIGHUP)
            assert stop.wait(10)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL

        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts a command
        with stop_on_signals(threading.Event()):
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)
