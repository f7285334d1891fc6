"""Problem sources: where a training run's problems come from, and what they learn from its results.

A source hands the trainer a batch of problems each step (`next_batch`) and, once they are
verified and rewarded, sees every completion's verdict and reward (`observe`): a curriculum, a
replay of failures or a self-play round is a source that acts on what it observed. Its state is
checkpointed with the run (`state_dict`, `load_state_dict`), so a resumed run draws exactly what
an uninterrupted one would; what it reports (`metrics`) goes into metrics.jsonl as `source/...`.

    uniform   tasks x difficulties, each draw a random pair (the default)
    file      the problems of a file, reshuffled each pass (the default with --problems-file)
    learnability  (task, difficulty) pairs drawn in proportion to p(1 - p) of their pass rates
    schedule  the difficulties in turn, easiest first, a fixed number of problems each
    adaptive  per task, a difficulty moved to keep its pass rate in a band (curriculum.py)
    failures  a failures file's problems replayed, mixed with fresh ones

A new source is one class with `@register_source("name")`; the training config's `source:`
section picks it by name and passes the rest as its parameters (docs/training.md, "Writing a
problem source").
"""

from .base import SOURCES, Outcome, Source, SourceContext, make_source, outcomes, register_source
from .builtin import FileSource, UniformSource
from .curriculum import AdaptiveSource, FailuresSource, LearnabilitySource, ScheduleSource

__all__ = [
    "SOURCES",
    "AdaptiveSource",
    "FailuresSource",
    "FileSource",
    "LearnabilitySource",
    "Outcome",
    "ScheduleSource",
    "Source",
    "SourceContext",
    "UniformSource",
    "make_source",
    "outcomes",
    "register_source",
]
