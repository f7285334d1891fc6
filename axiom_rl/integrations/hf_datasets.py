"""Problems as the datasets other trainers read.

A Hugging Face `datasets.Dataset` (TRL's GRPOTrainer): a `prompt` column, plain text (our plain
prompt, the response prefix included, exactly what `axiom-rl train` shows a model without a chat
template) or conversational (one user message, for the trainer's chat template), and the columns
the reward functions of `integrations.trl` read: `problem` (the problem's JSON, as a problems
file holds it), `problem_id`, `task`, `difficulty`.

verl's parquet (its RLHFDataset): `data_source` ("axiom_rl/<task>"), `prompt` (chat messages),
`ability` (the task's category), `reward_model` ({"style": "rule", "ground_truth": the problem's
JSON}), `extra_info` ({"split", "index", "problem_id"}): what `integrations.verl.compute_score`
reads back.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..io import atomic_directory, atomic_open
from ..tasks import get_task
from ..tasks.prompts import format_prompt
from ..types import Problem


def _datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise UserError(
            "exporting a Hugging Face dataset needs the datasets library: pip install 'datasets>=4,<6'"
        ) from None
    return datasets


def prompt_column(problem: Problem, style: str = "full", conversational: bool = False) -> Any:
    """The prompt a trainer shows the model: our plain prompt, or one user message."""
    if conversational:
        return [{"role": "user", "content": get_task(problem.task).render(problem, style)}]
    return format_prompt(problem, None, style)


def dataset_columns(
    problems: Sequence[Problem], style: str = "full", conversational: bool = False
) -> dict[str, list[Any]]:
    return {
        "prompt": [prompt_column(p, style, conversational) for p in problems],
        "problem": [p.to_json() for p in problems],
        "problem_id": [p.id for p in problems],
        "task": [p.task for p in problems],
        "difficulty": [p.difficulty for p in problems],
    }


def to_dataset(problems: Sequence[Problem], style: str = "full", conversational: bool = False) -> Any:
    """A `datasets.Dataset` of `problems`, one row each, in order."""
    return _datasets().Dataset.from_dict(dataset_columns(problems, style, conversational))


def verl_columns(
    problems: Sequence[Problem], split: str = "train", style: str = "full"
) -> dict[str, list[Any]]:
    return {
        "data_source": [f"axiom_rl/{p.task}" for p in problems],
        "prompt": [prompt_column(p, style, conversational=True) for p in problems],
        "ability": [get_task(p.task).category for p in problems],
        "reward_model": [{"style": "rule", "ground_truth": p.to_json()} for p in problems],
        "extra_info": [{"split": split, "index": i, "problem_id": p.id} for i, p in enumerate(problems)],
    }


def _refuse_overwrite(out: Path) -> None:
    """A dataset directory replaces nothing: `--out .` must not remove the working directory."""
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise UserError(f"{out} exists and is not an empty directory; give a new directory as --out")


def save_dataset(
    problems: Sequence[Problem], out_dir: str | Path, style: str = "full", conversational: bool = False
) -> Path:
    """`to_dataset(...).save_to_disk(out_dir)`, whole or not at all; `datasets.load_from_disk`
    reads it back. An existing file or directory that is not empty is refused."""
    out = Path(out_dir)
    _refuse_overwrite(out)
    datasets = _datasets()
    dataset = to_dataset(problems, style, conversational)
    quiet = datasets.utils.are_progress_bars_disabled()
    datasets.utils.disable_progress_bars()  # its bar per shard would follow our one summary line
    try:
        with atomic_directory(out) as tmp:
            dataset.save_to_disk(str(tmp))
    finally:
        if not quiet:
            datasets.utils.enable_progress_bars()
    return out


def save_verl_parquet(
    problems: Sequence[Problem], out_path: str | Path, split: str = "train", style: str = "full"
) -> Path:
    """verl's parquet of `problems`, whole or not at all (an existing file is replaced, as a
    JSONL export's is)."""
    out = Path(out_path)
    _datasets()  # pyarrow comes with it
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pydict(verl_columns(problems, split, style))
    with atomic_open(out, "wb") as f:
        pq.write_table(table, f)
    return out
