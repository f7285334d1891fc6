"""Ctrl-C during training: the first finishes the step and checkpoints, the second stops at once."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

MESSAGE = "stopping after this step (Ctrl-C again to stop now, without a checkpoint)"


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
        try:
            self._say(MESSAGE)
        except ImportError:
            # The handler runs between two bytecodes of whatever the main thread was doing, an
            # import included, and printing may need that half-imported module (rich loads its
            # emoji table on its first print): the run then died with a traceback. A plain write
            # to stderr needs nothing.
            os.write(2, (MESSAGE + "\n").encode())

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
