"""Checkpoints: everything needed to continue a run as if it had never stopped.

    checkpoints/step-N/
        model/              the LoRA adapter or the full weights, the tokenizer, axiom_rl.json
        optimizer.pt  scheduler.pt  rng.pt
        trainer_state.json  step, problem stream, Kalman baseline, counters

A checkpoint is written into a temporary directory and renamed into place, so a crash while
writing never leaves a half checkpoint; only `keep` newest ones stay on disk.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from ..errors import UserError
from ..io import atomic_directory, check_not_held
from ..models.load import DTYPES, MODEL_CARD, Policy
from ..resources import MachineFailure
from .optim import resume_schedule

CHECKPOINT_DIR = "checkpoints"
_STEP = re.compile(r"^step-(\d+)$")
# torch's load_state_dict message for one parameter of another shape
_SIZE_MISMATCH = re.compile(
    r"size mismatch for (\S+): copying a param with shape torch\.Size\((\[[^]]*\])\) from checkpoint, "
    r"the shape in current model is torch\.Size\((\[[^]]*\])\)"
)


def checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / CHECKPOINT_DIR
    found = []
    if root.is_dir():
        for child in root.iterdir():
            m = _STEP.match(child.name)
            if m and (child / "trainer_state.json").exists():
                found.append((int(m.group(1)), child))
    return sorted(found)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = checkpoints(run_dir)
    return found[-1][1] if found else None


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def check_run_dir(cfg: Any, held: bool = False) -> Path | None:
    """For a run of `cfg` (output_dir, resume; train's or sft's): the checkpoint to resume from,
    None for a fresh run. Refuses a directory another process holds (unless `held`: this one
    does), a resume without a checkpoint, and a fresh run where a run already is (nothing is
    ever overwritten). Writes nothing."""
    run_dir = Path(cfg.output_dir)
    if not held:
        check_not_held(run_dir)
    if cfg.resume:
        for entry in sorted((run_dir / CHECKPOINT_DIR).glob("step-*")):
            if _STEP.match(entry.name) and not entry.is_dir():  # found only when its step came round
                raise UserError(f"{entry} is not a checkpoint directory; move it aside to resume")
        found = checkpoints(run_dir)
        if not found:
            if (run_dir / "config.json").is_file() and not (run_dir / "final_model").exists():
                # The run died before its first checkpoint (a crash in steps 1 to save_every - 1):
                # there is nothing to continue from, so it starts again from step 0, its seed
                # making it the run it would have been; its logs' rows are dropped (restarted_run).
                return None
            raise UserError(f"--resume: no checkpoint in {run_dir}/checkpoints")
        done, ckpt = found[-1]
        finished = done == cfg.steps and (run_dir / "final_model").exists()
        if done > cfg.steps or finished:  # nothing to train: say so rather than rewrite the run
            raise UserError(
                f"--resume: the run in {run_dir} has done {done} steps"
                + (" and finished" if finished else f", more than --steps {cfg.steps}")
                + f"; give --steps above {done} to train it further"
            )
        return ckpt
    if run_has_begun(run_dir):
        raise UserError(
            f"{run_dir} already holds a run; use --resume to continue it, or another --output-dir"
        )
    return None


# After out of memory, what makes the next attempt smaller, by command (either may be given with --resume).
SMALLER_STEP = {
    "train": "make the step smaller (fewer --prompts-per-step or --num-generations, a shorter "
    "--max-completion-length, more --gradient-accumulation-steps)",
    "sft": "give a smaller --batch-size",
}


def machine_failure_message(failure: MachineFailure, run_dir: Path, command: str) -> str:
    """The one line for a run that the disk or memory stopped (resources.machine_errors):
    checkpoints and the final model are written whole or not at all, and a resume drops the rows
    past its checkpoint, so the run goes on from where its files say once the machine allows."""
    if failure.memory:
        what, remedy = f"{failure.reason} in the run in {run_dir}", f"free memory, or {SMALLER_STEP[command]}"
    else:
        what, remedy = f"{failure.reason} while writing {run_dir}", "make room"
    return (
        f"{what}; what the run wrote before is intact: {remedy}, then resume with: "
        f"axiom-rl {command} --resume --output-dir {run_dir}"
    )


def restarted_run(cfg: Any, ckpt: Path | None) -> bool:
    """A --resume that found no checkpoint (check_run_dir): the run starts again at step 0, and
    the rows its first attempt logged are dropped as a resume drops those after its checkpoint."""
    return bool(cfg.resume) and ckpt is None


def run_has_begun(run_dir: Path) -> bool:
    """Does run_dir hold anything a run made that a fresh one would lose: a metrics row, a
    checkpoint, a final model? A run that failed before its first step (a model that would not
    load, a chat template it lacks) left only its config and empty logs, and a corrected command
    may start there again (the config is rewritten, the logs are appended to)."""
    metrics = run_dir / "metrics.jsonl"
    return (
        (metrics.exists() and metrics.stat().st_size > 0)
        or latest_checkpoint(run_dir) is not None
        or (run_dir / "final_model").exists()
    )


def save_weights(model: Any, path: Path) -> None:
    """save_pretrained as safetensors, without transformers' progress bar (a run saves often).

    A LoRA model saves its adapter alone: peft's default also looks up the base model's config
    -- on the hub, for a hub name, at every save -- to see whether its vocabulary was resized,
    which axiom-rl never does, and warns when the base is an adapter directory (a LoRA run that
    started from another one's final model).
    """
    from ..models.load import no_progress_bars

    adapter_only = {"save_embedding_layers": False} if hasattr(model, "peft_config") else {}
    with no_progress_bars():
        model.save_pretrained(path, safe_serialization=True, **adapter_only)


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    policy: Policy,
    optimizer: Any,
    scheduler: Any,
    trainer_state: dict[str, Any],
    keep: int = 2,
    rng_states: list[dict[str, Any]] | None = None,
    card: dict[str, Any] | None = None,
) -> Path:
    """`rng_states`: one per rank (default: this process's). `model/` is a model directory as
    final_model is (weights or adapter, tokenizer, the model `card`): eval and --model take it."""
    final = Path(run_dir) / CHECKPOINT_DIR / f"step-{step}"  # atomic_directory makes its parents
    with atomic_directory(final) as tmp:
        write_model_dir(tmp / "model", policy.model, policy.tokenizer, card)
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        torch.save({"ranks": rng_states or [rng_state()]}, tmp / "rng.pt")
        (tmp / "trainer_state.json").write_text(json.dumps(trainer_state, indent=1))
        (tmp / CHECKSUMS).write_text(json.dumps(file_checksums(tmp), indent=1))
    for _, old in checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


CHECKSUMS = "checksums.json"  # sha256 of every file of a checkpoint, checked before it is resumed from


def file_checksums(directory: Path) -> dict[str, str]:
    """sha256 of each file under `directory`, by relative path: a bit flipped on disk in a weight
    file of the right size loads without complaint, and the run would go on from wrong weights."""
    sums = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != CHECKSUMS):
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        sums[path.relative_to(directory).as_posix()] = digest.hexdigest()
    return sums


class DamagedFile(Exception):
    """A checkpoint's file that is not what was written: `str(self)` says which and how."""


def verify_checksums(path: Path) -> None:
    """Every file a checkpoint's checksums.json lists, unchanged (a checkpoint written before
    checksums were recorded has none to check)."""
    listed = path / CHECKSUMS
    if not listed.exists():
        return
    try:
        expected = json.loads(listed.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        raise DamagedFile(f"{CHECKSUMS} is damaged") from None
    if not isinstance(expected, dict):
        raise DamagedFile(f"{CHECKSUMS} is damaged")
    found = file_checksums(path)
    for name, digest in sorted(expected.items()):
        if found.get(name) != digest:
            folder = name.split("/")[0]
            if "/" in name and not (path / folder).exists():
                raise DamagedFile(f"{folder}/ is missing")  # a whole directory gone, not one file
            what = "is missing" if name not in found else "does not match its checksum (damaged on disk)"
            raise DamagedFile(f"{name} {what}")


class CheckpointMismatch(Exception):
    """A readable checkpoint of another kind of run (another model, fine-tuning mode, precision):
    an older checkpoint of the same run would not load either, so the fix is in the options."""


def load_model_weights(model: Any, model_dir: Path, lora: bool) -> None:
    from safetensors.torch import load_file

    if not any(model_dir.glob("*.safetensors")):  # not another architecture: no weights at all
        raise DamagedFile(
            f"{model_dir.name}/ holds no weights" if model_dir.is_dir() else f"{model_dir.name}/ is missing"
        )
    adapter = (model_dir / "adapter_model.safetensors").exists()
    if adapter != lora:
        written, running = (
            ("a LoRA adapter", "fine-tunes all weights")
            if adapter
            else ("full weights", "trains a LoRA adapter")
        )
        raise CheckpointMismatch(
            f"its model is {written} and this run {running}; resume with --finetune {'lora' if adapter else 'full'}"
        )
    try:
        if lora:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(model, load_file(model_dir / "adapter_model.safetensors"))
            return
        state: dict[str, torch.Tensor] = {}
        for shard in sorted(model_dir.glob("*.safetensors")):
            state.update(load_file(shard))
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:
        if "size mismatch" not in str(e):
            raise
        found = _SIZE_MISMATCH.search(str(e))
        detail = f"{found[1]} is {found[2]} there, {found[3]} here" if found else str(e).splitlines()[0][:120]
        raise CheckpointMismatch(
            f"its model has other shapes than this run's ({detail}); resume with the run's own "
            "--model, --tiny-size and --lora-r"
        ) from None
    # Tied embeddings are stored once; anything else missing means a different architecture.
    missing = [k for k in missing if "lm_head" not in k]
    if missing or unexpected:
        raise CheckpointMismatch(
            f"its model is another architecture than this run's (missing {missing[:3]}, unexpected "
            f"{unexpected[:3]}); resume with the run's own --model"
        )


def _older_checkpoint_hint(path: Path) -> str:
    older = [p for _, p in checkpoints(path.parent.parent) if p != path]
    return f"; move it aside to resume from {older[-1].name}" if older else ""


def load_checkpoint(
    path: Path,
    cfg: Any,
    model: Any,
    optimizer: Any,
    scheduler: Any,
    lora: bool,
    rank: int = 0,
    world: int = 1,
) -> dict[str, Any]:
    """Restore model, optimizer, scheduler and this rank's RNG, then set the learning rate and
    weight decay of `cfg` (train's or sft's: options given with --resume; optim.resume_schedule);
    return the trainer state.

    A checkpoint that cannot be read (damaged, edited, from another model or process count) is a
    UserError naming it and what to do, not a traceback from deep inside torch."""
    part = "trainer_state.json"  # what is being read, for the message: torch's own can be cryptic
    try:
        state = json.loads((path / part).read_text())  # first: the cheapest to find damaged
        if not isinstance(state, dict) or not isinstance(state.get("step"), int):
            raise DamagedFile(f"{part} is not a trainer state (no step)")
        verify_checksums(path)
        part = "rng.pt"
        ranks = torch.load(path / part, weights_only=True)["ranks"]
        if len(ranks) != world:  # each process's problem stream continues its own share
            raise UserError(
                f"checkpoint {path} was written by {len(ranks)} process(es), not {world}; resume with as many"
            )
        part = "model"
        load_model_weights(model, path / part, lora)
        part = "optimizer.pt"
        saved = torch.load(path / part, weights_only=True)
        check_same_precision(saved, optimizer, model)
        optimizer.load_state_dict(saved)
        part = "scheduler.pt"
        scheduler.load_state_dict(torch.load(path / part, weights_only=True))
        set_rng_state(ranks[rank])
    except UserError:
        raise
    except CheckpointMismatch as e:
        raise UserError(f"cannot resume from {path}: {e}") from None
    except DamagedFile as e:
        raise UserError(f"cannot resume from {path}: its {e}{_older_checkpoint_hint(path)}") from None
    except Exception as e:  # torch, safetensors and pickle raise many kinds
        hint = _older_checkpoint_hint(path)
        why = " ".join(str(e).split())[:300] or type(e).__name__
        raise UserError(
            f"cannot resume from {path}: its {part} is damaged or unreadable ({why}){hint}"
        ) from e
    resume_schedule(cfg, optimizer, scheduler)  # outside the try: this run's options, not the file's
    return state


def check_same_precision(saved: Any, optimizer: Any, model: Any) -> None:
    """Half-precision weights train through float32 masters (master_weights.py), which a float32
    run has no place for, and the other way round: a run started on a CPU (--dtype auto: float32)
    and resumed where a GPU makes auto bf16 would otherwise fail deep inside torch."""
    from .master_weights import MasterWeightOptimizer

    has_masters = isinstance(saved, dict) and "masters" in saved
    wants_masters = isinstance(optimizer, MasterWeightOptimizer)
    if has_masters == wants_masters:
        return
    names = {dtype: name for name, dtype in DTYPES.items()}
    ours = next(p.dtype for p in model.parameters() if p.requires_grad)
    ours_name = names.get(ours, str(ours))
    if has_masters:
        why = "its weights were trained in half precision (bf16 or fp16)"
        fix = "resume with the run's --dtype, on a device that has it"
    else:
        why, fix = "its weights were trained in fp32", "resume with --dtype fp32"
    raise CheckpointMismatch(f"{why} and this run holds them in {ours_name}; {fix}")


def save_final_model(policy: Policy, path: Path, merge: bool, card: dict[str, Any] | None = None) -> None:
    """save_pretrained output, loadable by plain transformers (+ peft for an adapter); atomic."""
    with atomic_directory(path) as tmp:
        model = policy.model
        # An adapter is only loadable beside the base it names; a model built in memory (the
        # built-in tiny one) has no name to give, so its adapter is saved merged.
        if policy.lora and (merge or not model.active_peft_config.base_model_name_or_path):
            model = model.merge_and_unload()
        write_model_dir(tmp, model, policy.tokenizer, card or {})


def write_model_dir(
    path: Path, model: Any, tokenizer: Any = None, card: dict[str, Any] | None = None
) -> None:
    """The weights (or adapter), the tokenizer and the model card (how it was prompted), as
    load_model_and_tokenizer and read_model_card read them back."""
    save_weights(model, path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    if card is not None:
        from ..models.card import model_card_markdown
        from ..provenance import provenance

        (path / MODEL_CARD).write_text(json.dumps({**card, "axiom_rl": provenance()}, indent=1) + "\n")
        (path / "README.md").write_text(model_card_markdown(card, model, tokenizer))
