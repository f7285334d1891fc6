"""Ctrl-C during training: the first finishes the step and checkpoints, the second stops at once."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any


class StopRequest:
    """First Ctrl-C: finish the current step, checkpoint, exit. Second: stop at once."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.requested = False
        self._say = say
        self._previous: Any = None

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self._say("stopping after this step (Ctrl-C again to stop now, without a checkpoint)")

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
