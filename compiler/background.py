"""Running one pure computation on a second core: a forked child computes, the parent goes on.

``mvflow compile`` is CPU-bound Python, so threads cannot overlap its stages; a forked child can,
and it starts with the parent's memory (the compiled manifest) without copying or pickling it.
Only the result travels back, pickled through a pipe. Where forking is unsafe or unavailable
(no ``os.fork``, other threads running, e.g. Spark's), or the child fails for any reason, the
computation runs in the calling process instead, so the result (or the error) is always the same.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from typing import Callable, Generic, TypeVar

T = TypeVar("T")
FORK_FROM = 200  # items of work (models) from which a child pays for its start and the results' trip


def worth_forking(items: int) -> bool:
    """Whether splitting ``items`` models of work with a child is likely to pay."""
    return items >= FORK_FROM


class Background(Generic[T]):
    """``compute()`` started in a forked child; ``result()`` waits for it (use as a context manager,
    which stops a child whose result was never asked for)."""

    def __init__(self, compute: Callable[[], T], fork: bool = True):
        self._compute = compute
        self._pid = self._read = None
        self.forked = False  # whether a child computed (or is computing) the result
        if fork and hasattr(os, "fork") and threading.active_count() == 1:
            self._start()

    def _start(self) -> None:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: compute, send, and leave without running the parent's exit handlers
            try:
                os.close(read)
                try:
                    data = pickle.dumps(("ok", self._compute()), protocol=pickle.HIGHEST_PROTOCOL)
                except BaseException:  # noqa: BLE001 - the parent recomputes and raises the error itself
                    data = pickle.dumps(("failed", None))
                with os.fdopen(write, "wb") as pipe:
                    pipe.write(data)
            finally:
                os._exit(0)
        os.close(write)
        self._pid, self._read, self.forked = pid, read, True

    def result(self) -> T:
        if self._pid is None:
            return self._compute()
        try:
            with os.fdopen(self._read, "rb") as pipe:
                data = pipe.read()
        finally:
            self._read = None
            os.waitpid(self._pid, 0)
            self._pid = None
        try:
            status, value = pickle.loads(data)
        except Exception:  # noqa: BLE001 - a child that died mid-way: compute here
            status, value = "failed", None
        if status == "ok":
            return value
        self.forked = False
        return self._compute()

    def __enter__(self) -> Background[T]:
        return self

    def __exit__(self, *exc) -> None:
        if self._pid is not None:
            os.kill(self._pid, signal.SIGKILL)
            os.close(self._read)
            os.waitpid(self._pid, 0)
            self._pid = self._read = None
