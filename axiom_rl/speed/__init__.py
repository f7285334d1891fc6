"""Speed settings: every speed-up of axiom-rl's, named, chosen per device, saved with the run.

A speed-up changes how a result is computed, never what it means: the same step to float32
rounding, or to the bit where its docstring says so. Each is a field of `Speed`, resolved once
for a run (`Speed.resolve`: defaults per device, then the config's `speed:` section), written
into the run's config.json, and handed to what it switches (the model's loading, the rollout
backend, the trainer's passes). There is no module-level switch: two runs in one process may
run with different settings, and a benchmark sets these fields as a user would.

`speed: plain` (`--speed plain`) turns every one off: plain PyTorch and transformers throughout
(tests/test_speed.py runs a few steps both ways and compares them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

from ..errors import UserError


@dataclass(frozen=True)
class Speed:
    """Every speed-up, each on or off. `auto` values are resolved per device by `resolve`."""

    decode_step: bool = True
    """The rollout's token step in C++ (speed/decode_step.cpp) where it builds and applies:
    a float32 model on a CPU. Off: the Python step."""
    decode_own_kernels: bool = True
    """The C++ step's own attention and element-wise loops (off: ATen's calls in it, the Python
    step's bits exactly)."""
    decode_linear_kernel: bool = True
    """The C++ step's own kernel for the rollout's float32 linear layers where the CPU has one
    (off: oneDNN's, as in training, or F.linear)."""
    decode_split_rows: bool = True
    """The C++ step's rows split between the threads, each taking its share through the step
    (off: every kernel splits its own work by columns; the same bits)."""
    drop_finished_rows: bool = True
    """Rows that have finished leave the C++ step (the same tokens)."""
    static_decode: bool = True
    """On a GPU, the decode step with static shapes, captured once per rollout as a CUDA graph and
    replayed for each token (off: launched op by op)."""
    compile_decode: bool = True
    """On a GPU, the static decode step's pieces compiled by torch.compile before capture."""
    replay_linear_outputs: bool = True
    """The first update after a rollout replays the rollout's linear-layer outputs in its forward
    pass (speed/replay.py; to float32 rounding)."""
    share_prompt_passes: bool = True
    """The reference, old and training passes run each group's prompt once, not G times
    (train/batch.py). Auto: on a CPU (on an H100 it cost more than it saved)."""
    bucket_lengths: bool = True
    """Gradient accumulation's micro-batches cut to their own lengths and grouped by length."""
    attention_kernel: bool = True
    """The training passes' attention in axiom-rl's CPU kernel (speed/attention.py). Auto: on a
    CPU."""
    rms_norm_kernel: bool = True
    """RMSNorm fused in one pass each way on a float32 CPU (speed/rms_norm.py; the same bits)."""
    rotary_kernel: bool = True
    """Rotary embedding fused likewise (speed/rotary.py; the same bits)."""
    lean_mlp: bool = True
    """The gated MLP's forward that keeps one activation fewer for backward
    (speed/activation_memory.py; the same numbers)."""
    fused_silu: bool = True
    """In that forward, silu(gate) * up and its backward in one pass each on a float32 CPU (the
    same bits as ATen's calls)."""
    onednn_linear: bool = True
    """float32 linear layers through oneDNN on CPUs where MKL runs its slow path (AMD's)
    (speed/cpu_matmul.py; the rollout's too, where the C++ step's own kernel does not run)."""
    pack_reference: bool = True
    """The frozen reference's weights laid out for oneDNN once at load, not on every call (the
    same bits)."""
    fused_adamw: bool = True
    """AdamW's fused implementation (one kernel over all parameters), where PyTorch has it for
    the device."""
    keep_freed_memory: bool = True
    """On a CPU, glibc keeps freed memory mapped for the next step's activations
    (speed/host_memory.py)."""

    @classmethod
    def plain(cls) -> Speed:
        return cls(**{f.name: False for f in fields(cls)})

    @classmethod
    def resolve(cls, spec: dict[str, Any] | None, device_type: str) -> Speed:
        """The settings of a run on `device_type` ("cpu", "cuda"): each speed-up's default for that
        device, then `spec` (a config's `speed:` section): {"preset": "auto" | "plain"} and any
        field by name, true or false. Unknown names and values are one-line errors."""
        spec = dict(spec or {})
        preset = spec.pop("preset", "auto")
        if preset not in ("auto", "plain"):
            raise UserError(f"speed preset must be 'auto' or 'plain', got {preset!r}")
        base = cls.plain() if preset == "plain" else cls.for_device(device_type)
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(spec) - names)
        if unknown:
            raise UserError(
                f"unknown speed setting {unknown[0]!r}; the settings are: preset, {', '.join(sorted(names))}"
            )
        for name, value in spec.items():
            if not isinstance(value, bool):
                raise UserError(f"speed setting {name} must be true or false, got {value!r}")
        return dataclasses.replace(base, **spec)

    @classmethod
    def for_device(cls, device_type: str) -> Speed:
        """The defaults: everything that pays on this device (the C++ decode step unless the
        environment says AXIOM_RL_DECODE_STEP=python)."""
        from . import native

        cpu = device_type == "cpu"
        return cls(
            decode_step=native.choice() != "python",
            share_prompt_passes=cpu,
            attention_kernel=cpu,
            keep_freed_memory=cpu,
        )

    def as_dict(self) -> dict[str, bool]:
        return dataclasses.asdict(self)


def parse_speed_option(text: str) -> dict[str, Any]:
    """`--speed` on the command line: a preset (auto, plain), or settings as name=on|off, comma
    separated, after an optional preset: `plain,attention_kernel=on`."""
    spec: dict[str, Any] = {}
    for part in (p.strip() for p in str(text).split(",") if p.strip()):
        name, sep, value = part.partition("=")
        if not sep:
            spec["preset"] = name
            continue
        words = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}
        if value.lower() not in words:
            raise UserError(f"--speed {name}={value}: give on or off")
        spec[name] = words[value.lower()]
    return spec
