"""Ctrl-C or SIGTERM during training: the first finishes the step and checkpoints, the second
stops at once. Cluster schedulers preempt with SIGTERM and a grace period: the run then ends as a
Ctrl-C ends it, resumable, instead of dying as if killed."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

MESSAGE = "stopping after this step (Ctrl-C again to stop now, without a checkpoint)"
TERM_MESSAGE = (
    "SIGTERM: stopping after this step, with a checkpoint (a second SIGTERM stops now, without one)"
)
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """First Ctrl-C or SIGTERM: finish the current step, checkpoint, exit. Second: stop at once."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.requested = False
        self._say = say
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in SIGNALS}
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        message = TERM_MESSAGE if signum == signal.SIGTERM else MESSAGE
        try:
            self._say(message)
        except ImportError:
            # The handler runs between two bytecodes of whatever the main thread was doing, an
            # import included, and printing may need that half-imported module (rich loads its
            # emoji table on its first print): the run then died with a traceback. A plain write
            # to stderr needs nothing.
            os.write(2, (message + "\n").encode())

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
