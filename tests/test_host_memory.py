"""keep_freed_memory: large tensors freed and allocated again reuse mapped pages."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# Ten steps that each allocate two 64 MB tensors and free them, as activations come and go.
PROBE = """
import resource, sys
import torch
if sys.argv[1] == "keep":
    from axiom_rl.speed.host_memory import keep_freed_memory
    assert keep_freed_memory()
def step():
    x = torch.ones(16 << 20)
    y = x * 2
    del x
    y.sum()
step(); step()  # warm-up: the heap grows to its working size (page faults either way)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def minor_faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc malloc settings"
)
def test_large_tensors_reuse_pages_after_keep_freed_memory():
    fresh = (10 * 2 * 64 << 20) // 4096  # pages that 20 fresh 64 MB blocks fault in
    default, kept = minor_faults("default"), minor_faults("keep")
    assert default > fresh * 0.9  # by default glibc mmaps each block above its threshold, unmaps on free
    assert kept < default / 3  # with the settings, freed blocks are mostly reused
