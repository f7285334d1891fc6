"""axiom-rl installed as users install it (`pip install .`, not editable): its package then sits
in the interpreter's site-packages, inside what a submission may read, and every task's reference
solution with it. These tests build such an install in a fresh virtual environment and attack it."""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["under-tmp", "elsewhere"])
def installed(request, tmp_path_factory) -> Path:
    """The interpreter of a fresh venv holding a plain (non-editable) install of this checkout:
    under /tmp (the submission sees it moved, its own /tmp empty) and elsewhere (in place)."""
    if request.param == "under-tmp":
        top = tmp_path_factory.mktemp("installed")
    else:
        top = REPO / ".pytest_cache" / "installed"
        shutil.rmtree(top, ignore_errors=True)
        top.mkdir(parents=True)
        request.addfinalizer(lambda: shutil.rmtree(top, ignore_errors=True))
    source = top / "source"  # a copy: pip builds in the tree it is given
    source.mkdir()
    shutil.copytree(REPO / "axiom_rl", source / "axiom_rl", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    env = top / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    python = env / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    # Built here (the venv has no setuptools), installed there as a wheel.
    wheels = top / "wheels"
    subprocess.run(
        [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (wheel,) = wheels.glob("axiom_rl-*.whl")
    subprocess.run(
        [*pip, "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    return python


ATTACK = textwrap.dedent(
    """
    import json, sys
    from axiom_rl.sandbox import Sandbox
    import os, axiom_rl
    PACKAGE_DIR = os.path.dirname(axiom_rl.__file__)
    from axiom_rl.tasks import TASKS, get_task
    from axiom_rl.tasks.base import CodeTask
    from axiom_rl.verifier import score_code
    import random

    assert "site-packages" in PACKAGE_DIR, PACKAGE_DIR  # the plain install, not the checkout
    names = sorted(n for n in TASKS if isinstance(get_task(n), CodeTask))
    probe = '''
    import os, sys
    def f():
        seen = {"import": "imported"}
        try:
            import axiom_rl.tasks
        except Exception as e:
            seen["import"] = type(e).__name__
        # Where the installer put it, and wherever the interpreter's paths lead in the sandbox.
        for where in [%r] + [p + "/axiom_rl" for p in sys.path if p]:
            try:
                seen[where] = sorted(os.listdir(where))
            except OSError as e:
                seen[where] = e.errno
            try:
                seen[where + " read"] = len(open(where + "/tasks/code/dp.py").read())
            except OSError as e:
                seen[where + " read"] = e.errno
        return seen
    ''' % PACKAGE_DIR
    passed = {}
    # With namespaces, and without (the weaker mode, for kernels that refuse them).
    for namespaces in (True, False):
        with Sandbox(workers=2, namespaces=namespaces) as sandbox:
            if namespaces:
                seen = sandbox.run_calls(probe, "f", [[]]).messages[1]
            for name in names:
                problem = get_task(name).generate(random.Random(0), 3)
                cheat = (
                    f"```python\\ndef {problem.entry_point}(*args):\\n"
                    f"    from axiom_rl.tasks import get_task\\n"
                    f"    return type(get_task({name!r})).solution(*args)\\n```"
                )
                passed[f"{name} namespaces={namespaces}"] = score_code(problem, cheat, sandbox).status
    print(json.dumps({"tasks": names, "passed": passed, "probe": seen, "package": PACKAGE_DIR}))
    """
)


def test_a_plain_install_keeps_its_reference_solutions_from_submissions(installed):
    proc = subprocess.run(
        [str(installed), "-c", ATTACK], capture_output=True, text=True, timeout=600, cwd=installed.parents[2]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert len(out["tasks"]) >= 20
    # Importing the reference and calling it passes none of the code tasks.
    assert not [name for name, status in out["passed"].items() if status == "passed"], out["passed"]
    assert all(status == "runtime_error" for status in out["passed"].values()), out["passed"]
    seen = out["probe"]
    assert seen["ok"], seen
    found = dict(seen["value"]["$d"])  # the codec's dict: [[key, value], ...]
    assert found.pop("import") == "ModuleNotFoundError", found
    listings = {where: v for where, v in found.items() if not where.endswith(" read")}
    reads = {where: v for where, v in found.items() if where.endswith(" read")}
    # Its directory is empty where the interpreter's paths lead (the site-packages it was
    # installed in, moved or not), or not there at all; none of its files can be read.
    assert [] in listings.values(), listings
    assert all(v in ([], errno.ENOENT) for v in listings.values()), listings
    assert all(v == errno.ENOENT for v in reads.values()), reads
    under_tmp = out["package"].startswith("/tmp/")
    assert listings[out["package"]] == (errno.ENOENT if under_tmp else []), listings
