"""What produced a run or a model: axiom-rl's version and, from a git checkout, its commit."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path
from typing import Any

from . import __version__


@cache
def provenance() -> dict[str, Any]:
    """{"version": ..., "commit": the checkout's HEAD or None (an installed copy has no git),
    "modified": whether tracked files differ from it (None without a commit)}."""
    root = Path(__file__).resolve().parent.parent
    commit = modified = None
    if (root / ".git").exists():
        try:
            head = subprocess.run(
                ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
            )
            if head.returncode == 0:
                commit = head.stdout.strip()
                status = subprocess.run(
                    ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                    capture_output=True, text=True, timeout=10,
                )  # fmt: skip
                modified = bool(status.stdout.strip()) if status.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):  # no git on this machine
            pass
    return {"version": __version__, "commit": commit, "modified": modified}
