"""Plugin code on a leash: run on a helper thread within a time limit, in a frame named after the plugin.

A plugin's import, registration, availability probe and ``supports()`` predicates run here. The
calling thread hands the work to a helper thread of its own and waits at most the time limit; if
the work has not finished by then, the caller stops waiting (``TimedOut``) and the helper thread is
abandoned to finish on its own (Python cannot stop a thread). The work runs inside a function whose
code object is named after the plugin, so that ``faulthandler`` names the plugin in the traceback it
dumps if the plugin crashes the process; ``faulthandler`` is switched on for the duration when the
user has not switched it on already.
"""

from __future__ import annotations

import _thread
import contextvars
import faulthandler
import os
import queue
import sys
import threading
from typing import Any, Callable

Frame = Callable[..., Any]
_IDLE_CHECK_SECONDS = 5.0


class TimedOut(Exception):
    """Plugin code did not return within the time limit; it goes on running on an abandoned thread."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.story = f"did not finish within {seconds:g} s"  # the supervisor tells it in full
        super().__init__(self.story)


def named_frame(label: str) -> Frame:
    """A function ``frame(fn, *args) -> fn(*args)`` whose frame is called ``label`` in tracebacks."""
    def frame(fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    frame.__code__ = frame.__code__.replace(co_name=label)
    frame.__name__ = frame.__qualname__ = label
    return frame


class _Job:
    __slots__ = ("frame", "fn", "args", "context", "done", "result", "error")

    def __init__(self, frame: Frame, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.frame, self.fn, self.args = frame, fn, args
        self.context = contextvars.copy_context()
        self.done = _thread.allocate_lock()
        self.done.acquire()
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.context.run(self.frame, self.fn, *self.args)
        except BaseException as exc:  # carried to the waiting thread, which decides
            self.error = exc
        finally:
            self.done.release()


_local = threading.local()


class _Helper:
    """The thread that runs plugin code for one calling thread; it ends when its caller has ended."""

    def __init__(self, owner: threading.Thread) -> None:
        self.owner = owner
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.abandoned = False
        threading.Thread(target=self._serve, name=f"algoswap-plugin-helper ({owner.name})", daemon=True).start()

    def _serve(self) -> None:
        _local.serving = True
        while not self.abandoned:
            try:
                job = self.jobs.get(timeout=_IDLE_CHECK_SECONDS)
            except queue.Empty:
                if not self.owner.is_alive():
                    return
                continue
            job.run()


def _own_helper() -> _Helper:
    helper: _Helper | None = getattr(_local, "helper", None)
    if helper is None or helper.abandoned:
        helper = _local.helper = _Helper(threading.current_thread())
    return helper


def on_helper_thread() -> bool:
    """Whether plugin code is running here (nested plugin calls then run inline, under the outer limit)."""
    return bool(getattr(_local, "serving", False))


class Guard:
    """Runs plugin code with a time limit (``timeout`` seconds; ``None``: no limit, on the calling thread)."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout

    def run(self, frame: Frame, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` inside ``frame``; raises what it raises, or ``TimedOut``."""
        _faulthandler.acquire()
        if self.timeout is None or on_helper_thread():
            try:
                return frame(fn, *args)
            finally:
                _faulthandler.release()
        job, helper, finished = _Job(frame, fn, args), _own_helper(), False
        try:
            helper.jobs.put(job)
            finished = job.done.acquire(timeout=self.timeout)
        finally:
            if finished:
                _faulthandler.release()
            else:  # timed out or interrupted: leave it running, and faulthandler on while it does
                helper.abandoned = True
        if not finished:
            raise TimedOut(self.timeout)
        if job.error is not None:
            raise job.error
        return job.result


class _FaultHandlerSwitch:
    """Switches ``faulthandler`` on while plugin code runs, unless the user already did."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._ours = False

    def acquire(self) -> None:
        with self._lock:
            self._users += 1
            if self._users == 1 and not faulthandler.is_enabled():
                self._ours = _enable_faulthandler()

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._ours:
                faulthandler.disable()
                self._ours = False


def _enable_faulthandler() -> bool:
    try:
        stream: Any = sys.stderr if sys.stderr is not None and sys.stderr.fileno() >= 0 else 2
    except (AttributeError, OSError, ValueError):  # a replaced stderr without a file descriptor
        stream = 2
    try:
        faulthandler.enable(file=stream, all_threads=True)
    except (OSError, ValueError, RuntimeError):
        return False
    return True


_faulthandler = _FaultHandlerSwitch()


def _after_fork_in_child() -> None:
    """A forked child has only the thread that forked: its helper (and any lock held) stayed behind."""
    global _faulthandler
    _local.__dict__.clear()
    _faulthandler = _FaultHandlerSwitch()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)
