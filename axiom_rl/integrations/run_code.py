"""SandboxFusion's `run_code` for Python on our sandbox: a program run as a script, with stdin,
its stdout, stderr and exit code back.

The program runs inside the sandbox's candidate process as `python main.py` would run it
(`__name__ == "__main__"`, `input()` and `sys.stdin` reading the given stdin, `sys.exit(n)` its
exit code, an uncaught exception's traceback on stderr and exit code 1), under the sandbox's
limits with the request's time and memory. Output written past Python's `sys.stdout` (os.write
on fd 1) goes to the sandbox's own output, not to the reply. The answer has SandboxFusion's
shape, which verl's `sandbox_fusion` client reads (statuses "Success", "Failed",
"SandboxError"; a run's "Finished", "TimeLimitExceeded", "Error").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..sandbox import Limits, Sandbox, decode_value
from ..types import TIMEOUT
from ..verifier import death

# Runs inside the sandbox (the candidate), as the code of an io-mode job whose one call is
# __axiom_run__(program, stdin): the program is data until then. Stdlib only.
RUNNER = """
def __axiom_run__(program, stdin, max_chars):
    import io, sys, traceback
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin), out, err
    code = 0
    try:
        exec(compile(program, "main.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code & 0xFF
        else:
            print(e.code, file=err)
            code = 1
    except Exception as e:  # the program's error; the sandbox's own (its CPU alarm) go on up
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None  # not this frame
        traceback.print_exception(type(e), e, tb, file=err)
        code = 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    return [out.getvalue()[:max_chars], err.getvalue()[:max_chars], code]
"""


def run_program(
    sandbox: Sandbox, program: str, stdin: str, run_timeout: float, memory_mb: int, max_output_chars: int
) -> dict[str, Any]:
    """SandboxFusion's run_result for `program`: {"status", "execution_time", "return_code",
    "stdout", "stderr"}; and the reply's top-level status."""
    limits: Limits = replace(
        sandbox.limits.with_timeout(run_timeout), memory_mb=memory_mb, output_bytes=4 * max_output_chars
    )
    run = sandbox.run_calls(RUNNER, "__axiom_run__", [[program, stdin, max_output_chars]], limits)
    result = {
        "status": "Finished",
        "execution_time": round(run.wall_s, 6),
        "return_code": None,
        "stdout": "",
        "stderr": "",
    }
    if run.internal_error:
        return {
            "status": "SandboxError",
            "message": run.internal_error[:300],
            "compile_result": None,
            "run_result": None,
            "files": {},
        }
    messages = [m for m in run.messages if isinstance(m, dict)]
    call = next((m for m in messages[1:] if m.get("i") == 0), None)
    if call is not None and call.get("ok"):
        try:
            stdout, stderr, code = decode_value(call.get("value"))
            if not (isinstance(stdout, str) and isinstance(stderr, str) and isinstance(code, int)):
                raise ValueError("not (stdout, stderr, code)")
        except (ValueError, TypeError):  # the program replaced our runner's answer: its doing
            result.update(status="Error", return_code=1, stderr="the program's result was malformed")
        else:
            result.update(
                return_code=code, stdout=stdout[:max_output_chars], stderr=stderr[:max_output_chars]
            )
    elif call is not None and call.get("kind") == "timeout":
        result.update(status="TimeLimitExceeded")
    elif call is not None:
        result.update(status="Error", return_code=1, stderr=str(call.get("error", ""))[:max_output_chars])
    else:  # it died before answering: out of time (the wall clock), memory, output, a signal
        status, why = death(run)
        if status == TIMEOUT:
            result.update(status="TimeLimitExceeded")
        else:
            result.update(status="Error", return_code=1, stderr=why)
    ok = result["status"] == "Finished" and result["return_code"] == 0
    return {
        "status": "Success" if ok else "Failed",
        "message": "",
        "compile_result": None,
        "run_result": result,
        "files": {},
    }
