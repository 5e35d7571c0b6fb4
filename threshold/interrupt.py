"""SIGINT and SIGTERM as KeyboardInterrupt, with a flag that outlives a swallowed one.

Python runs a signal handler in the main thread between two bytecodes, and that can be inside a
finalizer or a weakref callback (a garbage collection during an import, say). An exception raised
there is printed as "Exception ignored in ..." and dropped, so a worker told to stop would train
on to the end of its study. The handler therefore also sets a flag, and the long loops (the
search's poll, a worker between trials and at every validation of a run) call
:func:`raise_if_interrupted` where raising is safe, so a dropped interrupt is raised again there;
and the "Exception ignored" report of a dropped one is not printed (:func:`_unraisable`): it is no
error, and the flag carries it on (issue 62: one in a SQLAlchemy finalizer printed it).
A signal that follows the first at once does not raise again (:data:`SETTLE_S`): the cleanup
the first began (a trial told failed and enqueued again) is not cut.

A deadline can cut the main thread's work too, with no signal (which would read as a request to
stop the whole process): :func:`cut_at` raises :class:`Cut` in the main thread at its deadline,
between two bytecodes, wherever the block is (a benchmark's row in flight, a compile).
"""

from __future__ import annotations

import ctypes
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Cut", "cut_at", "exit_status", "install", "interrupted", "raise_if_interrupted"]

_requested = threading.Event()
_received: list[int] = []  # the signals that asked this process to stop, in order
_first = [0.0]  # when the first of them came (time.monotonic)


SETTLE_S = 10.0  # after the first signal, more signals this soon are taken as the same request


def _interrupt(signum, frame):
    """The first signal raises; one that follows it within :data:`SETTLE_S` is the same stop
    asked again (Ctrl-C reaches a process group at once, and ``find`` then sends SIGTERM to
    each worker), and raising it would cut the cleanup the first began: a worker telling its
    interrupted trial failed and enqueuing it again left it RUNNING until its heartbeat went
    stale. A signal after that raises again: a second Ctrl-C to a process that hangs."""
    now = time.monotonic()
    again = _requested.is_set() and now - _first[0] < SETTLE_S
    if not _requested.is_set():
        _first[0] = now
    _requested.set()
    _received.append(signum)
    if not again:
        raise KeyboardInterrupt


def _unraisable(unraisable) -> None:
    """``sys.unraisablehook`` while :func:`install`-ed: a KeyboardInterrupt of ours that struck
    inside a finalizer is dropped in silence (the flag raises it again at the next check); any
    other is reported by the hook there was before."""
    if issubclass(unraisable.exc_type, KeyboardInterrupt) and _requested.is_set():
        return
    _before[0](unraisable)


_before = [sys.unraisablehook]  # the hook :func:`_unraisable` hands the others to


def exit_status() -> int:
    """The exit status of a process stopped by the first signal it got, as a shell reports one
    killed by it: 128 + the signal's number (130 for SIGINT or Ctrl-C, 143 for SIGTERM)."""
    return 128 + (_received[0] if _received else signal.SIGINT)


def install() -> None:
    """SIGINT and SIGTERM raise KeyboardInterrupt (also in a process started with SIGINT ignored,
    as background jobs are), and are remembered for :func:`raise_if_interrupted`; one dropped in
    a finalizer is not reported as an ignored exception."""
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    if sys.unraisablehook is not _unraisable:
        _before[0] = sys.unraisablehook
        sys.unraisablehook = _unraisable


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt if a signal asked this process to stop (it may have been dropped)."""
    if _requested.is_set():
        raise KeyboardInterrupt


def interrupted(error: BaseException) -> bool:
    """Whether ``error`` ended the work because a signal asked this process to stop: a
    KeyboardInterrupt, or any error raised after one. A signal that strikes inside a library's
    cleanup can surface as that library's own error instead (``torch.save`` cut mid-write
    raises RuntimeError "unexpected pos" as its zip writer closes)."""
    return isinstance(error, KeyboardInterrupt) or _requested.is_set()


class Cut(BaseException):
    """Raised in the main thread by :func:`cut_at` when its deadline passes inside the block;
    a BaseException, so that no ``except Exception`` of the work it cuts takes it."""


def _raise_in(thread: int, error: type[BaseException] | None) -> None:
    """``error`` raised in ``thread`` at its next bytecode (None: the one asked for, taken back)."""
    what = None if error is None else ctypes.py_object(error)  # None: NULL
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), what)


@contextmanager
def cut_at(deadline: float | None) -> Iterator[None]:
    """Run the block (in the main thread) until ``deadline`` (a ``time.perf_counter`` time;
    None: no limit): past it :class:`Cut` is raised inside the block, at the next bytecode the
    thread runs (a call into C, a GPU's step, ends first). Once the block has left, it is not."""
    if deadline is None:
        yield
        return
    thread, lock, done = threading.get_ident(), threading.Lock(), threading.Event()
    state = {"inside": True, "fired": False}

    def watch() -> None:
        if done.wait(max(0.0, deadline - time.perf_counter())):
            return
        with lock:
            if state["inside"]:
                state["fired"] = True
                _raise_in(thread, Cut)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        with lock:
            state["inside"] = False
            if state["fired"]:  # asked but not raised yet (the block ended in C): take it back
                _raise_in(thread, None)
        done.set()
