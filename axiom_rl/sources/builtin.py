"""The built-in sources: generated problems drawn uniformly, and a file's problems."""

from __future__ import annotations

from typing import Any

from ..errors import UserError
from ..train.problems import FileProblemStream, ProblemStream
from ..types import Problem
from .base import Source, SourceContext, register_source


class StreamSource(Source):
    """A source that serves a seeded stream's problems in order and observes nothing; its state
    is the stream's."""

    stream: ProblemStream | FileProblemStream

    def next_batch(self, n: int) -> list[Problem]:
        return self.stream.take(n)

    def state_dict(self) -> dict[str, Any]:
        return self.stream.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.load_state_dict(state)


@register_source("uniform")
class UniformSource(StreamSource):
    """Generated train problems: each draw picks a (task, difficulty) pair of the run's at random
    and takes that pair's next problem (ProblemStream). Observes nothing."""

    def __init__(self, context: SourceContext) -> None:
        super().__init__(context)
        if context.problems is not None:
            raise UserError("problem source 'uniform' draws generated problems: not with --problems-file")
        self.stream = ProblemStream(
            context.tasks, context.difficulties, context.seed, rank=context.rank, world=context.world
        )


@register_source("file")
class FileSource(StreamSource):
    """The problems of --problems-file, in a seeded order reshuffled each pass (FileProblemStream).
    Observes nothing."""

    def __init__(self, context: SourceContext) -> None:
        super().__init__(context)
        if context.problems is None:
            raise UserError("problem source 'file' needs --problems-file")
        self.stream = FileProblemStream(
            context.problems, context.seed, rank=context.rank, world=context.world
        )
