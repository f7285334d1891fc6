"""The training passes' speed-ups, put into a loaded model as a run's `Speed` says."""

from __future__ import annotations

from typing import Any

import torch

from . import Speed, attention, cpu_matmul, rms_norm, rotary
from .activation_memory import lean_mlp_activations


def install_speed_ups(network: Any, speed: Speed, device: torch.device, frozen: bool = False) -> None:
    """The training passes' speed-ups that `speed` turns on, in `network` (each leaves a model it
    does not apply to as it is). `frozen`: the reference, whose weights never change."""
    if speed.lean_mlp:  # the same numbers; one activation fewer per MLP layer at training's peak
        lean_mlp_activations(network, fused=speed.fused_silu)
    if speed.rms_norm_kernel:
        rms_norm.fuse_rms_norms(network)  # one pass each way on a float32 CPU (rms_norm.py)
    if speed.rotary_kernel:
        rotary.fuse_rotary(network)  # RoPE likewise, the same bits (rotary.py)
    if speed.onednn_linear:
        if frozen and speed.pack_reference:  # its weights laid out for oneDNN once, not every call
            cpu_matmul.pack_frozen_linear_layers(network)
        cpu_matmul.route_linear_layers(network)  # oneDNN's matmuls on CPUs where MKL is slow
    if speed.attention_kernel and device.type == "cpu":
        attention.use_for(network)  # the training passes' attention kernel (attention.py)
